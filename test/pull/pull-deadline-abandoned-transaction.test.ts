/**
 * `runOnce({ context })` that gives up on a handler at the deadline returns only once the
 * handler's open business transaction has ended. Lambda freezes the container as soon as the
 * handler returns: a transaction still open then (here: the handler wrote a row, then awaits a
 * slow outside call) would stay idle in transaction, holding its row locks, until the container
 * thaws or dies. The default runner ends it by terminating its connection from a new one; the run
 * now waits for that, so right after `runOnce` resolves — no waiting, as a frozen container would
 * not — the transaction is gone and another writer of the same row is not held up.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { PoolClient } from 'pg';
import { createPullWorker, type PullHandler } from '../../lib/index.ts';
import { sleep } from '../../lib/runtime/deadline.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { fakeLambdaContext } from '../helpers/lambda-context.ts';
import { createGate } from '../helpers/wait.ts';
import { startStallProxy } from '../helpers/stall-proxy.ts';
import { PostgresDriver } from '../../lib/db/postgres/postgres-driver.ts';
import { insertPullRows, memoryLogger, readPullRows } from './pull-fixtures.ts';

describe('runOnce at its deadline: the abandoned handler\'s transaction is ended before it returns', () => {
  let db: TestDatabase;
  /** Ends the handlers' long outside calls once a test is over (they ignore their signal). */
  const outsideCalls = new AbortController();
  before(async () => {
    db = await createTestDatabase({ lambda: { deadlineMarginMs: 1000 } });
    await db.query(`CREATE TABLE "${db.schema}".orders_paid (order_id text PRIMARY KEY)`);
  });
  after(async () => {
    outsideCalls.abort();
    await db.drop();
  });

  /**
   * A handler that writes its business row, records its transaction's server process in `pids`,
   * opens `gate`, then awaits a slow outside call (no database statement) that outlasts the
   * invocation, deaf to its signal.
   */
  function holdingHandler(pids: number[], gate?: { open(): void }): PullHandler<PoolClient> {
    return async (message, { transaction }) => {
      await transaction(async (tx) => {
        await tx.query(`INSERT INTO "${db.schema}".orders_paid VALUES ($1)`, [message.idempotencyKey]);
        pids.push((await tx.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid);
        gate?.open();
        await sleep(120_000, outsideCalls.signal);
      });
    };
  }

  /** The server processes of `pids` still there, with their state. */
  const sessions = (pids: number[]) => db.query<{ pid: number; state: string | null }>(`SELECT pid, state FROM pg_stat_activity WHERE pid = ANY($1::int[])`, [pids]);

  /** Another writer of the business row: refused at once (lock_timeout) if the abandoned transaction still holds it. */
  async function writeSameRow(key: string): Promise<void> {
    const client = await db.pool.connect();
    try {
      await client.query(`SET lock_timeout = 200`);
      await client.query(`INSERT INTO "${db.schema}".orders_paid VALUES ($1)`, [key]);
    } finally {
      client.release();
    }
  }

  for (const { name, shutdownTimeoutMs } of [
    { name: 'a shutdownTimeoutMs shorter than the margin: given up on, and returned, before the invocation ends', shutdownTimeoutMs: 300 },
    // Given up on GIVE_UP_BEFORE_END_MS before the invocation's end, so that the ending of its
    // transaction fits before that end (pull-forced-end-before-invocation-end.test.ts).
    { name: 'the default shutdownTimeoutMs: the handler may use the margin, up to the forced end\'s reserve', shutdownTimeoutMs: undefined },
  ]) {
    it(name, { timeout: 60_000 }, async () => {
      const source = `deadline-${shutdownTimeoutMs ?? 'default'}`;
      const key = `order-${shutdownTimeoutMs ?? 'default'}`;
      await insertPullRows(db, source, [{ key }]);
      const inTransaction = createGate();
      const pids: number[] = [];
      const worker = createPullWorker({
        // A pool of its own: the abandoned handler keeps its (terminated) client until its work returns.
        driver: db.newDriver(),
        config: db.config,
        source,
        leaseMs: 30_000,
        concurrency: 1,
        shutdownTimeoutMs,
        logger: memoryLogger(),
        metrics: false,
        handler: holdingHandler(pids, inTransaction),
      });
      // Deadline 1000 ms before the invocation's end (config.lambda.deadlineMarginMs).
      const context = fakeLambdaContext({ timeoutMs: 3000 });
      const summary = await worker.runOnce({ context });
      const returnedWithMs = context.getRemainingTimeInMillis();
      // Checked at once: a frozen container would not wait any longer.
      const left = await sessions(pids);

      assert.equal(pids.length, 1, 'the handler opened its transaction and wrote its row');
      assert.equal(summary.abandoned, 1);
      assert.deepEqual(left, [], `the handler's transaction (server process ${pids[0]}) is over when runOnce returns`);
      await writeSameRow(key);
      const [row] = await readPullRows(db, source);
      assert.equal(row!.state, 'processing', 'left to its lease, not completed');
      assert.ok(returnedWithMs > 0, 'returned before the invocation ended');
      await inTransaction.wait();
    });
  }

  it('stop() that gave up on a handler resolves once the transaction it left idle is gone', { timeout: 60_000 }, async () => {
    await insertPullRows(db, 'stopped', [{ key: 'order-stop' }]);
    const inTransaction = createGate();
    const pids: number[] = [];
    const worker = createPullWorker({
      driver: db.newDriver(),
      source: 'stopped',
      concurrency: 1,
      logger: memoryLogger(),
      metrics: false,
      handler: holdingHandler(pids, inTransaction),
    });
    await worker.start();
    await inTransaction.wait();
    const summary = await worker.stop({ timeoutMs: 200 });
    const left = await sessions(pids);

    assert.equal(summary!.abandoned, 1);
    assert.deepEqual(left, [], `the handler's transaction (server process ${pids[0]}) is over when stop() resolves`);
    await writeSameRow('order-stop');
  });

  it('runOnce that gave up on a handler past handlerTimeoutMs returns once its transaction is gone', { timeout: 60_000 }, async () => {
    await insertPullRows(db, 'timed-out', [{ key: 'order-timeout' }]);
    const pids: number[] = [];
    const worker = createPullWorker({
      driver: db.newDriver(),
      config: db.config,
      source: 'timed-out',
      concurrency: 1,
      handlerTimeoutMs: 300,
      logger: memoryLogger(),
      metrics: false,
      handler: holdingHandler(pids),
    });
    // Ends when nothing is claimable any more, long before its deadline.
    const summary = await worker.runOnce({ context: fakeLambdaContext({ timeoutMs: 30_000 }) });
    const left = await sessions(pids);

    assert.equal(summary.abandoned, 1);
    assert.deepEqual(left, [], `the handler's transaction (server process ${pids[0]}) is over when runOnce returns`);
    await writeSameRow('order-timeout');
  });

  it('a database that stops answering while a handler\'s transaction is open: runOnce still returns before the invocation ends', { timeout: 60_000 }, async () => {
    await insertPullRows(db, 'partitioned', [{ key: 'order-partition' }]);
    const proxy = await startStallProxy(db.url);
    const driver = new PostgresDriver({ config: db.config, url: proxy.through(db.url) });
    // The handler's outside call, ended before the pool is closed (which waits for its client).
    const outsideCall = new AbortController();
    try {
      const worker = createPullWorker({
        driver,
        config: db.config,
        source: 'partitioned',
        concurrency: 1,
        leaseMs: 30_000,
        // Given up on 200 ms after the deadline, well before the invocation's end.
        shutdownTimeoutMs: 200,
        logger: memoryLogger(),
        metrics: false,
        handler: async (_message, { transaction }) => {
          await transaction(async (tx) => {
            await tx.query('SELECT 1');
            // The database stops answering: the runner's terminate, from a new connection, cannot reach it either.
            proxy.set('stall');
            await sleep(120_000, outsideCall.signal);
          });
        },
      });
      const context = fakeLambdaContext({ timeoutMs: 4000 });
      const summary = await worker.runOnce({ context });
      const left = context.getRemainingTimeInMillis();
      assert.equal(summary.abandoned, 1);
      assert.ok(left > 0, `runOnce returned with ${left} ms of the invocation left`);
    } finally {
      outsideCall.abort();
      proxy.set('pass');
      proxy.endAll();
      await driver.close().catch(() => {});
      await proxy.close().catch(() => {});
    }
  });
});
