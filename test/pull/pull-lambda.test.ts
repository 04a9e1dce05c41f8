import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createPullWorker } from '../../lib/index.ts';
import type { Driver } from '../../lib/db/driver.ts';
import { createDeadline, sleep } from '../../lib/runtime/deadline.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { fakeLambdaContext } from '../helpers/lambda-context.ts';
import { insertPullRows, memoryLogger, readPullRows } from './pull-fixtures.ts';

/** Tolerance between the test's clock and the database clock (same host). */
const CLOCK_SLACK_MS = 50;

interface LeaseRequest {
  kind: 'claim' | 'renew';
  leaseMs: number;
  /** Test clock when the worker sent the statement, and when it returned. */
  sentAt: number;
  returnedAt: number;
}

/** The test driver, recording every lease the worker asks for (same class, so same transactions). */
function recordingDriver(db: TestDatabase): { driver: Driver; requests: LeaseRequest[] } {
  const requests: LeaseRequest[] = [];
  const base = db.driver;
  const driver: Driver = Object.assign(Object.create(base) as Driver, {
    pullClaimMany: async (p: Parameters<Driver['pullClaimMany']>[0]) => {
      const sentAt = Date.now();
      const rows = await base.pullClaimMany(p);
      requests.push({ kind: 'claim', leaseMs: p.leaseMs, sentAt, returnedAt: Date.now() });
      return rows;
    },
    pullRenew: async (p: Parameters<Driver['pullRenew']>[0]) => {
      const sentAt = Date.now();
      const renewed = await base.pullRenew(p);
      requests.push({ kind: 'renew', leaseMs: p.leaseMs, sentAt, returnedAt: Date.now() });
      return renewed;
    },
  });
  return { driver, requests };
}

/** Every lease asked for fits in the invocation time left when it was asked for. */
function assertLeasesWithin(requests: LeaseRequest[], invocationEnd: number): void {
  for (const r of requests) assert.ok(r.leaseMs <= invocationEnd - r.sentAt + CLOCK_SLACK_MS, `${r.kind} asked ${r.leaseMs} ms with ${invocationEnd - r.sentAt} ms left`);
}

describe('runOnce inside a Lambda invocation', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({ lambda: { deadlineMarginMs: 1000 } });
  });
  after(async () => db.drop());

  it('stops claiming at the deadline, releases what it did not start and never leases past the invocation', async () => {
    await insertPullRows(db, 'lambda', Array.from({ length: 40 }, (_, i) => ({ key: `m${i}` })));
    const context = fakeLambdaContext({ timeoutMs: 1800 });
    const invocationEnd = Date.now() + context.getRemainingTimeInMillis();
    const { driver, requests } = recordingDriver(db);
    const worker = createPullWorker({
      driver,
      config: db.config,
      source: 'lambda',
      leaseMs: 30000,
      batch: 3,
      logger: memoryLogger(),
      metrics: false,
      handler: async () => sleep(60),
    });
    // The pass ends config.lambda.deadlineMarginMs (1000 ms) before the invocation does.
    const summary = await worker.runOnce({ context });

    assert.ok(context.getRemainingTimeInMillis() > 0, 'returned before the invocation ended');
    assert.ok(summary.completed > 0 && summary.completed < 40, `handled some, not all: ${summary.completed}`);
    assert.equal(summary.claimed, summary.completed + summary.released);
    const claims = requests.filter((r) => r.kind === 'claim');
    assert.ok(claims.length > 0);
    assert.ok(claims.every((r) => r.sentAt <= invocationEnd - 1000 + CLOCK_SLACK_MS), 'no claim after the deadline');
    assertLeasesWithin(requests, invocationEnd);
    const rows = await readPullRows(db, 'lambda');
    assert.equal(rows.filter((r) => r.state === 'processed').length, summary.completed);
    const rest = rows.filter((r) => r.state !== 'processed');
    assert.ok(rest.every((r) => r.state === 'pending' && r.attempt === 0 && r.claim_token === null), 'the rest is claimable now');
  });

  it('bounds every renewal by the time left in the invocation', async () => {
    const [id] = await insertPullRows(db, 'renewal', [{ key: 'long' }]);
    const context = fakeLambdaContext({ timeoutMs: 4000 });
    const invocationEnd = Date.now() + context.getRemainingTimeInMillis();
    const { driver, requests } = recordingDriver(db);
    let claimedLease: Date | undefined;
    let leaseDuringHandler: Date | undefined;
    const worker = createPullWorker({
      driver,
      source: 'renewal',
      // Claimed with a full 3000 ms lease (the invocation has 4000 ms); renewed every 1000 ms,
      // when less than a lease is left, so each renewal must stop at the invocation's end.
      leaseMs: 3000,
      logger: memoryLogger(),
      metrics: false,
      handler: async (message) => {
        claimedLease = message.leaseExpiresAt;
        await sleep(2300);
        const [row] = await db.query<{ lease_expires_at: Date }>(`SELECT lease_expires_at FROM "${db.schema}".inbox WHERE id = $1`, [id]);
        leaseDuringHandler = row!.lease_expires_at;
      },
    });
    const summary = await worker.runOnce({ deadline: createDeadline(context, 500) });
    assert.equal(summary.completed, 1);
    assert.equal(summary.claimsLost, 0, 'the renewals kept the claim');
    const renewals = requests.filter((r) => r.kind === 'renew');
    assert.ok(renewals.length >= 1, 'the lease was renewed');
    assert.ok(renewals.every((r) => r.leaseMs < 3000), 'each renewal was cut to the invocation');
    assertLeasesWithin(requests, invocationEnd);
    assert.ok(leaseDuringHandler!.getTime() > claimedLease!.getTime() + 500, 'the renewed lease reached past the first one');
    const slowestRenewal = Math.max(...renewals.map((r) => r.returnedAt - r.sentAt));
    assert.ok(leaseDuringHandler!.getTime() <= invocationEnd + slowestRenewal + CLOCK_SLACK_MS, `renewed lease ${leaseDuringHandler!.toISOString()} ends with the invocation`);
  });
});
