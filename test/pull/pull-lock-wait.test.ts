import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { pgTransaction } from '../../lib/db/postgres/pg-pool.ts';
import { createPullClient } from '../../lib/pull/pull-client.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { delay, waitUntil } from '../helpers/wait.ts';
import { insertPullRows } from './pull-fixtures.ts';

/**
 * The pull client's fenced writes never land after the lease: a write queued behind another
 * transaction's lock on the row, held past the lease, changes nothing and answers
 * `ownership-lost` (PostgreSQL does not re-check the fence after such a wait).
 */
describe('pull fenced writes: the lock wait ends with the lease', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({ database: { poolMax: 4 } });
  });
  after(async () => db.drop());

  for (const write of ['renew', 'complete', 'retry', 'dead', 'release'] as const) {
    it(`a ${write} behind a row lock held past the lease is ownership-lost and changes nothing`, async () => {
      const [id] = await insertPullRows(db, `lock-${write}`, [{ key: write }]);
      const client = createPullClient(db.driver);
      const [message] = await client.claim(`lock-${write}`, { batch: 1, leaseMs: 1000 });
      assert.equal(message?.id, id);
      const holder = await db.pool.connect();
      await holder.query('BEGIN');
      await holder.query(`SELECT id FROM "${db.schema}".inbox WHERE id = $1 FOR UPDATE`, [id]);
      const claim = message!.claim;
      const result = {
        renew: () => client.renew(claim, 60_000),
        complete: () => pgTransaction(db.driver.pool, (tx) => client.complete(tx, claim)).catch((error: unknown) => ({ error })),
        retry: () => client.retry(claim, 0, new Error('x')),
        dead: () => client.dead(claim, new Error('x')),
        release: () => client.release(claim),
      }[write]();
      await waitUntil('the lease ended', async () => (await db.query<{ over: boolean }>(`SELECT lease_expires_at < clock_timestamp() AS over FROM "${db.schema}".inbox WHERE id = $1`, [id]))[0]!.over, 20_000);
      await delay(300);
      await holder.query('COMMIT');
      holder.release();
      assert.deepEqual(await result, { ok: false, reason: 'ownership-lost' });
      const [row] = await db.query<{ state: string; token: string }>(`SELECT state, claim_token AS token FROM "${db.schema}".inbox WHERE id = $1`, [id]);
      assert.deepEqual(row, { state: 'processing', token: claim.token });
    });
  }
});
