import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { pgTransaction } from '../../lib/db/postgres/pg-pool.ts';
import { TransientDatabaseError } from '../../lib/errors.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';

describe('a connection terminated by the server', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase();
  });
  after(async () => db.drop());

  it('inside a transaction fails the next statement with a transient error instead of crashing the process, and the pool recovers', async () => {
    const pool = db.driver.pool;
    await assert.rejects(
      pgTransaction(pool, async (client) => {
        const { rows } = await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
        await db.pool.query('SELECT pg_terminate_backend($1)', [rows[0]!.pid]);
        // Let the termination reach the idle, checked-out client (its 'error' event fires now).
        await new Promise((resolve) => setTimeout(resolve, 300));
        await client.query('SELECT 1');
      }),
      (error: unknown) => error instanceof TransientDatabaseError,
    );
    assert.ok(await db.driver.clockNow(), 'the next statement gets a fresh connection');
  });
});
