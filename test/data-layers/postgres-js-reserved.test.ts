/**
 * `queuebox/postgres-js` on a reserved connection (`sql.reserve()`), which cannot tell whether it
 * is inside `BEGIN`: the server is asked with a savepoint set and released in one query. As two
 * queries, a statement of the caller's sent meanwhile (postgres.js sends each query as it comes)
 * ran between them, and the release took the caller's own savepoint with it.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import postgres from 'postgres';
import { enqueue } from '../../lib/data-layers/postgres-js.ts';
import { UsageError } from '../../lib/errors.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';

describe('queuebox/postgres-js on a reserved connection', () => {
  let db: TestDatabase;
  let sql: postgres.Sql;
  const rows = async (topic: string) => Number((await db.query<{ n: string }>(`SELECT count(*) AS n FROM "${db.schema}".outbox WHERE topic = $1`, [topic]))[0]!.n);

  before(async () => {
    db = await createTestDatabase();
    sql = postgres(db.url, { max: 2, onnotice: () => {} });
  });
  after(async () => {
    await sql.end();
    await db.drop();
  });

  it("keeps the caller's savepoint set while the check runs", async () => {
    const reserved = await sql.reserve();
    try {
      await reserved`BEGIN`;
      const enqueued = enqueue(reserved, { topic: 'reserved.savepoint', payload: {} }, { schema: db.schema });
      const mine = (async () => {
        await reserved`SAVEPOINT mine`;
        await reserved`SELECT 1`;
        await reserved`ROLLBACK TO SAVEPOINT mine`;
      })();
      const [e, m] = await Promise.allSettled([enqueued, mine]);
      assert.equal(m.status, 'fulfilled', m.status === 'rejected' ? String(m.reason) : '');
      assert.equal(e.status, 'fulfilled', e.status === 'rejected' ? String(e.reason) : '');
      // The INSERT follows the check, so here it went after the caller's SAVEPOINT and rolled back to it.
      await reserved`ROLLBACK`;
    } finally {
      reserved.release();
    }
  });

  it('refuses it outside BEGIN, writing nothing', async () => {
    const reserved = await sql.reserve();
    try {
      await assert.rejects(enqueue(reserved, { topic: 'reserved.outside', payload: {} }, { schema: db.schema }), (error: unknown) => error instanceof UsageError && /outside a transaction/.test(error.message));
    } finally {
      reserved.release();
    }
    assert.equal(await rows('reserved.outside'), 0);
  });
});
