/**
 * The fenced batch writes answer with the claims they did *not* change (the server sends their
 * positions, not every changed id); the driver turns that into the ids changed. These tests hold
 * a batch in which some claims were lost — a new owner's token, a lease that ended, a row already
 * settled — and check every write returns exactly the claims that held, in the caller's order and
 * spelling, and changed nothing else.
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import type { ClaimRef } from '../../lib/db/driver.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { insertOutboxRows } from '../helpers/outbox-pass-fixture.ts';

describe('fenced batch writes: the ids they changed, when some claims were lost', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({
      destinations: { main: { type: 'sqs', queueUrl: 'http://localhost:1/000000000000/main' } },
      outbox: { routes: [{ topicPattern: '**', destination: 'main' }] },
      inbox: { sources: { hooks: { type: 'http', path: '/hooks', auth: { type: 'none' } } } },
    });
  });
  after(async () => db.drop());
  beforeEach(async () => {
    await db.query(`DELETE FROM "${db.schema}".outbox`);
    await db.query(`DELETE FROM "${db.schema}".inbox`);
  });

  /** Claims six keyless outbox rows, then loses three claims: a new token, an ended lease, a row already sent. */
  async function batchWithLostClaims(): Promise<{ claims: ClaimRef[]; kept: ClaimRef[]; lost: ClaimRef[] }> {
    await insertOutboxRows(db, Array.from({ length: 6 }, (_, i) => ({ topic: 'orders.paid', payload: { i } })));
    const rows = await db.driver.outboxClaimMany({ limit: 6, leaseMs: 60_000 });
    assert.equal(rows.length, 6);
    const claims = rows.map((r) => ({ id: r.id, token: r.claimToken }));
    const t = `"${db.schema}".outbox`;
    await db.query(`UPDATE ${t} SET claim_token = gen_random_uuid() WHERE id = $1`, [claims[1]!.id]);
    await db.query(`UPDATE ${t} SET lease_expires_at = clock_timestamp() - interval '1 second' WHERE id = $1`, [claims[3]!.id]);
    await db.query(`UPDATE ${t} SET state = 'sent', lease_expires_at = NULL WHERE id = $1`, [claims[4]!.id]);
    return { claims, kept: [claims[0]!, claims[2]!, claims[5]!], lost: [claims[1]!, claims[3]!, claims[4]!] };
  }

  async function states(ids: string[]): Promise<string[]> {
    const rows = await db.query(`SELECT id, state FROM "${db.schema}".outbox WHERE id = ANY ($1::uuid[])`, [ids]);
    const byId = new Map(rows.map((r) => [r.id as string, r.state as string]));
    return ids.map((id) => byId.get(id) ?? 'missing');
  }

  it('mark sent returns the claims that held, in the order given, and leaves the lost rows as they were', async () => {
    const { claims, kept, lost } = await batchWithLostClaims();
    // Reversed, to show the order is the caller's and not the server's.
    const changed = await db.driver.outboxMarkSentMany({ claims: [...claims].reverse() });
    assert.deepEqual(changed, [...kept].reverse().map((c) => c.id));
    assert.deepEqual(await states(kept.map((c) => c.id)), ['sent', 'sent', 'sent']);
    assert.deepEqual(await states(lost.map((c) => c.id)), ['processing', 'processing', 'sent']);
  });

  it('renew, retry, release and dead each return only the claims that held', async () => {
    const { claims, kept } = await batchWithLostClaims();
    assert.deepEqual(await db.driver.outboxRenewMany({ claims, leaseMs: 60_000 }), kept.map((c) => c.id));
    assert.deepEqual(await db.driver.outboxRetryMany({ items: claims.slice(0, 3).map((c) => ({ ...c, delayMs: 0, error: 'try again' })) }), [kept[0]!.id, kept[1]!.id]);
    assert.deepEqual(await db.driver.outboxReleaseMany!({ claims: claims.slice(3, 5) }), []);
    assert.deepEqual(await db.driver.outboxMarkDeadMany({ items: claims.slice(3).map((c) => ({ ...c, error: 'gone' })) }), [kept[2]!.id]);
    assert.deepEqual(await states(claims.map((c) => c.id)), ['pending', 'processing', 'pending', 'processing', 'sent', 'dead']);
  });

  it('answers with the ids as the caller spelled them (upper case), and a batch with every claim lost changes nothing', async () => {
    const { claims, kept } = await batchWithLostClaims();
    const upper = claims.map((c) => ({ id: c.id.toUpperCase(), token: c.token.toUpperCase() }));
    assert.deepEqual(await db.driver.outboxRenewMany({ claims: upper, leaseMs: 60_000 }), kept.map((c) => c.id.toUpperCase()));
    const stranger = { id: claims[0]!.id, token: '00000000-0000-4000-8000-000000000000' };
    assert.deepEqual(await db.driver.outboxMarkSentMany({ claims: [stranger, claims[1]!] }), []);
    assert.deepEqual(await states([claims[0]!.id, claims[1]!.id]), ['processing', 'processing']);
  });

  it('an id given twice (with its token, or once with another) is written once and answered once', async () => {
    const { claims, kept } = await batchWithLostClaims();
    const first = kept[0]!;
    const stranger = { id: first.id, token: '00000000-0000-4000-8000-000000000000' };
    assert.deepEqual(await db.driver.outboxRenewMany({ claims: [first, first, stranger], leaseMs: 60_000 }), [first.id]);
    assert.deepEqual(await db.driver.outboxMarkSentMany({ claims: [stranger, first, first, claims[1]!] }), [first.id]);
    assert.deepEqual(await states([first.id]), ['sent']);
  });

  it('the relay forward refuses an inbox row given twice in one batch, writing nothing', async () => {
    const stored = await db.driver.inboxInsert({ source: 'hooks', idempotencyKey: 'twice', eventType: 'order.paid', aggregateId: 'x', payload: {}, headers: {}, consumption: 'push' });
    const [row] = await db.driver.inboxClaimPushMany({ limit: 1, leaseMs: 60_000 });
    assert.equal(row?.id, stored.id);
    const item = { id: row!.id, token: row!.claimToken, outbox: { topic: 'order.paid', key: 'x', payload: {} } };
    await assert.rejects(db.driver.inboxForwardMany!([item, { ...item, id: item.id.toUpperCase() }], { maxAttempts: 5 }), (error: Error) => error.name === 'UsageError' && error.message.includes('given twice'));
    assert.deepEqual(await db.query(`SELECT id FROM "${db.schema}".outbox`), []);
    const [after] = await db.query(`SELECT state FROM "${db.schema}".inbox WHERE id = $1`, [row!.id]);
    assert.equal(after!.state, 'processing');
  });

  it('the relay forward returns the items whose claim held and writes outbox rows for those only', async () => {
    for (const key of ['a', 'b', 'c']) {
      const stored = await db.driver.inboxInsert({ source: 'hooks', idempotencyKey: key, eventType: 'order.paid', aggregateId: key, payload: { key }, headers: {}, consumption: 'push' });
      assert.equal(stored.duplicate, false);
    }
    const claimed = await db.driver.inboxClaimPushMany({ limit: 3, leaseMs: 60_000 });
    assert.equal(claimed.length, 3);
    await db.query(`UPDATE "${db.schema}".inbox SET claim_token = gen_random_uuid() WHERE id = $1`, [claimed[1]!.id]);
    const items = claimed.map((r) => ({ id: r.id, token: r.claimToken, outbox: { topic: 'order.paid', key: r.aggregateId, payload: { from: r.id } } }));
    const forwarded = await db.driver.inboxForwardMany!(items, { maxAttempts: 5 });
    assert.deepEqual(forwarded, [claimed[0]!.id, claimed[2]!.id]);
    const outbox = await db.query(`SELECT key FROM "${db.schema}".outbox ORDER BY sequence`);
    assert.deepEqual(outbox.map((r) => r.key), [claimed[0]!.aggregateId, claimed[2]!.aggregateId]);
  });
});
