import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { enqueue } from '../../lib/index.ts';
import { outboxClaimPaths } from '../helpers/claim-paths.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';

/**
 * Two transactions write the same key; the one that took the lower `sequence` commits last, after
 * the other row was already claimed. The late row must wait: one row per key (per aggregate) is
 * in flight, whatever the commit order.
 */
const CLAIM_PATHS = outboxClaimPaths(10);

for (const { path, overrides, functions } of CLAIM_PATHS) describe(`a row that commits after a later row of its key was claimed (${path})`, () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase(overrides);
  });
  after(async () => db.drop());

  it('outbox: is not claimed while the later row of its key is in flight, and is claimed once that row is sent', async () => {
    const early = await db.pool.connect();
    try {
      await early.query('BEGIN');
      const earlyId = await enqueue(early, { topic: 't', key: 'k-1', payload: { n: 1 } }, { schema: db.schema });
      const late = await db.pool.connect();
      let lateId: string;
      try {
        await late.query('BEGIN');
        lateId = await enqueue(late, { topic: 't', key: 'k-1', payload: { n: 2 } }, { schema: db.schema });
        await late.query('COMMIT');
      } finally {
        late.release();
      }
      const first = await db.driver.outboxClaimMany({ limit: 10, leaseMs: 30_000 });
      assert.deepEqual(first.map((r) => r.id), [lateId], 'only the committed row is visible');
      await early.query('COMMIT');

      assert.deepEqual(await db.driver.outboxClaimMany({ limit: 10, leaseMs: 30_000 }), [], 'the key already has a row in flight');
      await db.driver.outboxMarkSentMany({ claims: [{ id: lateId, token: first[0]!.claimToken }] });
      const next = await db.driver.outboxClaimMany({ limit: 10, leaseMs: 30_000 });
      assert.deepEqual(next.map((r) => r.id), [earlyId]);
      assert.equal(db.driver.ctx.claimFunctions?.missing.size, functions ? 0 : undefined, `the claims went through ${path}`);
    } finally {
      early.release();
    }
  });

  it('inbox relay: is not claimed while the later row of its aggregate is in flight', async () => {
    const early = await db.pool.connect();
    try {
      await early.query('BEGIN');
      const message = (key: string) => ({ source: 'shop', idempotencyKey: key, aggregateId: 'order-1', eventType: 'e', payload: {}, consumption: 'push' as const });
      const earlyRow = await db.driver.inboxInsert(message('a'), early);
      const lateRow = await db.driver.inboxInsert(message('b'));
      const first = await db.driver.inboxClaimPushMany({ limit: 10, leaseMs: 30_000 });
      assert.deepEqual(first.map((r) => r.id), [lateRow.id]);
      await early.query('COMMIT');

      assert.deepEqual(await db.driver.inboxClaimPushMany({ limit: 10, leaseMs: 30_000 }), [], 'the aggregate already has a row in flight');
      assert.equal(await db.driver.inboxForward({ id: lateRow.id, token: first[0]!.claimToken, outbox: { topic: 'shop.e', key: 'order-1', payload: {} } }, { maxAttempts: 5 }), true);
      const next = await db.driver.inboxClaimPushMany({ limit: 10, leaseMs: 30_000 });
      assert.deepEqual(next.map((r) => r.id), [earlyRow.id]);
    } finally {
      early.release();
    }
  });
});
