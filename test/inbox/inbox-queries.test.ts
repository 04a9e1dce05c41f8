import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import type { InboxMessageInput } from '../../lib/db/driver.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';

describe('PostgreSQL inbox queries', () => {
  let db: TestDatabase;
  let inbox: string;
  let outbox: string;
  before(async () => {
    db = await createTestDatabase();
    inbox = `"${db.schema}".inbox`;
    outbox = `"${db.schema}".outbox`;
  });
  after(async () => db.drop());
  beforeEach(async () => {
    await db.query(`TRUNCATE ${inbox}, ${outbox}, "${db.schema}".queuebox_maintenance`);
  });

  const message = (key: string, extra: Partial<InboxMessageInput> = {}): InboxMessageInput => ({
    source: 'shop',
    idempotencyKey: key,
    payload: { key },
    consumption: 'push',
    ...extra,
  });

  it('store a message once per (source, key) and answer the first id as a duplicate', async () => {
    const first = await db.driver.inboxInsert(message('k-1'));
    const second = await db.driver.inboxInsert(message('k-1', { payload: { other: true } }));
    const otherSource = await db.driver.inboxInsert(message('k-1', { source: 'crm' }));
    assert.deepEqual(second, { id: first.id, duplicate: true });
    assert.equal(first.duplicate, false);
    assert.equal(otherSource.duplicate, false);
    const rows = await db.query(`SELECT payload FROM ${inbox} WHERE source = 'shop'`);
    assert.deepEqual(rows, [{ payload: { key: 'k-1' } }]);
  });

  it('store one row when ten drivers insert the same key at once, the other nine answering duplicate with its id', async () => {
    const drivers = Array.from({ length: 10 }, () => db.newDriver());
    const results = await Promise.all(drivers.map((d) => d.inboxInsert(message('race'))));
    assert.equal(results.filter((r) => !r.duplicate).length, 1);
    assert.equal(new Set(results.map((r) => r.id)).size, 1);
    const rows = await db.query(`SELECT id FROM ${inbox} WHERE idempotency_key = 'race'`);
    assert.equal(rows.length, 1);
  });

  it('store a rejected message directly as dead with its reason, and a non-JSON body as a JSON string', async () => {
    const { id } = await db.driver.inboxInsert(message('bad', { payload: 'not { json', deadReason: 'body is not valid JSON' }));
    const [row] = await db.query(`SELECT state, last_error, payload FROM ${inbox} WHERE id = $1`, [id]);
    assert.deepEqual(row, { state: 'dead', last_error: 'body is not valid JSON', payload: 'not { json' });
  });

  it('claim at most one row per aggregate of a source (its head), rows without aggregate freely, never pull rows', async () => {
    await db.driver.inboxInsert(message('a1', { aggregateId: 'A' }));
    await db.driver.inboxInsert(message('a2', { aggregateId: 'A', source: 'crm' }));
    await db.driver.inboxInsert(message('a3', { aggregateId: 'A' }));
    await db.driver.inboxInsert(message('n1'));
    await db.driver.inboxInsert(message('n2'));
    await db.driver.inboxInsert(message('p1', { consumption: 'pull' }));
    const claimed = await db.driver.inboxClaimPushMany({ limit: 10, leaseMs: 60_000 });
    assert.deepEqual(claimed.map((r) => r.idempotencyKey), ['a1', 'a2', 'n1', 'n2'], 'A of crm is not A of the other source');
    assert.deepEqual(await db.driver.inboxClaimPushMany({ limit: 10, leaseMs: 60_000 }), [], 'A is busy in both sources; nothing else is due');
    const [pull] = await db.query(`SELECT state FROM ${inbox} WHERE idempotency_key = 'p1'`);
    assert.equal(pull!.state, 'pending');
  });

  it('hold an aggregate while its head waits for a retry, and release it when the head is dead', async () => {
    await db.driver.inboxInsert(message('h1', { aggregateId: 'B' }));
    await db.driver.inboxInsert(message('h2', { aggregateId: 'B' }));
    const [head] = await db.driver.inboxClaimPushMany({ limit: 10, leaseMs: 60_000 });
    const retried = await db.driver.inboxRetryMany({ items: [{ id: head!.id, token: head!.claimToken, delayMs: 60_000, error: 'boom' }] });
    assert.deepEqual(retried, [head!.id]);
    assert.deepEqual(await db.driver.inboxClaimPushMany({ limit: 10, leaseMs: 60_000 }), [], 'h2 waits behind the retrying head');
    await db.query(`UPDATE ${inbox} SET scheduled_at = now() WHERE id = $1`, [head!.id]);
    const [again] = await db.driver.inboxClaimPushMany({ limit: 10, leaseMs: 60_000 });
    assert.equal(again!.idempotencyKey, 'h1');
    assert.equal(again!.attempt, 1);
    assert.deepEqual(await db.driver.inboxMarkDeadMany({ items: [{ id: again!.id, token: again!.claimToken, error: 'gave up' }] }), [again!.id]);
    const [next] = await db.driver.inboxClaimPushMany({ limit: 10, leaseMs: 60_000 });
    assert.equal(next!.idempotencyKey, 'h2');
  });

  it('fence every finishing write: a stale token changes nothing and forward inserts no outbox row', async () => {
    await db.driver.inboxInsert(message('f1'));
    const [row] = await db.driver.inboxClaimPushMany({ limit: 1, leaseMs: 60_000 });
    const stale = { id: row!.id, token: '00000000-0000-4000-8000-000000000000' };
    assert.deepEqual(await db.driver.inboxRenewMany({ claims: [stale], leaseMs: 60_000 }), []);
    assert.deepEqual(await db.driver.inboxRetryMany({ items: [{ ...stale, delayMs: 0, error: 'x' }] }), []);
    assert.deepEqual(await db.driver.inboxMarkDeadMany({ items: [{ ...stale, error: 'x' }] }), []);
    assert.equal(await db.driver.inboxForward({ ...stale, outbox: { topic: 't', payload: {} } }, { maxAttempts: 5 }), false);
    assert.deepEqual(await db.query(`SELECT 1 FROM ${outbox}`), []);
    assert.equal(await db.driver.inboxForward({ id: row!.id, token: row!.claimToken, outbox: { topic: 't', key: 'k', payload: { a: 1 } } }, { maxAttempts: 5 }), true);
    const [done] = await db.query(`SELECT state, processed_at IS NOT NULL AS stamped FROM ${inbox} WHERE id = $1`, [row!.id]);
    assert.deepEqual(done, { state: 'processed', stamped: true });
    assert.deepEqual(await db.query(`SELECT topic, key, payload FROM ${outbox}`), [{ topic: 't', key: 'k', payload: { a: 1 } }]);
  });

  it('refuse a forward after the lease expired, even with the right token', async () => {
    await db.driver.inboxInsert(message('e1'));
    const [row] = await db.driver.inboxClaimPushMany({ limit: 1, leaseMs: 60_000 });
    await db.query(`UPDATE ${inbox} SET lease_expires_at = clock_timestamp() - interval '1 second' WHERE id = $1`, [row!.id]);
    assert.equal(await db.driver.inboxForward({ id: row!.id, token: row!.claimToken, outbox: { topic: 't', payload: {} } }, { maxAttempts: 5 }), false);
    assert.deepEqual(await db.query(`SELECT 1 FROM ${outbox}`), []);
  });

  it('reclaim expired push rows counting the lost lease as an attempt, at most once per throttle, never pull rows', async () => {
    await db.driver.inboxInsert(message('r1'));
    await db.driver.inboxInsert(message('r2', { consumption: 'pull' }));
    await db.driver.inboxInsert(message('r3'));
    await db.query(`UPDATE ${inbox} SET state = 'processing', attempt = 2, claim_token = gen_random_uuid(), lease_expires_at = clock_timestamp() - interval '1 second'`);
    await db.query(`UPDATE ${inbox} SET attempt = 3 WHERE idempotency_key = 'r3'`);
    assert.deepEqual(await db.driver.inboxReclaimExpired({ throttleMs: 60_000, maxAttempts: 4 }), { ran: true, reclaimed: 1, dead: 1 });
    assert.deepEqual(await db.driver.inboxReclaimExpired({ throttleMs: 60_000, maxAttempts: 4 }), { ran: false, reclaimed: 0, dead: 0 });
    const rows = await db.query(`SELECT idempotency_key, state, attempt, claim_token, last_error FROM ${inbox} ORDER BY idempotency_key`);
    assert.deepEqual(rows[0], { idempotency_key: 'r1', state: 'pending', attempt: 3, claim_token: null, last_error: 'lease expired during forward attempt 3 of 4 (the call did not finish within its lease)' });
    assert.equal(rows[1]!.state, 'processing');
    assert.deepEqual(rows[2], {
      idempotency_key: 'r3',
      state: 'dead',
      attempt: 3,
      claim_token: null,
      last_error: 'gave up after 4 of 4 attempts: the lease of the last one expired during the forward (the call did not finish within its lease)',
    });
  });

  it('report counts per state and the oldest due pending push age, list dead rows and delete finished rows in bounds', async () => {
    await db.driver.inboxInsert(message('s1'));
    await db.driver.inboxInsert(message('s2', { deadReason: 'bad' }));
    await db.driver.inboxInsert(message('s3', { deadReason: 'bad too' }));
    await db.query(`UPDATE ${inbox} SET scheduled_at = clock_timestamp() - interval '90 seconds', created_at = now() - interval '2 hours'`);
    const stats = await db.driver.inboxStats();
    assert.deepEqual(stats.counts, { pending: 1, processing: 0, processed: 0, dead: 2 });
    assert.ok(stats.oldestPendingAgeSeconds >= 90 && stats.oldestPendingAgeSeconds < 120);
    const dead = await db.driver.inboxDeadList({ limit: 10 });
    assert.deepEqual(dead.map((d) => d.topicOrSource), ['shop', 'shop']);
    assert.equal(await db.driver.inboxDeleteFinished({ state: 'dead', olderThanMs: 3_600_000, limit: 1 }), 1);
    assert.equal(await db.driver.inboxDeleteFinished({ state: 'dead', olderThanMs: 3 * 3_600_000, limit: 10 }), 0);
    assert.equal(await db.driver.inboxDeleteFinished({ state: 'processed', olderThanMs: 0, limit: 10 }), 0);
    await assert.rejects(db.driver.inboxDeleteFinished({ state: 'sent', olderThanMs: 0, limit: 10 }));
    assert.equal((await db.query(`SELECT 1 FROM ${inbox} WHERE state = 'pending'`)).length, 1);
  });
});
