import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';

/** The plain-SQL inserts the README shows adopters (spec §2); kept in sync by docs tests. */
describe('plain-SQL outbox inserts by an application', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase();
    await db.pool.query(`SET search_path TO "${db.schema}"`);
  });
  after(async () => db.drop());

  it('accept the shortest insert, with key and headers, and with schedule and attempts; rows are pending with increasing sequence', async () => {
    const client = await db.pool.connect();
    try {
      await client.query(`SET search_path TO "${db.schema}"`);
      await client.query(`INSERT INTO outbox (topic, payload) VALUES ('order.paid', '{"orderId":"o-1"}'::jsonb)`);
      await client.query(
        `INSERT INTO outbox (topic, key, payload, headers) VALUES ('order.paid', 'o-2', '{"orderId":"o-2"}'::jsonb, '{"X-Correlation-Id":"c-2"}'::jsonb)`,
      );
      await client.query(
        `INSERT INTO outbox (topic, payload, scheduled_at, max_attempts) VALUES ('order.paid', '{"orderId":"o-3"}'::jsonb, now() + interval '1 minute', 10)`,
      );
      const { rows } = await client.query<{ state: string; attempt: number; sequence: string; headers: object; max_attempts: number; key: string | null }>(
        `SELECT state, attempt, sequence, headers, max_attempts, key FROM outbox ORDER BY sequence`,
      );
      assert.equal(rows.length, 3);
      assert.ok(rows.every((r) => r.state === 'pending' && r.attempt === 0));
      const sequences = rows.map((r) => BigInt(r.sequence));
      assert.ok(sequences[0]! < sequences[1]! && sequences[1]! < sequences[2]!, 'sequence increases');
      assert.deepEqual(rows[0]!.headers, {});
      assert.equal(rows[1]!.key, 'o-2');
      assert.equal(rows[2]!.max_attempts, 10);
      assert.equal(rows[0]!.max_attempts, 5);
    } finally {
      client.release();
    }
  });

  it('reject a state other than the documented ones and headers that are not an object', async () => {
    await assert.rejects(db.pool.query(`INSERT INTO "${db.schema}".outbox (topic, payload, state) VALUES ('t', '{}', 'bogus')`), /outbox_state_check/);
    await assert.rejects(db.pool.query(`INSERT INTO "${db.schema}".outbox (topic, payload, headers) VALUES ('t', '{}', '[1]')`), /outbox_headers_object/);
  });
});
