/**
 * The default PostgreSQL transaction runner under a forced stop (`pgTransaction` with a signal):
 * a transaction whose signal fires while its work runs never commits, even when the work returns
 * at that very moment (the COMMIT is not sent), and the terminate that ends it names the
 * transaction (its process and start), so it cannot reach a transaction that began later on the
 * same server process.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { pgTransaction } from '../../lib/db/postgres/pg-pool.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';

describe('pgTransaction with a signal', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase();
    await db.query(`CREATE TABLE "${db.schema}".effects (n int)`);
  });
  after(async () => db.drop());

  const count = async () => (await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".effects`))[0]!.n;

  it('work that returns right after the signal fired is not committed', async () => {
    const stop = new AbortController();
    await assert.rejects(
      pgTransaction(
        db.pool,
        async (client) => {
          await client.query(`INSERT INTO "${db.schema}".effects VALUES (1)`);
          stop.abort();
          return 'done';
        },
        { signal: stop.signal },
      ),
      /given up/,
    );
    assert.equal(await count(), 0);
  });

  it('a signal that fires after the transaction ended terminates nothing: the next transaction on the pool commits', async () => {
    const stop = new AbortController();
    await pgTransaction(db.pool, (client) => client.query(`INSERT INTO "${db.schema}".effects VALUES (2)`), { signal: stop.signal });
    stop.abort();
    await pgTransaction(db.pool, (client) => client.query(`INSERT INTO "${db.schema}".effects VALUES (3)`));
    assert.equal(await count(), 2);
  });
  it('ends a transaction whose statement is running, whatever the session\'s TimeZone and DateStyle', async () => {
    const pool = new pg.Pool({ connectionString: db.url, max: 2, options: '-c DateStyle=SQL,DMY -c TimeZone=Asia/Kolkata' });
    try {
      const stop = new AbortController();
      const started = Date.now();
      await assert.rejects(
        pgTransaction(
          pool,
          async (client) => {
            setTimeout(() => stop.abort(), 100);
            await client.query('SELECT pg_sleep(10)');
          },
          { signal: stop.signal },
        ),
        /terminating connection/,
      );
      assert.ok(Date.now() - started < 5000, 'ended at the signal, not when the statement would have');
    } finally {
      await pool.end();
    }
  });
});
