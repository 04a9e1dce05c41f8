/**
 * Conformance cases of payload text: every method that stores or returns a payload keeps its
 * numbers digit for digit (`payloadText`), whatever a JavaScript number could hold.
 */
import assert from 'node:assert/strict';
import { enqueueRows, receiveRows, type DefineCase } from './driver-conformance.ts';

const LEASE = 60_000;
const BIG = '12345678901234567890123';
const FINE = '0.1000000000000000055511151231257827';

/** A payload text whose numbers a double would round. */
const text = (id: string) => `{"id": "${id}", "amount": ${BIG}, "ratio": ${FINE}}`;

/** `payloadText` carries both numbers as whole tokens, and `payload` is its parse. */
function assertExact(row: { payload: unknown; payloadText: string }, id: string): void {
  assert.match(row.payloadText, new RegExp(`"amount": ?${BIG}[,}]`), row.payloadText);
  assert.match(row.payloadText, new RegExp(`"ratio": ?${FINE.replace('.', '\\.')}[,}]`), row.payloadText);
  assert.equal((row.payload as { id: string }).id, id);
  assert.equal((row.payload as { amount: number }).amount, Number(BIG), 'payload is the parse of the text');
}

export function definePayloadTextCases(define: DefineCase): void {
  define('outboxInsert stores payloadText as given; outboxClaimMany returns it with every digit', async (t) => {
    await enqueueRows(t, [{ topic: 'exact', payload: { id: 'o-1', amount: Number(BIG), ratio: Number(FINE) }, payloadText: text('o-1') }]);
    const [row] = await t.driver.outboxClaimMany({ limit: 1, leaseMs: LEASE });
    assertExact(row!, 'o-1');
  });

  define('outboxClaimMany returns an object payload without payloadText given as its JSON text', async (t) => {
    await enqueueRows(t, [{ topic: 'plain', payload: { n: 1, s: 'ä' } }]);
    const [row] = await t.driver.outboxClaimMany({ limit: 1, leaseMs: LEASE });
    assert.deepEqual(JSON.parse(row!.payloadText), { n: 1, s: 'ä' });
    assert.deepEqual(row!.payload, { n: 1, s: 'ä' });
  });

  define('inboxInsert stores payloadText; inboxClaimPushMany and pullClaimMany return it with every digit', async (t) => {
    await receiveRows(t, [
      { idempotencyKey: 'push-1', payload: JSON.parse(text('push-1')) as unknown, payloadText: text('push-1') },
      { idempotencyKey: 'pull-1', source: 'pulled', consumption: 'pull', payload: JSON.parse(text('pull-1')) as unknown, payloadText: text('pull-1') },
    ]);
    const [pushed] = await t.driver.inboxClaimPushMany({ limit: 5, leaseMs: LEASE });
    assertExact(pushed!, 'push-1');
    const [pulled] = await t.driver.pullClaimMany({ source: 'pulled', limit: 5, leaseMs: LEASE });
    assertExact(pulled!, 'pull-1');
  });

  define('inboxForward and inboxForwardMany write the outbox payloadText: the claimed outbox rows keep every digit', async (t) => {
    await receiveRows(t, [{ idempotencyKey: 'f-1' }, { idempotencyKey: 'f-2' }]);
    const rows = await t.driver.inboxClaimPushMany({ limit: 2, leaseMs: LEASE });
    assert.equal(rows.length, 2);
    const item = (i: number) => ({
      id: rows[i]!.id,
      token: rows[i]!.claimToken,
      outbox: { topic: `forwarded.${i}`, payload: JSON.parse(text(`f-${i}`)) as Record<string, unknown>, payloadText: text(`f-${i}`) },
    });
    assert.equal(await t.driver.inboxForward(item(0), { maxAttempts: 5 }), true);
    const forwardMany = t.driver.inboxForwardMany;
    if (forwardMany) assert.deepEqual(await forwardMany([item(1)], { maxAttempts: 5 }), [rows[1]!.id]);
    else assert.equal(await t.driver.inboxForward(item(1), { maxAttempts: 5 }), true);
    const claimed = await t.driver.outboxClaimMany({ limit: 5, leaseMs: LEASE });
    assert.deepEqual(claimed.map((r) => r.topic).sort(), ['forwarded.0', 'forwarded.1']);
    for (const row of claimed) assertExact(row, `f-${row.topic.slice(-1)}`);
  });
}
