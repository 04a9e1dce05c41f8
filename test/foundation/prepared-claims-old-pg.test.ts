/**
 * `database.preparedStatements` on an application's own `pg` older than 8.23 (the `pg-8-20`
 * devDependency, an alias of `pg@8.20.0`): a pull worker on the application's `pg.Pool`, or a
 * driver built on one. Inside a transaction a prepared claim new to the connection is parsed
 * ahead of its plan settings in the same round trip (`preludeQuery`); such a `pg` knows a name as
 * parsed only once the server answered its Parse (no `submittedNamedStatements`), and sent a
 * second Parse of it, which the server refused: "prepared statement … already exists" (42P05) at
 * the first claim of every connection.
 */
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { after, before, describe, it } from 'node:test';
import type pgTypes from 'pg';
import { parseConfig } from '../../lib/config/load-config.ts';
import { PINNED_CLAIM_PLAN } from '../../lib/db/postgres/claim-functions.ts';
import { pgClaimQuery, pgTransaction } from '../../lib/db/postgres/pg-pool.ts';
import { PostgresDriver } from '../../lib/db/postgres/postgres-driver.ts';
import { createPullWorker } from '../../lib/index.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { insertPullRows, memoryLogger, readPullRows } from '../pull/pull-fixtures.ts';

const oldPg = createRequire(import.meta.url)('pg-8-20') as typeof pgTypes;

describe('prepared claims on a pg older than 8.23 (pg 8.20)', () => {
  let db: TestDatabase;
  let oldPool: pgTypes.Pool;
  let driver: PostgresDriver;
  before(async () => {
    db = await createTestDatabase({ database: { preparedStatements: true } });
    // One connection: every claim below is that connection's, the first one of each statement its first run.
    oldPool = new oldPg.Pool({ connectionString: db.url, max: 1 });
    oldPool.on('error', () => {});
    const config = parseConfig({ ...db.config, database: { ...db.config.database, preparedStatements: true } } as never);
    driver = new PostgresDriver({ config, url: db.url, pool: oldPool });
  });
  after(async () => {
    await driver.close();
    await oldPool.end();
    await db.drop();
  });

  /** The prepared statements of the old pool's one connection (`name: text`). */
  const prepared = async (): Promise<string[]> =>
    (await oldPool.query<{ name: string; statement: string }>('SELECT name, statement FROM pg_prepared_statements ORDER BY name')).rows.map((r) => `${r.name}: ${r.statement.trim().slice(0, 30)}`);

  it('is pg 8.20: a connection keeps no record of Parses sent and not yet answered (so the checks below can fail)', async () => {
    assert.equal((createRequire(import.meta.url)('pg-8-20/package.json') as { version: string }).version, '8.20.0');
    const client = await oldPool.connect();
    try {
      assert.equal((client as unknown as { connection: { submittedNamedStatements?: unknown } }).connection.submittedNamedStatements, undefined);
    } finally {
      client.release();
    }
  });

  it('the pull and relay claims claim at their first run on the connection, and again, each statement prepared once', async () => {
    await insertPullRows(db, 'old-pg', [{ key: 'a' }, { key: 'b' }]);
    await db.query(`INSERT INTO "${db.schema}".inbox (source, idempotency_key, payload, consumption) VALUES ('push', 'p1', '{}', 'push'), ('push', 'p2', '{}', 'push')`);
    assert.equal((await driver.pullClaimMany({ source: 'old-pg', limit: 1, leaseMs: 60_000 })).length, 1, 'first pull claim');
    assert.equal((await driver.pullClaimMany({ source: 'old-pg', limit: 1, leaseMs: 60_000 })).length, 1, 'second pull claim');
    assert.equal((await driver.inboxClaimPushMany({ limit: 1, leaseMs: 60_000 })).length, 1, 'first relay claim');
    assert.equal((await driver.inboxClaimPushMany({ limit: 1, leaseMs: 60_000 })).length, 1, 'second relay claim');
    const statements = await prepared();
    assert.equal(statements.length, 2, `the pull and relay claims: ${statements.join(' | ')}`);
    for (const s of statements) assert.match(s, /^queuebox_[0-9a-f]{24}: WITH /);
  });

  it('a statement whose Parse fails is parsed again at its next run (nothing was marked parsed before the server answered)', async () => {
    const table = `"${db.schema}".later`;
    const text = `SELECT count(*)::int AS n FROM ${table}`;
    const claim = () => pgTransaction(oldPool, async (client) => (await pgClaimQuery<{ n: number }>(client, text, [], true, PINNED_CLAIM_PLAN)).rows);
    await assert.rejects(claim(), (error: unknown) => (error as { code?: string }).code === '42P01');
    await db.query(`CREATE TABLE ${table} (id int)`);
    assert.deepEqual(await claim(), [{ n: 0 }]);
    assert.deepEqual(await claim(), [{ n: 0 }]);
  });

  it('a pull worker on the pool (`pool` + `config`) claims and completes at the first run of a new connection', async () => {
    const workerPool = new oldPg.Pool({ connectionString: db.url, max: 2 });
    workerPool.on('error', () => {});
    try {
      await insertPullRows(db, 'worker', [{ key: 'w1' }, { key: 'w2' }]);
      const worker = createPullWorker({
        pool: workerPool,
        config: { ...db.config, database: { ...db.config.database, preparedStatements: true } },
        source: 'worker',
        leaseMs: 10_000,
        metrics: false,
        logger: memoryLogger(),
        handler: async () => {},
      });
      const summary = await worker.runOnce();
      assert.deepEqual([summary.claimed, summary.completed, summary.retried], [2, 2, 0]);
      assert.deepEqual(
        (await readPullRows(db, 'worker')).map((r) => r.state),
        ['processed', 'processed'],
      );
    } finally {
      await workerPool.end();
    }
  });
});
