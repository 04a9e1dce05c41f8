import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Driver } from '../../lib/db/driver.ts';
import { createPullClient, createPullWorker, type PullWorker } from '../../lib/index.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { createGate, delay } from '../helpers/wait.ts';
import { expireLease, insertPullRows, memoryLogger, readPullRows } from './pull-fixtures.ts';

/**
 * A row claimed in a batch and waiting for a handler slot (batch 2, concurrency 1) loses its claim
 * at a renewal. It counts once in `queuebox_claims_lost_total{component="pull"}` and in the
 * summary's `claimsLost`, and no handler runs on it. After a renewal that changed no row nothing
 * more is sent for it; after one that failed, a fenced release hands the row back when it is still
 * the worker's.
 */
describe('pull worker: a row waiting for a slot loses its claim', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({ database: { poolMax: 6 } });
  });
  after(async () => db.drop());

  const worker = (source: string, driver: Driver, metrics: QueueBoxMetrics, firstMayEnd: Promise<void>, firstStarted: () => void, ran: string[]): PullWorker =>
    createPullWorker({
      driver,
      config: db.config,
      source,
      leaseMs: 1500, // renewal every 500 ms
      batch: 2,
      concurrency: 1,
      metrics,
      logger: memoryLogger(),
      handler: async (message, { transaction }) => {
        ran.push(message.idempotencyKey);
        if (message.idempotencyKey === 'first') {
          firstStarted();
          await firstMayEnd;
        }
        await transaction(async () => {});
      },
    });

  it('taken by another worker: counted once, and left to its new owner', async () => {
    const [, id2] = await insertPullRows(db, 'taken', [{ key: 'first' }, { key: 'queued' }]);
    const metrics = new QueueBoxMetrics({ namespace: 'test', serviceName: 'test', write: () => {} });
    const started = createGate();
    const firstMayEnd = createGate();
    const releases: string[] = [];
    const base = db.newDriver();
    const driver = Object.create(base, {
      pullRelease: {
        value: async (...args: Parameters<Driver['pullRelease']>) => {
          releases.push(args[0].id);
          return base.pullRelease(...args);
        },
      },
    }) as Driver;
    const ran: string[] = [];
    const pass = worker('taken', driver, metrics, firstMayEnd.wait(), () => started.open(), ran).runOnce();
    await started.wait();
    // The queued row's lease ends (its owner froze) and another worker claims it: a new token.
    await expireLease(db, id2!);
    const other = await createPullClient(db.newDriver()).claim('taken', { batch: 1, leaseMs: 60_000 });
    assert.deepEqual(other.map((m) => m.id), [id2]);
    await delay(1200); // at least one renewal of the queued claim, which changes no row
    firstMayEnd.open();
    const summary = await pass;
    const [, row2] = await readPullRows(db, 'taken');
    assert.equal(row2!.claim_token, other[0]!.claim.token, 'the new owner keeps the row');
    assert.deepEqual(ran, ['first']);
    assert.deepEqual(releases, [], 'no release is sent for a claim the renewal found gone');
    assert.deepEqual([summary.completed, summary.claimsLost, summary.released], [1, 1, 0]);
    assert.equal(metrics.value('claimsLost', { component: 'pull' }), 1);
  });

  it('renewal failed: counted once, and handed back by a release without spending an attempt', async () => {
    const [, id2] = await insertPullRows(db, 'failed', [{ key: 'first' }, { key: 'queued' }]);
    const metrics = new QueueBoxMetrics({ namespace: 'test', serviceName: 'test', write: () => {} });
    const started = createGate();
    const firstMayEnd = createGate();
    const base = db.newDriver();
    let failed = false;
    const driver = Object.create(base, {
      pullRenew: {
        value: async (...args: Parameters<Driver['pullRenew']>) => {
          if (args[0].id === id2 && !failed) {
            failed = true;
            throw new Error('Connection terminated unexpectedly');
          }
          return base.pullRenew(...args);
        },
      },
    }) as Driver;
    const ran: string[] = [];
    const pass = worker('failed', driver, metrics, firstMayEnd.wait(), () => started.open(), ran).runOnce();
    await started.wait();
    await delay(700); // one renewal: the queued row's statement fails
    assert.ok(failed, 'the queued row’s renewal failed');
    firstMayEnd.open();
    const summary = await pass;
    const rows = await readPullRows(db, 'failed');
    // Handed back (pending, attempt unchanged), the same pass claimed it again and handled it.
    assert.deepEqual(ran, ['first', 'queued']);
    assert.deepEqual(rows.map((r) => [r.state, r.attempt]), [['processed', 0], ['processed', 0]]);
    assert.deepEqual([summary.claimed, summary.completed, summary.claimsLost, summary.released], [3, 2, 1, 0]);
    assert.equal(metrics.value('claimsLost', { component: 'pull' }), 1);
  });
});
