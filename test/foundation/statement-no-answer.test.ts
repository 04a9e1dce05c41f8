/**
 * Inside an invocation (a statement budget) the PostgreSQL driver does not wait on a server that
 * has gone silent (a network partition, a failover that leaves the connection open: here a proxy
 * that holds every byte). The server's `statement_timeout` cannot end anything then, so the client
 * does: the wait for a connection — in the pool's queue, or a new one's start-up — ends with the
 * budget (`InvocationEndedError`: nothing was sent), and a statement with no answer by its budget
 * plus `NO_ANSWER_GRACE_MS` fails as a lost connection (its outcome unknown), the connection
 * closed and dropped from the pool. A process held up past that limit (frozen, as a Lambda
 * container is between invocations) still reads an answer that arrives right after it resumes.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type pg from 'pg';
import { TransientDatabaseError } from '../../lib/errors.ts';
import { isConnectionLost } from '../../lib/db/postgres/fenced-writes.ts';
import { createPgPool, pgQuery, pgSingleTrip } from '../../lib/db/postgres/pg-pool.ts';
import { InvocationEndedError, withStatementBudget } from '../../lib/db/statement-budget.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { startStallProxy, type StallProxy } from '../helpers/stall-proxy.ts';
import { waitUntil } from '../helpers/wait.ts';

/** The time left in the invocation for every statement of these tests (ms): it does not run down. */
const BUDGET_MS = 300;
const withBudget = <T>(work: () => Promise<T>) => withStatementBudget(() => BUDGET_MS, work);

describe('PostgreSQL statements under a budget: a silent server is given up on the client', () => {
  let db: TestDatabase;
  let proxy: StallProxy;
  const pools: pg.Pool[] = [];
  before(async () => {
    db = await createTestDatabase();
    proxy = await startStallProxy(db.url);
  });
  after(async () => {
    await proxy.close();
    await Promise.all(pools.map((p) => p.end().catch(() => {})));
    await db.drop();
  });

  /** A pool as the driver makes it, through the proxy, with `warm` idle connections open. */
  async function proxiedPool(warm: number, poolMax = 2): Promise<pg.Pool> {
    proxy.endAll();
    proxy.set('pass');
    const pool = createPgPool({ ...db.config.database, poolMax }, proxy.through(db.url));
    pools.push(pool);
    const clients = await Promise.all(Array.from({ length: warm }, () => pool.connect()));
    for (const client of clients) client.release();
    return pool;
  }

  const lostConnection = (error: unknown) => error instanceof TransientDatabaseError && error.code === '08006' && isConnectionLost(error);

  // `timeout`: a client that waits on the silent server for ever fails the test instead of hanging it.
  it('a statement on a pooled connection that gets no answer fails as a lost connection; the connection is closed, not pooled', { timeout: 30_000 }, async () => {
    const pool = await proxiedPool(1);
    proxy.set('stall');
    // In a transaction of its own (the budget is below the pool's statement timeout) ...
    await assert.rejects(withBudget(() => pgQuery(pool, 'SELECT 1')), lostConnection);
    assert.equal(pool.totalCount, 0, 'the silent connection is not kept');
    await waitUntil('the client has closed the silent connection', () => proxy.openConnections() === 0);
    // ... and in one round trip (fenced writes and renewals).
    const again = await proxiedPool(1);
    proxy.set('stall');
    await assert.rejects(withBudget(() => pgSingleTrip(again, 'SELECT 1', [])), lostConnection);
    assert.equal(again.totalCount, 0, 'the silent connection is not kept');
    await waitUntil('the client has closed the silent connection', () => proxy.openConnections() === 0);
  });

  it('a new connection stuck in its start-up is given up at the budget: InvocationEndedError, nothing left connecting', { timeout: 30_000 }, async () => {
    const pool = await proxiedPool(0);
    proxy.set('stall');
    await assert.rejects(withBudget(() => pgQuery(pool, 'SELECT 1')), InvocationEndedError);
    assert.equal(pool.totalCount, 0, 'no connection is left starting up');
    assert.equal(pool.options.connectionTimeoutMillis, db.config.database.connectTimeoutMs, "the pool's own connect timeout is as configured");
    await waitUntil('the connection starting up is closed', () => proxy.openConnections() === 0);
  });

  it('a wait in the pool queue behind a connection held elsewhere ends at the budget: InvocationEndedError; the pool serves later requests', { timeout: 30_000 }, async () => {
    const pool = await proxiedPool(1, 1);
    const held = await pool.connect();
    await assert.rejects(withBudget(() => pgQuery(pool, 'SELECT 1')), InvocationEndedError);
    assert.equal(pool.waitingCount, 0, 'nothing waits in the queue any more');
    held.release();
    assert.deepEqual((await withBudget(() => pgQuery<{ n: number }>(pool, 'SELECT 1 AS n'))).rows, [{ n: 1 }]);
  });

  it('a statement whose process was held up past its limit still reads the answer that comes right after', async () => {
    const pool = await proxiedPool(1);
    const client = await pool.connect();
    try {
      proxy.set('stall');
      const answered = withBudget(() => pgQuery<{ n: number }>(client, 'SELECT 42 AS n'));
      // Sent (held by the proxy), then the process is held up well past the statement's limit, as a
      // frozen container is; the server gets the statement and answers only after that.
      await new Promise((resolve) => setImmediate(resolve));
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, BUDGET_MS * 4);
      proxy.set('pass');
      assert.deepEqual((await answered).rows, [{ n: 42 }]);
    } finally {
      client.release();
    }
  });
});
