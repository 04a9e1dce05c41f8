/**
 * A pull worker claims at most the handler slots free when it claims (`min(batch, concurrency -
 * running)`), so no claimed row waits in the worker behind the handlers with its lease running.
 *
 * Before, a worker claimed a whole `batch` and renewed every waiting row with a statement of its
 * own each third of the lease: with batch 1000, leaseMs 1000 and concurrency 1 the renewals could
 * not keep up, waiting rows lost their lease, and the next claim charged them an attempt, so rows
 * were dead-lettered that no handler had run on. Also here: the claims due together are renewed
 * in one statement, and a stop that comes while a claim is under way releases the rows it
 * returns without spending an attempt.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Driver } from '../../lib/db/driver.ts';
import { createPullWorker } from '../../lib/index.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { createGate, delay, waitUntil } from '../helpers/wait.ts';
import { insertPullRows, memoryLogger, readPullRows } from './pull-fixtures.ts';

describe('pull worker: claims follow the free handler slots', () => {
  let db: TestDatabase;
  before(async () => {
    // The default pool of 2: concurrency 1 + 1.
    db = await createTestDatabase({});
  });
  after(async () => db.drop());

  it('batch 1000, leaseMs 1000, concurrency 1: every row is handled once, none loses its lease or is dead-lettered', { timeout: 120_000 }, async () => {
    const ROWS = 300;
    await insertPullRows(db, 'big', Array.from({ length: ROWS }, (_, i) => ({ key: `k${i}` })));
    const metrics = new QueueBoxMetrics({ namespace: 'test', serviceName: 'test', write: () => {} });
    const runs = new Map<string, number>();
    let claimsSent = 0;
    let largestClaim = 0;
    const base = db.newDriver();
    const driver: Driver = Object.create(base, {
      pullClaimMany: {
        value: async (p: Parameters<Driver['pullClaimMany']>[0]) => {
          claimsSent++;
          largestClaim = Math.max(largestClaim, p.limit);
          return base.pullClaimMany(p);
        },
      },
    });
    const worker = createPullWorker({
      driver,
      config: db.config,
      source: 'big',
      batch: 1000,
      leaseMs: 1000,
      concurrency: 1,
      pollMs: 50,
      // A lease lost while a row waited would make it dead at its next claim.
      retry: { maxAttempts: 1 },
      metrics,
      logger: memoryLogger(),
      handler: async (message, { transaction }) => {
        runs.set(message.idempotencyKey, (runs.get(message.idempotencyKey) ?? 0) + 1);
        await delay(20);
        await transaction(async () => {});
      },
    });
    await worker.start();
    let summary;
    try {
      await waitUntil('every row is settled', async () => (await readPullRows(db, 'big')).every((r) => r.state === 'processed' || r.state === 'dead'), 100_000);
    } finally {
      summary = await worker.stop({ timeoutMs: 0 });
    }
    const rows = await readPullRows(db, 'big');
    const states: Record<string, number> = {};
    for (const r of rows) states[`${r.state}/attempt ${r.attempt}`] = (states[`${r.state}/attempt ${r.attempt}`] ?? 0) + 1;
    assert.deepEqual(states, { [`processed/attempt 0`]: ROWS }, JSON.stringify(rows.find((r) => r.state === 'dead')));
    assert.equal(summary!.claimsLost, 0);
    assert.equal(summary!.dead, 0);
    assert.equal(metrics.value('claimsLost', { component: 'pull' }), 0);
    assert.deepEqual([...new Set(runs.values())], [1], 'one handler run per row');
    assert.equal(largestClaim, 1, 'each claim asked for the one free slot');
    assert.ok(claimsSent >= ROWS, `a claim per row at concurrency 1 (${claimsSent})`);
  });
});

describe('pull worker: renewals and a stop during a claim', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({ database: { poolMax: 4 } });
  });
  after(async () => db.drop());

  it('renews the claims due together in one statement', async () => {
    await insertPullRows(db, 'together', [{ key: 'a' }, { key: 'b' }, { key: 'c' }]);
    const base = db.newDriver();
    const shared: number[] = [];
    let single = 0;
    const driver: Driver = Object.create(base, {
      inboxRenewMany: {
        value: async (...args: Parameters<Driver['inboxRenewMany']>) => {
          shared.push(args[0].claims.length);
          return base.inboxRenewMany(...args);
        },
      },
      pullRenew: {
        value: async (...args: Parameters<Driver['pullRenew']>) => {
          single++;
          return base.pullRenew(...args);
        },
      },
    });
    const allStarted = createGate();
    let started = 0;
    const summary = await createPullWorker({
      driver,
      config: db.config,
      source: 'together',
      batch: 3,
      concurrency: 3,
      leaseMs: 1200, // renewal every 400 ms
      metrics: false,
      logger: memoryLogger(),
      handler: async (_message, { signal, transaction }) => {
        if (++started === 3) allStarted.open();
        await allStarted.wait();
        await delay(1000); // two renewals
        if (signal.aborted) return;
        await transaction(async () => {});
      },
    }).runOnce();
    assert.deepEqual([summary.claimed, summary.completed, summary.claimsLost], [3, 3, 0]);
    assert.ok(shared.length >= 2 && shared.every((n) => n === 3), `one statement per renewal round for the three claims: ${JSON.stringify(shared)}`);
    assert.equal(single, 0, 'no statement per row');
  });

  it('releases the rows of a claim under way when the stop came, spending no attempt', async () => {
    await insertPullRows(db, 'midclaim', [{ key: 'm1' }, { key: 'm2' }, { key: 'm3' }]);
    const base = db.newDriver();
    const claimSent = createGate();
    const claimMayAnswer = createGate();
    const driver: Driver = Object.create(base, {
      pullClaimMany: {
        value: async (p: Parameters<Driver['pullClaimMany']>[0]) => {
          const rows = await base.pullClaimMany(p);
          claimSent.open();
          await claimMayAnswer.wait();
          return rows;
        },
      },
    });
    const handled: string[] = [];
    const worker = createPullWorker({
      driver,
      config: db.config,
      source: 'midclaim',
      batch: 5,
      concurrency: 2,
      metrics: false,
      logger: memoryLogger(),
      handler: async (message) => void handled.push(message.idempotencyKey),
    });
    const starting = worker.start();
    await claimSent.wait();
    const stopping = worker.stop();
    claimMayAnswer.open();
    await starting;
    const summary = await stopping;
    assert.deepEqual(handled, []);
    assert.deepEqual([summary!.claimed, summary!.released, summary!.completed], [2, 2, 0]);
    const rows = await readPullRows(db, 'midclaim');
    // Released (m1, m2: their tokens stay on the pending rows) or never claimed (m3).
    assert.deepEqual(rows.map((r) => [r.idempotency_key, r.state, r.attempt, r.claim_token === null]), [
      ['m1', 'pending', 0, false],
      ['m2', 'pending', 0, false],
      ['m3', 'pending', 0, true],
    ]);
  });
});
