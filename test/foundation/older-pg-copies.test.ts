/**
 * Pools of older copies of `pg` an application may hand QueueBox (`pool` of a pull worker, a
 * driver built on one): `pg-8-0` (8.0.3) and `pg-8-11` (8.11.3), devDependency aliases, beside
 * `pg-8-20`. QueueBox tells such a pool by its shape and sends its own statements on it with a
 * prelude in the same round trip (`preludeQuery`: `BEGIN`, its settings, the statement, `COMMIT`).
 *
 * - Before 8.12 `pg` ignores `queryMode: 'extended'`: a statement without bind values went out as
 *   a simple query behind the prelude's messages, and came back with no rows (the prelude's
 *   answers swallowed the statement's): the start-up check read no row, and a pull worker on such
 *   a pool could not start.
 * - `pg` 8.0 writes a statement's Sync only once its completion came, after the round trip, and
 *   its connection assembles a message across calls: the prelude's `COMMIT` could not go before
 *   the Sync, and messages written between its own were malformed ("invalid frontend message
 *   type"). Such a copy gets the statement alone (as it did before QueueBox knew a pool of another
 *   copy), never a transaction left open; an `enqueue` in a caller's transaction on its client
 *   checks the transaction with a statement of its own (as for a wrapper), and a pull worker's
 *   completion failed with "invalid message format" on every message.
 * - Before 8.20 `pg` wrote a round trip's messages one write each: a statement whose idle
 *   connection the server had closed (`idle_session_timeout`, a Lambda container frozen between
 *   invocations) failed at a later write ("Connection terminated unexpectedly") instead of with
 *   the server's 57P05, and was not sent again on another connection. The prelude's round trip is
 *   one write.
 */
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { after, before, describe, it } from 'node:test';
import type pg from 'pg';
import { PINNED_CLAIM_PLAN } from '../../lib/db/postgres/claim-functions.ts';
import { pgClaimQuery, pgQuery, pgSingleTrip } from '../../lib/db/postgres/pg-pool.ts';
import { withStatementBudget } from '../../lib/db/statement-budget.ts';
import { createPullWorker, enqueue } from '../../lib/index.ts';
import { UsageError } from '../../lib/errors.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { insertPullRows, memoryLogger, readPullRows } from '../pull/pull-fixtures.ts';
import { createRoleWith } from './role-settings-fixtures.ts';

const require = createRequire(import.meta.url);

