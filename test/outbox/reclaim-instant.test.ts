import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { PostgresDriver } from '../../lib/db/postgres/postgres-driver.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { insertOutboxRows, inspectRows } from '../helpers/outbox-pass-fixture.ts';

/**
 * A reclaim compares every row's lease with one instant, the start of its statement: a lease that
 * ends while the statement runs is either expired for all of the claim's rows or for none. Compared
 * row by row with the clock, a slow reclaim split a claim: rows read before the lease ended stayed
 * `processing`, rows read after went back to `pending` (the head held while its follower was
 * released, or the head charged while its follower stayed in flight and was charged again later).
 *
 * The statement is made slow on purpose: a trigger sleeps while the reclaim updates another expired
 * row that lies, in the heap, between the claim's two rows, and the reclaim's connection reads the
 * table in heap order (index scans off), so the claim's first row is read before the sleep and its
 * second after the lease ended.
 */
describe('outbox reclaim: one instant per statement', () => {
  let db: TestDatabase;
  let seqScanPool: pg.Pool;
  let reclaimer: PostgresDriver;
  before(async () => {
    db = await createTestDatabase({ outbox: { rowsPerKey: 10 } });
    seqScanPool = new pg.Pool({ connectionString: db.url, max: 1, options: '-c enable_indexscan=off -c enable_bitmapscan=off -c enable_indexonlyscan=off' });
    seqScanPool.on('error', () => {});
    reclaimer = new PostgresDriver({ config: db.config, url: db.url, pool: seqScanPool });
  });
  after(async () => {
    await reclaimer.close();
    await seqScanPool.end();
    await db.drop();
  });

  it('never splits a claim whose lease ends while the reclaim runs', async () => {
    const t = `"${db.schema}".outbox`;
    const [head, other, follower] = await insertOutboxRows(db, [
      { topic: 'orders', key: 'k', payload: { n: 1 } },
      { topic: 'orders', payload: { n: 2 } },
      { topic: 'orders', key: 'k', payload: { n: 3 } },
    ]);
    // One claim of key k (head and follower, one token, one lease ending in 1 s), written in heap
    // order head, other, follower; `other` is a keyless row of another claim, its lease long over.
    await db.query(
      `UPDATE ${t} SET state = 'processing', claim_token = '00000000-0000-4000-8000-000000000001', key_first = true,
              claimed_at = clock_timestamp(), lease_expires_at = date_trunc('milliseconds', clock_timestamp()) + interval '1 second' WHERE id = $1`,
      [head],
    );
    await db.query(
      `UPDATE ${t} SET state = 'processing', claim_token = gen_random_uuid(), key_first = true,
              claimed_at = clock_timestamp() - interval '1 minute', lease_expires_at = clock_timestamp() - interval '1 second' WHERE id = $1`,
      [other],
    );
    await db.query(
      `UPDATE ${t} f SET state = 'processing', claim_token = h.claim_token, key_first = false, claimed_at = h.claimed_at, lease_expires_at = h.lease_expires_at
         FROM ${t} h WHERE f.id = $1 AND h.id = $2`,
      [follower, head],
    );
    const order = await db.query<{ id: string }>(`SELECT id FROM ${t} WHERE state = 'processing' ORDER BY ctid`);
    assert.deepEqual(order.map((r) => r.id), [head, other, follower], 'precondition: the claim of k lies on both sides of the other row in the heap');

    await db.query(`CREATE FUNCTION "${db.schema}".slow_update() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF OLD.id = '${other}' THEN PERFORM pg_sleep(2); END IF;
        RETURN NEW;
      END $$`);
    await db.query(`CREATE TRIGGER slow_update BEFORE UPDATE ON ${t} FOR EACH ROW EXECUTE FUNCTION "${db.schema}".slow_update()`);
    try {
      const [lease] = await db.query<{ left_ms: number }>(`SELECT (EXTRACT(EPOCH FROM lease_expires_at - clock_timestamp()) * 1000)::float8 AS left_ms FROM ${t} WHERE id = $1`, [head]);
      assert.ok(lease!.left_ms > 300, `precondition: the claim's lease is still running when the reclaim starts (${lease!.left_ms} ms left)`);
      const started = Date.now();
      const result = await reclaimer.outboxReclaimExpired({});
      assert.ok(Date.now() - started >= 2000, 'precondition: the reclaim slept on the other row, past the end of the lease');
      assert.equal(result.reclaimed, 1, 'only the row whose lease was over when the statement started');
    } finally {
      await db.query(`DROP TRIGGER slow_update ON ${t}`);
    }
    const rows = new Map((await inspectRows(db, [head!, other!, follower!])).map((r) => [r.id, r]));
    assert.equal(rows.get(other!)!.state, 'pending');
    assert.deepEqual(
      [rows.get(head!)!.state, rows.get(follower!)!.state],
      ['processing', 'processing'],
      'the claim of k is whole: its lease ended after the reclaim started, so the next reclaim takes both rows',
    );

    // The next reclaim takes the whole claim: the lost lease charged once, to the head.
    const next = await db.driver.outboxReclaimExpired({});
    assert.equal(next.reclaimed, 2);
    const after = new Map((await inspectRows(db, [head!, follower!])).map((r) => [r.id, r]));
    assert.deepEqual([after.get(head!)!.state, after.get(head!)!.attempt], ['pending', 1]);
    assert.deepEqual([after.get(follower!)!.state, after.get(follower!)!.attempt], ['pending', 0]);
  });

  it('leaves a follower whose lease ended while its head was renewed, until the head is settled', async () => {
    const t = `"${db.schema}".outbox`;
    await db.query(`DELETE FROM ${t}`);
    const [head, follower] = await insertOutboxRows(db, [
      { topic: 'orders', key: 'k2', payload: { n: 1 } },
      { topic: 'orders', key: 'k2', payload: { n: 2 } },
    ]);
    // What a renewal leaves that passed the end of the claim's lease between its two rows (the
    // fence reads the clock row by row): the head renewed, the follower's lease over. The pass
    // learnt from the renewal that it lost the follower and does not publish it.
    await db.query(
      `UPDATE ${t} SET state = 'processing', claim_token = '00000000-0000-4000-8000-000000000002', key_first = (id = $1),
              claimed_at = clock_timestamp() - interval '1 minute',
              lease_expires_at = CASE WHEN id = $1 THEN clock_timestamp() + interval '1 minute' ELSE clock_timestamp() - interval '1 second' END
        WHERE id IN ($1, $2)`,
      [head, follower],
    );
    const held = await db.driver.outboxReclaimExpired({});
    assert.equal(held.reclaimed, 0, 'the claim of k2 still holds a lease: its follower is not released behind the held head');
    assert.deepEqual((await inspectRows(db, [head!, follower!])).map((r) => r.state), ['processing', 'processing']);

    // The holder settles the head (fenced on its token and live lease); the follower is then reclaimed.
    assert.deepEqual(await db.driver.outboxMarkSentMany({ claims: [{ id: head!, token: '00000000-0000-4000-8000-000000000002' }] }), [head]);
    const freed = await db.driver.outboxReclaimExpired({});
    assert.equal(freed.reclaimed, 1);
    const [row] = await inspectRows(db, [follower!]);
    assert.equal(row!.state, 'pending', 'the follower moves on once its claim has no lease left');
  });
});
