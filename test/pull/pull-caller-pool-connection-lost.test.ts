/**
 * A pull worker on the application's own `pg.Pool` (the documented `pool` + `config` form): the
 * server ends the connection of the handler's transaction between two of its statements. `pg`
 * emits `'error'` on the checked-out client, and an `'error'` event with no listener ends the
 * process — the pool listens only while a client is idle in it. The lost connection must cost
 * that message's attempt (retried, a transient database error), not the worker's process.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { createPullWorker } from '../../lib/index.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { insertPullRows, memoryLogger, readPullRows } from './pull-fixtures.ts';

describe('a pull worker on the caller pool whose transaction loses its connection', () => {
  let db: TestDatabase;
  let appPool: pg.Pool;
  const pidsSeen: number[] = [];
  before(async () => {
    db = await createTestDatabase();
    // The application's pool, with the `'error'` listener node-postgres asks for and nothing else.
    appPool = new pg.Pool({ connectionString: db.url, max: 3, application_name: 'qb-test-app-pool' });
    appPool.on('error', () => {});
  });
  after(async () => {
    await appPool.end();
    await db.drop();
  });

  const worker = (source: string, end: (tx: pg.PoolClient, pid: number) => Promise<void>) =>
    createPullWorker({
      pool: appPool,
      config: db.config,
      source,
      leaseMs: 10_000,
      metrics: false,
      logger: memoryLogger(),
      handler: async (_message, { transaction }) => {
        await transaction(async (tx) => {
          const pid = (await tx.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
          pidsSeen.push(pid);
          await end(tx, pid);
          // The handler's own await inside the transaction: the 'error' event arrives now.
          await new Promise((resolve) => setTimeout(resolve, 300));
          await tx.query('SELECT 1');
        });
      },
    });

  const terminated = async (_tx: pg.PoolClient, pid: number) => {
    await db.query('SELECT pg_terminate_backend($1)', [pid]);
  };

  it('retries the message when the backend is terminated mid-transaction, and the process lives on', async () => {
    await insertPullRows(db, 'terminated', [{ key: 't1' }]);
    const summary = await worker('terminated', terminated).runOnce();
    assert.deepEqual([summary.claimed, summary.retried, summary.completed], [1, 1, 0]);
    const [row] = await readPullRows(db, 'terminated');
    assert.equal(row!.state, 'pending');
    assert.equal(row!.attempt, 1);
    assert.match(row!.last_error ?? '', /TransientDatabaseError|terminat|connection/i);
  });

  it('discards the broken client: the next transaction runs on a live connection and completes', async () => {
    await insertPullRows(db, 'after', [{ key: 'a1' }]);
    const summary = await worker('after', async () => {}).runOnce();
    assert.deepEqual([summary.claimed, summary.completed], [1, 1]);
    const [row] = await readPullRows(db, 'after');
    assert.equal(row!.state, 'processed');
    // The connection the first test's transaction lost is not handed out again.
    assert.notEqual(pidsSeen.at(-1), pidsSeen[0]);
  });

  it('survives the server ending an idle transaction (idle_in_transaction_session_timeout)', async () => {
    await insertPullRows(db, 'idle', [{ key: 'i1' }]);
    const summary = await worker('idle', async (tx) => {
      // 100 ms idle in the transaction ends the session, within the handler's 300 ms wait.
      await tx.query('SET LOCAL idle_in_transaction_session_timeout = 100');
    }).runOnce();
    assert.deepEqual([summary.claimed, summary.retried, summary.completed], [1, 1, 0]);
    const [row] = await readPullRows(db, 'idle');
    assert.deepEqual([row!.state, row!.attempt], ['pending', 1]);
    assert.match(row!.last_error ?? '', /TransientDatabaseError|idle|terminat|connection/i);
  });
});