for (const [alias, version, pinsSettings] of [
  ['pg-8-0', '8.0.3', false],
  ['pg-8-11', '8.11.3', true],
  ['pg-8-20', '8.20.0', true],
] as const) {
  describe(`a pool of pg ${version} (${alias})`, () => {
    const otherPg = require(alias) as typeof pg;
    let db: TestDatabase;
    let pool: pg.Pool;
    before(async () => {
      db = await createTestDatabase();
      await db.query(`CREATE TABLE "${db.schema}".written (n int)`);
      // One connection: each statement below meets what the one before left on it.
      pool = new otherPg.Pool({ connectionString: db.url, max: 1 });
      pool.on('error', () => {});
    });
    after(async () => {
      await pool.end();
      await db.drop();
    });

    it('is that version', () => {
      assert.equal((require(`${alias}/package.json`) as { version: string }).version, version);
    });

    for (const budgeted of [false, true]) {
      const run = <T>(work: () => Promise<T>) => (budgeted ? withStatementBudget(() => 5_000, work) : work());
      it(`a statement without bind values answers its rows${budgeted ? ', in a pass' : ''}`, async () => {
        assert.deepEqual((await run(() => pgQuery<{ one: number }>(pool, 'SELECT 1 AS one'))).rows, [{ one: 1 }]);
        assert.deepEqual((await run(() => pgSingleTrip<{ one: number }>(pool, 'SELECT 1 AS one', []))).rows, [{ one: 1 }]);
        assert.deepEqual((await run(() => pgQuery<{ v: number }>(pool, 'SELECT $1::int AS v', [7]))).rows, [{ v: 7 }]);
      });

      it(`a write commits, and leaves no transaction open on the connection${budgeted ? ', in a pass' : ''}`, async () => {
        const n = budgeted ? 2 : 1;
        await run(() => pgQuery(pool, `INSERT INTO "${db.schema}".written VALUES ($1)`, [n]));
        assert.deepEqual(await db.query(`SELECT n FROM "${db.schema}".written WHERE n = $1`, [n]), [{ n }], 'visible to another session');
        // The pool's one connection: no transaction (an open one would have a transaction id from the INSERT).
        assert.deepEqual((await pool.query<{ open: boolean }>('SELECT pg_current_xact_id_if_assigned() IS NOT NULL AS open')).rows, [{ open: false }]);
      });
    }

    it(`QueueBox's own settings on its statements: ${pinsSettings ? 'pinned' : "the role's (the statement goes alone)"}`, async () => {
      const { rows } = await pgQuery<{ lock_timeout: string }>(pool, `SELECT current_setting('lock_timeout') AS lock_timeout`);
      await pool.query(`SET lock_timeout = '250ms'`);
      try {
        const after = (await pgQuery<{ lock_timeout: string }>(pool, `SELECT current_setting('lock_timeout') AS lock_timeout`)).rows;
        assert.deepEqual(after, [{ lock_timeout: pinsSettings ? '0' : '250ms' }]);
      } finally {
        await pool.query('RESET lock_timeout');
      }
      assert.equal(rows.length, 1);
    });

    it("enqueue on a client of the pool: refused outside BEGIN, and commits or rolls back with the caller's transaction", async () => {
      const client = await pool.connect();
      const count = async (topic: string) => Number((await db.query<{ n: string }>(`SELECT count(*) AS n FROM "${db.schema}".outbox WHERE topic = $1`, [topic]))[0]!.n);
      try {
        await assert.rejects(enqueue(client, { topic: 'older.outside', payload: {} }, { schema: db.schema }), (error: unknown) => error instanceof UsageError);
        await client.query('BEGIN');
        await enqueue(client, { topic: 'older.rolled-back', payload: {} }, { schema: db.schema });
        await client.query('ROLLBACK');
        await client.query('BEGIN');
        await enqueue(client, { topic: 'older.committed', payload: { n: 1 } }, { schema: db.schema });
        await client.query('COMMIT');
      } finally {
        client.release();
      }
      assert.deepEqual([await count('older.outside'), await count('older.rolled-back'), await count('older.committed')], [0, 0, 1]);
    });

    it('a statement whose idle connection the server closed during a freeze runs again on another connection', async () => {
      const role = await createRoleWith(db, { idle_session_timeout: '300' });
      const idlePool = new otherPg.Pool({ connectionString: role.url, max: 2 });
      idlePool.on('error', () => {});
      const sockets: Array<{ pause(): void; resume(): void }> = [];
      idlePool.on('connect', (client) => {
        const stream = (client as unknown as { connection: { stream: { pause(): void; resume(): void } } }).connection.stream;
        sockets.push(stream);
        // A frozen container reads nothing; it reads again once it sends its next statement.
        const query = client.query.bind(client) as (...args: unknown[]) => unknown;
        (client as unknown as { query: (...args: unknown[]) => unknown }).query = (...args: unknown[]) => {
          const answer = query(...args);
          setImmediate(() => stream.resume());
          return answer;
        };
      });
      const freeze = async () => {
        await Promise.all([1, 2].map(() => idlePool.query('SELECT pg_sleep(0.05)')));
        for (const socket of sockets) socket.pause();
        // Past the role's idle_session_timeout: the server closes both idle connections.
        await new Promise((resolve) => setTimeout(resolve, 800));
      };
      try {
        await freeze();
        assert.deepEqual((await pgQuery<{ v: number }>(idlePool, 'SELECT $1::int AS v', [1])).rows, [{ v: 1 }]);
        await freeze();
        assert.deepEqual((await pgSingleTrip<{ v: number }>(idlePool, 'SELECT $1::int AS v', [2])).rows, [{ v: 2 }]);
        await freeze();
        assert.deepEqual((await pgClaimQuery<{ v: number }>(idlePool, `SELECT $1::int AS v -- ${alias}`, [3], true, PINNED_CLAIM_PLAN)).rows, [{ v: 3 }]);
      } finally {
        await idlePool.end();
        await role.drop();
      }
    });

    it('a pull worker on the pool starts (its start-up check reads its rows) and completes a message', async () => {
      const workerPool = new otherPg.Pool({ connectionString: db.url, max: 2 });
      workerPool.on('error', () => {});
      try {
        await insertPullRows(db, 'older', [{ key: 'o1' }]);
        const worker = createPullWorker({ pool: workerPool, config: db.config, source: 'older', metrics: false, logger: memoryLogger(), handler: async () => {} });
        const summary = await worker.runOnce();
        assert.deepEqual([summary.claimed, summary.completed], [1, 1]);
        assert.deepEqual((await readPullRows(db, 'older')).map((r) => r.state), ['processed']);
      } finally {
        await workerPool.end();
      }
    });
  });
}
