import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createPullClient, createPullWorker, OwnershipLostError } from '../../lib/index.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { expireLease, insertPullRows, memoryLogger, readPullRows } from './pull-fixtures.ts';

/** A promise with its resolve function outside. */
function gate(): { promise: Promise<void>; open: () => void } {
  let open!: () => void;
  const promise = new Promise<void>((resolve) => (open = resolve));
  return { promise, open };
}

describe('a pull worker that lost its claim', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({ database: { poolMax: 4 } });
    await db.query(`CREATE TABLE "${db.schema}".shipments (idempotency_key text, owner text)`);
  });
  after(async () => db.drop());

  const shipments = async () => db.query<{ idempotency_key: string; owner: string }>(`SELECT idempotency_key, owner FROM "${db.schema}".shipments ORDER BY owner`);

  it('rolls its business transaction back when the completion changes no row, and the new owner completes', async () => {
    const [id] = await insertPullRows(db, 'stale', [{ key: 's1', aggregateId: 'S' }]);
    const metrics = new QueueBoxMetrics({ namespace: 'test', serviceName: 'test', write: () => {} });
    const inside = gate();
    const proceed = gate();
    let seenError: unknown;
    const slow = createPullWorker({
      driver: db.newDriver(),
      source: 'stale',
      // Renewal every 20 s: the test expires the lease long before the first renewal.
      leaseMs: 60_000,
      metrics,
      logger: memoryLogger(),
      handler: async (message, { transaction }) => {
        try {
          await transaction(async (tx) => {
            await tx.query(`INSERT INTO "${db.schema}".shipments VALUES ($1, 'old owner')`, [message.idempotencyKey]);
            inside.open();
            await proceed.promise;
          });
        } catch (error) {
          seenError = error;
          throw error;
        }
      },
    });
    const pass = slow.runOnce();
    await inside.promise;
    // The old owner froze past its lease; another worker re-claims and finishes the row.
    await expireLease(db, id!);
    const fresh = createPullWorker({
      driver: db.newDriver(),
      source: 'stale',
      logger: memoryLogger(),
      metrics: false,
      handler: async (message, { transaction }) => {
        await transaction(async (tx) => {
          await tx.query(`INSERT INTO "${db.schema}".shipments VALUES ($1, 'new owner')`, [message.idempotencyKey]);
        });
      },
    });
    const freshSummary = await fresh.runOnce();
    assert.equal(freshSummary.completed, 1);
    proceed.open();
    const slowSummary = await pass;

    assert.ok(seenError instanceof OwnershipLostError, `handler saw OwnershipLostError, got ${String(seenError)}`);
    assert.deepEqual([slowSummary.completed, slowSummary.claimsLost, slowSummary.retried, slowSummary.dead], [0, 1, 0, 0]);
    assert.equal(metrics.value('claimsLost', { component: 'pull' }), 1);
    assert.deepEqual(await shipments(), [{ idempotency_key: 's1', owner: 'new owner' }]);
    const [row] = await readPullRows(db, 'stale');
    assert.deepEqual([row!.state, row!.attempt], ['processed', 1], 'the lost lease of the old owner was an attempt');
  });

  it('aborts the handler’s signal when a renewal is fenced, and writes nothing more to the row', async () => {
    await db.query(`DELETE FROM "${db.schema}".shipments`);
    const [id] = await insertPullRows(db, 'renew', [{ key: 'r1' }]);
    const started = gate();
    let aborted = false;
    let transactionError: unknown;
    const worker = createPullWorker({
      driver: db.newDriver(),
      source: 'renew',
      // The shortest lease: renewals every ~333 ms.
      leaseMs: 1000,
      logger: memoryLogger(),
      metrics: false,
      handler: async (message, { signal, transaction }) => {
        started.open();
        await new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
        aborted = true;
        try {
          await transaction(async (tx) => {
            await tx.query(`INSERT INTO "${db.schema}".shipments VALUES ($1, 'too late')`, [message.idempotencyKey]);
          });
        } catch (error) {
          transactionError = error;
        }
      },
    });
    const pass = worker.runOnce();
    await started.promise;
    // Someone else takes the row over (its token changes): the next renewal changes no row.
    const [before] = await readPullRows(db, 'renew');
    await db.query(`UPDATE "${db.schema}".inbox SET claim_token = gen_random_uuid() WHERE id = $1`, [id]);
    const summary = await pass;
    assert.ok(aborted, 'the signal fired');
    assert.ok(transactionError instanceof OwnershipLostError);
    assert.equal(summary.claimsLost, 1);
    assert.deepEqual(await shipments(), []);
    const [afterRow] = await readPullRows(db, 'renew');
    assert.deepEqual([afterRow!.state, afterRow!.attempt], ['processing', 0], 'no retry, no completion by the old owner');
    assert.notEqual(afterRow!.claim_token, before!.claim_token);
  });

  it('gets ownership-lost from the low-level client on every fenced write after a re-claim', async () => {
    const [id] = await insertPullRows(db, 'low', [{ key: 'l1' }]);
    const old = createPullClient(db.driver);
    const [mine] = await old.claim('low', { batch: 1, leaseMs: 30000 });
    await expireLease(db, id!);
    const [theirs] = await createPullClient(db.newDriver()).claim('low', { batch: 1, leaseMs: 30000 });
    assert.equal(theirs!.id, id);
    const outcomes = await Promise.all([
      old.renew(mine!.claim, 30000),
      old.retry(mine!.claim, 1000, 'x'),
      old.dead(mine!.claim, 'x'),
      db.pool.connect().then(async (tx) => {
        try {
          await tx.query('BEGIN');
          return await old.complete(tx, mine!.claim);
        } finally {
          await tx.query('ROLLBACK');
          tx.release();
        }
      }),
    ]);
    for (const outcome of outcomes) assert.deepEqual(outcome, { ok: false, reason: 'ownership-lost' });
  });
});
