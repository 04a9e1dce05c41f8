import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createPullClient, createPullWorker, OwnershipLostError } from '../../lib/index.ts';
import { sleep } from '../../lib/runtime/deadline.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { expireLease, insertPullRows, memoryLogger, readPullRows } from './pull-fixtures.ts';

function gate(): { promise: Promise<void>; open: () => void } {
  let open!: () => void;
  const promise = new Promise<void>((resolve) => (open = resolve));
  return { promise, open };
}

describe('graceful stop of a pull worker', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({ database: { poolMax: 3 } });
    await db.query(`CREATE TABLE "${db.schema}".work (idempotency_key text)`);
  });
  after(async () => db.drop());

  // Rows no handler started are never held: a claim takes only the free slots (batch 5,
  // concurrency 1: one row). The release of rows claimed while a stop came is in
  // pull-claim-free-slots.test.ts.
  it('holds no row beyond its running handler, and lets the running handler finish', async () => {
    await insertPullRows(db, 'stop', ['s1', 's2', 's3', 's4', 's5'].map((key) => ({ key })));
    const started = gate();
    const finish = gate();
    const handled: string[] = [];
    const worker = createPullWorker({
      driver: db.driver,
      source: 'stop',
      batch: 5,
      concurrency: 1,
      logger: memoryLogger(),
      metrics: false,
      handler: async (message, { transaction }) => {
        handled.push(message.idempotencyKey);
        started.open();
        await finish.promise;
        await transaction(async (tx) => tx.query(`INSERT INTO "${db.schema}".work VALUES ($1)`, [message.idempotencyKey]));
      },
    });
    worker.start();
    await started.promise;
    assert.deepEqual(
      (await readPullRows(db, 'stop')).map((r) => r.state),
      ['processing', 'pending', 'pending', 'pending', 'pending'],
      'only the running handler’s row is claimed',
    );
    const stopping = worker.stop();
    finish.open();
    const summary = await stopping;

    assert.deepEqual(handled, ['s1']);
    assert.deepEqual([summary!.claimed, summary!.completed, summary!.released, summary!.retried], [1, 1, 0, 0]);
    const rows = await readPullRows(db, 'stop');
    assert.deepEqual(rows.map((r) => [r.idempotency_key, r.state, r.attempt, r.claim_token]), [
      ['s1', 'processed', 0, rows[0]!.claim_token],
      ['s2', 'pending', 0, null],
      ['s3', 'pending', 0, null],
      ['s4', 'pending', 0, null],
      ['s5', 'pending', 0, null],
    ]);
    const again = await createPullClient(db.driver).claim('stop', { batch: 10, leaseMs: 30000 });
    assert.deepEqual(again.map((m) => [m.idempotencyKey, m.attempt]), [['s2', 0], ['s3', 0], ['s4', 0], ['s5', 0]]);
  });

  it('after the shutdown timeout aborts the handler, commits nothing and writes nothing; the lease that then ends is the handler run\'s attempt', async () => {
    const [id] = await insertPullRows(db, 'force', [{ key: 'f1' }]);
    const started = gate();
    const release = gate();
    const done = gate();
    let signalFired = false;
    let transactionError: unknown;
    const worker = createPullWorker({
      driver: db.driver,
      source: 'force',
      leaseMs: 1000,
      logger: memoryLogger(),
      metrics: false,
      handler: async (message, { signal, transaction }) => {
        started.open();
        await release.promise;
        signalFired = signal.aborted;
        try {
          await transaction(async (tx) => tx.query(`INSERT INTO "${db.schema}".work VALUES ($1)`, [message.idempotencyKey]));
        } catch (error) {
          transactionError = error;
          throw error;
        } finally {
          done.open();
        }
      },
    });
    worker.start();
    await started.promise;
    const summary = await worker.stop({ timeoutMs: 100 });
    release.open();
    await done.promise;
    await sleep(20);

    assert.ok(signalFired, 'the handler saw its signal aborted');
    assert.ok(transactionError instanceof OwnershipLostError);
    assert.equal(summary!.abandoned, 1);
    assert.equal(summary!.retried, 0);
    assert.deepEqual(await db.query(`SELECT * FROM "${db.schema}".work WHERE idempotency_key = 'f1'`), []);
    const [row] = await readPullRows(db, 'force');
    assert.deepEqual([row!.state, row!.attempt], ['processing', 0], 'left to its lease, nothing written');
    // Once its lease runs out, the next claim takes it and counts the abandoned run as an attempt.
    await expireLease(db, id!);
    const [again] = await createPullClient(db.driver).claim('force', { batch: 1, leaseMs: 30000 });
    assert.deepEqual([again!.id, again!.attempt], [id, 1]);
  });
  it('a forced stop ends the handler\'s open business transaction at once: its locks are freed and nothing of it commits, whatever the handler still does', async () => {
    await db.query(`CREATE TABLE "${db.schema}".orders_paid (order_id text PRIMARY KEY)`);
    await insertPullRows(db, 'held', [{ key: 'h1' }]);
    const inTransaction = gate();
    const worker = createPullWorker({
      driver: db.driver,
      source: 'held',
      batch: 1,
      concurrency: 1,
      logger: memoryLogger(),
      metrics: false,
      handler: async (message, { transaction }) => {
        await transaction(async (tx) => {
          await tx.query(`INSERT INTO "${db.schema}".orders_paid VALUES ($1)`, [message.idempotencyKey]);
          inTransaction.open();
          // A slow business statement that outlasts the shutdown timeout.
          await tx.query('SELECT pg_sleep(5)');
        });
      },
    });
    worker.start();
    await inTransaction.promise;
    const summary = await worker.stop({ timeoutMs: 200 });
    // stop() resolves once the transaction was ended: checked at once, no waiting.
    assert.equal(
      (await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE query LIKE '%pg_sleep(5)%' AND pid <> pg_backend_pid()`))[0]!.n,
      0,
      'no transaction of the handler is left when stop() resolves',
    );
    assert.equal(summary!.abandoned, 1);
    // Another writer of the same business key is not held up by the abandoned transaction.
    const client = await db.pool.connect();
    try {
      await client.query(`SET lock_timeout = 200`);
      await client.query(`INSERT INTO "${db.schema}".orders_paid VALUES ('h1')`);
    } finally {
      client.release();
    }
    const [row] = await readPullRows(db, 'held');
    assert.equal(row!.state, 'processing', 'the row is left to its lease, not completed');
  });
});
