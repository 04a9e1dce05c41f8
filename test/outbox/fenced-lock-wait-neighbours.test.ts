import assert from 'node:assert/strict';
import type pg from 'pg';
import { after, before, beforeEach, describe, it } from 'node:test';
import { FencedLockTimeoutError } from '../../lib/errors.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { insertOutboxRows } from '../helpers/outbox-pass-fixture.ts';
import { delay, waitUntil } from '../helpers/wait.ts';

/**
 * The lock wait of a fenced write is bounded by the lease of the row it waits for, not by the
 * lease of another row the statement happened to read: rows of other claims, with longer leases,
 * live in the same table (other workers), and PostgreSQL may read all of them before it locks any
 * row (the claimed rows as the build side of a hash join).
 */
describe('fenced writes: the lock wait ends with the lease of the row waited for', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase();
  });
  after(async () => db.drop());
  beforeEach(async () => {
    await db.query(`DELETE FROM "${db.schema}".outbox`);
  });

  for (const write of ['mark sent', 'renew', 'retry', 'dead'] as const) {
    it(`a ${write} behind a row lock held past its lease fails, while another claim's lease runs on`, async () => {
      const ids = await insertOutboxRows(db, Array.from({ length: 21 }, () => ({ topic: 'orders.paid', payload: {} })));
      const other = ids.pop();
      // One write of 20 claims: PostgreSQL then hashes the claimed rows it reads before it locks any.
      const rows = await db.driver.outboxClaimMany({ limit: 20, leaseMs: 1000 });
      assert.equal(rows.length, 20);
      const claims = rows.map((r) => ({ id: r.id, token: r.claimToken }));
      const id = claims[0]!.id;
      // Another worker's claim on the other row, with a long lease.
      await db.query(
        `UPDATE "${db.schema}".outbox SET state = 'processing', claim_token = gen_random_uuid(), claimed_at = clock_timestamp(),
                lease_expires_at = clock_timestamp() + interval '60 seconds' WHERE id = $1`,
        [other],
      );
      const holder: pg.PoolClient = await db.pool.connect();
      await holder.query('BEGIN');
      await holder.query(`SELECT id FROM "${db.schema}".outbox WHERE id = $1 FOR UPDATE`, [id]);
      const sent = {
        'mark sent': () => db.driver.outboxMarkSentMany({ claims }),
        renew: () => db.driver.outboxRenewMany({ claims, leaseMs: 60_000 }),
        retry: () => db.driver.outboxRetryMany({ items: claims.map((c) => ({ ...c, delayMs: 0, error: 'x' })) }),
        dead: () => db.driver.outboxMarkDeadMany({ items: claims.map((c) => ({ ...c, error: 'x' })) }),
      }[write]();
      const result = sent.then((ids) => ({ ids }), (error: unknown) => ({ error }));
      await waitUntil('the lease ended', async () => (await db.query<{ over: boolean }>(`SELECT lease_expires_at < clock_timestamp() AS over FROM "${db.schema}".outbox WHERE id = $1`, [id]))[0]!.over, 20_000);
      await delay(300);
      await holder.query('COMMIT');
      holder.release();
      const outcome = await result;
      assert.ok('error' in outcome, `the ${write} must not land after its lease (it changed ${'ids' in outcome ? outcome.ids.length : 0} rows)`);
      assert.ok(outcome.error instanceof FencedLockTimeoutError, `a FencedLockTimeoutError, not ${String(outcome.error)}`);
      const after = await db.query<{ state: string }>(`SELECT state FROM "${db.schema}".outbox WHERE id = ANY($1::uuid[])`, [claims.map((c) => c.id)]);
      assert.deepEqual(new Set(after.map((r) => r.state)), new Set(['processing']), 'no row of the write changed');
    });
  }
});
