/**
 * Conformance cases of the outbox methods.
 */
import assert from 'node:assert/strict';
import type { ClaimRef } from '../../lib/db/driver.ts';
import { ReplayLimitError, UsageError } from '../../lib/errors.ts';
import { enqueueRows, type ConformanceTarget, type DefineCase } from './driver-conformance.ts';
import { defineFenceCases } from './fence-cases.ts';

const LEASE = 60_000;

async function claimOne(t: ConformanceTarget): Promise<ClaimRef> {
  await enqueueRows(t, [{ topic: 'fenced', payload: { n: 1 } }]);
  const [row] = await t.driver.outboxClaimMany({ limit: 1, leaseMs: LEASE });
  return { id: row!.id, token: row!.claimToken };
}

/** Claims one row, marks it sent or dead, and returns its id. */
async function finishedRow(t: ConformanceTarget, topic: string, outcome: 'sent' | 'dead'): Promise<string> {
  await enqueueRows(t, [{ topic, payload: {} }]);
  const [row] = await t.driver.outboxClaimMany({ limit: 1, leaseMs: LEASE });
  const claim = { id: row!.id, token: row!.claimToken };
  if (outcome === 'sent') assert.deepEqual(await t.driver.outboxMarkSentMany({ claims: [claim] }), [claim.id]);
  else assert.deepEqual(await t.driver.outboxMarkDeadMany({ items: [{ ...claim, error: `failed ${topic}` }] }), [claim.id]);
  return claim.id;
}

export function defineOutboxCases(define: DefineCase): void {
  define('outboxInsert writes inside the caller transaction: committed rows are pending, rolled back rows absent', async (t) => {
    const [kept] = await enqueueRows(t, [{ topic: 'order.paid', key: 'o-1', payload: { orderId: 'o-1' }, headers: { 'x-a': 'b' } }]);
    const dropped = await t.inTransaction((tx) => t.driver.outboxInsert(tx, { topic: 'gone', payload: {} }, { maxAttempts: 5 }), 'rollback');
    const row = (await t.row('outbox', kept!))!;
    assert.equal(row.state, 'pending');
    assert.equal(row.topic, 'order.paid');
    assert.equal(row.key, 'o-1');
    assert.deepEqual(row.payload, { orderId: 'o-1' });
    assert.deepEqual(row.headers, { 'x-a': 'b' });
    assert.equal(row.attempt, 0);
    assert.equal(row.max_attempts, 5);
    assert.equal(await t.row('outbox', dropped), undefined);
  });

  define('outboxInsert keeps a caller-chosen id, maxAttempts and a delay on the database clock', async (t) => {
    const id = '6f9619ff-8b86-4011-b42d-00c04fd430c8';
    const now = await t.driver.clockNow();
    await enqueueRows(t, [{ id, topic: 'later', payload: {}, delayMs: 60_000, maxAttempts: 9 }]);
    const row = (await t.row('outbox', id))!;
    assert.equal(row.id, id);
    assert.equal(row.max_attempts, 9);
    const dueIn = row.scheduled_at.getTime() - now.getTime();
    assert.ok(dueIn >= 59_000 && dueIn <= 61_000, `due in ~60 s, got ${dueIn} ms`);
  });

  define('outboxClaimMany claims only the head of a key; rows without key are claimed freely', async (t) => {
    const [k1, k2, j1, free1, free2] = await enqueueRows(t, [
      { topic: 't', key: 'k', payload: { n: 1 } },
      { topic: 't', key: 'k', payload: { n: 2 } },
      { topic: 't', key: 'j', payload: { n: 1 } },
      { topic: 't', payload: { n: 3 } },
      { topic: 't', payload: { n: 4 } },
    ]);
    const claimed = await t.driver.outboxClaimMany({ limit: 10, leaseMs: LEASE });
    assert.deepEqual(claimed.map((r) => r.id).sort(), [k1, j1, free1, free2].sort());
    const k1Row = claimed.find((r) => r.id === k1)!;
    assert.equal(k1Row.key, 'k');
    assert.deepEqual(k1Row.payload, { n: 1 });
    assert.equal(k1Row.attempt, 0);
    assert.equal(k1Row.maxAttempts, 5);
    assert.deepEqual(await t.driver.outboxClaimMany({ limit: 10, leaseMs: LEASE }), [], 'k2 waits while k1 is processing');
    await t.driver.outboxMarkSentMany({ claims: [{ id: k1!, token: k1Row.claimToken }] });
    const next = await t.driver.outboxClaimMany({ limit: 10, leaseMs: LEASE });
    assert.deepEqual(next.map((r) => r.id), [k2]);
  });

  define('outboxClaimMany sets processing, a fresh token per row and claimed_at', async (t) => {
    await enqueueRows(t, [{ topic: 'a', payload: {} }, { topic: 'b', payload: {} }]);
    const claimed = await t.driver.outboxClaimMany({ limit: 10, leaseMs: LEASE });
    assert.equal(claimed.length, 2);
    assert.notEqual(claimed[0]!.claimToken, claimed[1]!.claimToken);
    for (const c of claimed) {
      const row = (await t.row('outbox', c.id))!;
      assert.equal(row.state, 'processing');
      assert.equal(row.claim_token, c.claimToken);
      assert.ok(row.claimed_at instanceof Date);
    }
  });

  define('outboxClaimMany: a head waiting for its retry holds its key', async (t) => {
    const [k1] = await enqueueRows(t, [{ topic: 't', key: 'k', payload: {} }, { topic: 't', key: 'k', payload: {} }]);
    const [row] = await t.driver.outboxClaimMany({ limit: 10, leaseMs: LEASE });
    assert.equal(row!.id, k1);
    assert.deepEqual(await t.driver.outboxRetryMany({ items: [{ id: k1!, token: row!.claimToken, delayMs: 60_000, error: 'later' }] }), [k1]);
    assert.deepEqual(await t.driver.outboxClaimMany({ limit: 10, leaseMs: LEASE }), []);
  });

  define('outboxClaimMany takes due retries before first attempts scheduled earlier: a retried head does not wait behind the backlog', async (t) => {
    const [k1, k2] = await enqueueRows(t, [{ topic: 't', key: 'k', payload: {} }, { topic: 't', key: 'k', payload: {} }]);
    const [row] = await t.driver.outboxClaimMany({ limit: 1, leaseMs: LEASE });
    assert.equal(row!.id, k1);
    assert.deepEqual(await t.driver.outboxRetryMany({ items: [{ id: k1!, token: row!.claimToken, delayMs: 0, error: 'throttled' }] }), [k1]);
    const now = Date.now();
    const [b1, b2] = await enqueueRows(t, [
      { topic: 'backlog', payload: {}, scheduledAt: new Date(now - 30_000) },
      { topic: 'backlog', payload: {}, scheduledAt: new Date(now - 20_000) },
    ]);
    const [again] = await t.driver.outboxClaimMany({ limit: 1, leaseMs: LEASE });
    assert.equal(again!.id, k1, 'the due retry goes before b1 and b2, scheduled 20–30 s earlier');
    assert.equal(again!.attempt, 1);
    const next = await t.driver.outboxClaimMany({ limit: 2, leaseMs: LEASE });
    assert.deepEqual(next.map((r) => r.id).sort(), [b1, b2].sort());
    const [waiting] = await enqueueRows(t, [{ topic: 'retry-later', key: 'w', payload: {} }]);
    const [wRow] = await t.driver.outboxClaimMany({ limit: 1, leaseMs: LEASE });
    assert.equal(wRow!.id, waiting);
    assert.deepEqual(await t.driver.outboxRetryMany({ items: [{ id: waiting!, token: wRow!.claimToken, delayMs: 60_000, error: 'later' }] }), [waiting]);
    assert.deepEqual(await t.driver.outboxClaimMany({ limit: 10, leaseMs: LEASE }), [], 'k2 waits for k1 in flight; a retry not yet due is not taken');
    assert.ok(k2);
  });

  define('outboxClaimMany takes only due rows', async (t) => {
    const [due] = await enqueueRows(t, [{ topic: 'now', payload: {} }, { topic: 'later', payload: {}, delayMs: 60_000 }]);
    const claimed = await t.driver.outboxClaimMany({ limit: 10, leaseMs: LEASE });
    assert.deepEqual(claimed.map((r) => r.id), [due]);
  });

  define('outboxClaimMany takes rows in scheduled order, then sequence', async (t) => {
    const now = Date.now();
    const [late, early, middle] = await enqueueRows(t, [
      { topic: 'late', payload: {}, scheduledAt: new Date(now - 10_000) },
      { topic: 'early', payload: {}, scheduledAt: new Date(now - 30_000) },
      { topic: 'middle', payload: {}, scheduledAt: new Date(now - 20_000) },
    ]);
    const claimed = await t.driver.outboxClaimMany({ limit: 2, leaseMs: LEASE });
    assert.deepEqual(claimed.map((r) => r.id).sort(), [early, middle].sort());
    assert.deepEqual((await t.driver.outboxClaimMany({ limit: 2, leaseMs: LEASE })).map((r) => r.id), [late]);
  });

  define('outboxClaimMany by four replicas at once: every row once, one row per key', async (t) => {
    const messages = [];
    for (let n = 0; n < 3; n++) for (const key of ['a', 'b', 'c', 'd', 'e']) messages.push({ topic: 't', key, payload: { n } });
    for (let n = 0; n < 10; n++) messages.push({ topic: 'free', payload: { n } });
    await enqueueRows(t, messages);
    const replicas = [t.newDriver(), t.newDriver(), t.newDriver(), t.newDriver()];
    const results = await Promise.all(replicas.map((d) => d.outboxClaimMany({ limit: 6, leaseMs: LEASE })));
    await Promise.all(replicas.map((d) => d.close()));
    const all = results.flat();
    assert.equal(new Set(all.map((r) => r.id)).size, all.length, 'no row claimed twice');
    const keyed = all.filter((r) => r.key !== null);
    assert.equal(new Set(keyed.map((r) => r.key)).size, keyed.length, 'at most one row per key');
    assert.ok(keyed.every((r) => (r.payload as { n: number }).n === 0), 'only heads');
    assert.equal(all.length, 15, 'five heads and ten keyless rows');
  });

  defineFenceCases(define, {
    method: 'outboxRenewMany',
    table: 'outbox',
    claim: claimOne,
    write: async (t, c) => (await t.driver.outboxRenewMany({ claims: [c], leaseMs: 600_000 })).includes(c.id),
    check: (row, before) => assert.ok(row.lease_expires_at!.getTime() > before.lease_expires_at!.getTime() + 500_000, 'lease extended'),
  });
  defineFenceCases(define, {
    method: 'outboxMarkSentMany',
    table: 'outbox',
    claim: claimOne,
    write: async (t, c) => (await t.driver.outboxMarkSentMany({ claims: [c] })).includes(c.id),
    check: (row) => assert.equal(row.state, 'sent'),
  });
  defineFenceCases(define, {
    method: 'outboxRetryMany',
    table: 'outbox',
    claim: claimOne,
    write: async (t, c) => (await t.driver.outboxRetryMany({ items: [{ ...c, delayMs: 30_000, error: 'boom' }] })).includes(c.id),
    check: (row, before) => {
      assert.equal(row.state, 'pending');
      assert.equal(row.attempt, before.attempt + 1);
      assert.equal(row.last_error, 'boom');
      assert.equal(row.claim_token?.toLowerCase(), before.claim_token?.toLowerCase(), 'the token stays on the pending row (a write sent again after a lost answer recognises it)');
      assert.ok(row.scheduled_at.getTime() >= before.claimed_at!.getTime() + 29_000, 'due after the delay');
    },
  });
  defineFenceCases(define, {
    method: 'outboxMarkDeadMany',
    table: 'outbox',
    claim: claimOne,
    write: async (t, c) => (await t.driver.outboxMarkDeadMany({ items: [{ ...c, error: 'no route' }] })).includes(c.id),
    check: (row) => {
      assert.equal(row.state, 'dead');
      assert.equal(row.last_error, 'no route');
    },
  });

  define('outboxMarkSentMany settles a batch in one call and reports only the rows that kept their claim', async (t) => {
    await enqueueRows(t, [{ topic: 'a', payload: {} }, { topic: 'b', payload: {} }, { topic: 'c', payload: {} }]);
    const [a, b, c] = await t.driver.outboxClaimMany({ limit: 3, leaseMs: LEASE });
    await t.setTime('outbox', c!.id, 'lease_expires_at', -1000);
    const changed = await t.driver.outboxMarkSentMany({
      claims: [
        { id: a!.id, token: a!.claimToken },
        { id: b!.id, token: a!.claimToken },
        { id: c!.id, token: c!.claimToken },
      ],
    });
    assert.deepEqual(changed, [a!.id]);
  });

  define('outboxReclaimExpired returns expired rows to pending with the lost lease counted as an attempt, and leaves live claims alone', async (t) => {
    await enqueueRows(t, [{ topic: 'a', payload: {} }, { topic: 'b', payload: {} }]);
    const [expired, live] = await t.driver.outboxClaimMany({ limit: 2, leaseMs: LEASE });
    await t.setTime('outbox', expired!.id, 'lease_expires_at', -1000);
    assert.deepEqual(await t.driver.outboxReclaimExpired({}), { ran: true, reclaimed: 1, dead: 0 });
    const row = (await t.row('outbox', expired!.id))!;
    assert.equal(row.state, 'pending');
    assert.equal(row.attempt, 1);
    assert.equal(row.last_error, 'lease expired during delivery attempt 1 of 5 (the call did not finish within its lease)');
    assert.equal(row.claim_token, null);
    assert.equal((await t.row('outbox', live!.id))!.state, 'processing');
  });

  define('outboxReclaimExpired makes a row dead when the lease of its last attempt expired, and its key moves on', async (t) => {
    const [head, next] = await enqueueRows(t, [{ topic: 'a', key: 'k', payload: {}, maxAttempts: 2 }, { topic: 'a', key: 'k', payload: {} }]);
    for (const expected of [{ reclaimed: 1, dead: 0 }, { reclaimed: 0, dead: 1 }]) {
      const claimed = await t.driver.outboxClaimMany({ limit: 10, leaseMs: LEASE });
      assert.deepEqual(claimed.map((r) => r.id), [head], 'only the head of the key is claimed');
      await t.setTime('outbox', head!, 'lease_expires_at', -1000);
      assert.deepEqual(await t.driver.outboxReclaimExpired({}), { ran: true, ...expected });
    }
    const row = (await t.row('outbox', head!))!;
    assert.equal(row.state, 'dead');
    assert.equal(row.attempt, 1, 'the 0-based number of its last delivery');
    assert.equal(row.last_error, 'gave up after 2 of 2 attempts: the lease of the last one expired during the delivery (the call did not finish within its lease)');
    assert.equal(row.claim_token, null);
    assert.deepEqual((await t.driver.outboxClaimMany({ limit: 10, leaseMs: LEASE })).map((r) => r.id), [next], 'the dead head releases its key');
  });

  define('outboxReclaimExpired is throttled through the database and runs when forced', async (t) => {
    assert.equal((await t.driver.outboxReclaimExpired({ throttleMs: 60_000 })).ran, true);
    const other = t.newDriver();
    assert.deepEqual(await other.outboxReclaimExpired({ throttleMs: 60_000 }), { ran: false, reclaimed: 0, dead: 0 });
    await other.close();
    assert.equal((await t.driver.outboxReclaimExpired({})).ran, true, 'a forced run ignores the throttle');
  });

  define('outboxStats counts rows per state and the oldest due pending age', async (t) => {
    await finishedRow(t, 'x', 'dead');
    await enqueueRows(t, [{ topic: 'old', payload: {}, scheduledAt: new Date(Date.now() - 20_000) }, { topic: 'new', payload: {} }, { topic: 'later', payload: {}, delayMs: 60_000 }]);
    const stats = await t.driver.outboxStats();
    assert.deepEqual(stats.counts, { pending: 3, processing: 0, sent: 0, dead: 1 });
    assert.ok(stats.oldestPendingAgeSeconds >= 19 && stats.oldestPendingAgeSeconds < 60, `age ${stats.oldestPendingAgeSeconds}`);
    const backlog = await t.driver.outboxStats({ pendingOnly: true });
    assert.deepEqual(backlog.counts, { pending: 3 }, 'pendingOnly counts the backlog only');
    assert.ok(Math.abs(backlog.oldestPendingAgeSeconds - stats.oldestPendingAgeSeconds) < 5, `age ${backlog.oldestPendingAgeSeconds}`);
  });

  define('outboxStats: rows scheduled only in the future are counted, and nothing is due (age 0)', async (t) => {
    await enqueueRows(t, [{ topic: 'later', payload: {}, delayMs: 60_000 }, { topic: 'much later', payload: {}, delayMs: 120_000 }]);
    for (const scope of [{}, { pendingOnly: true }]) {
      const stats = await t.driver.outboxStats(scope);
      assert.equal(stats.counts.pending, 2, JSON.stringify(scope));
      assert.equal(stats.oldestPendingAgeSeconds, 0, `${JSON.stringify(scope)}: no row is due`);
    }
  });

  define('outboxDeadList lists dead rows newest first with their last error, up to the limit', async (t) => {
    await finishedRow(t, 'first', 'dead');
    const second = await finishedRow(t, 'second', 'dead');
    await finishedRow(t, 'fine', 'sent');
    const list = await t.driver.outboxDeadList({ limit: 1 });
    assert.equal(list.length, 1);
    assert.equal(list[0]!.id, second);
    assert.equal(list[0]!.topicOrSource, 'second');
    assert.equal(list[0]!.lastError, 'failed second');
    assert.equal((await t.driver.outboxDeadList({ limit: 10 })).length, 2);
  });

  define('outboxReplay moves matching sent and dead rows to pending, resetting attempt, error and claim', async (t) => {
    const dead = await finishedRow(t, 'orders.created', 'dead');
    const sent = await finishedRow(t, 'orders.paid', 'sent');
    const other = await finishedRow(t, 'users.created', 'dead');
    const [pending] = await enqueueRows(t, [{ topic: 'orders.created', payload: {} }]);
    assert.equal(await t.driver.outboxReplay({ topicPatterns: ['orders.*'] }), 2);
    for (const id of [dead, sent]) {
      const row = (await t.row('outbox', id))!;
      assert.equal(row.state, 'pending');
      assert.equal(row.attempt, 0);
      assert.equal(row.last_error, null);
      assert.equal(row.claim_token, null);
      assert.equal(row.replay_count, 1);
    }
    assert.equal((await t.row('outbox', other))!.state, 'dead');
    assert.equal((await t.row('outbox', pending!))!.replay_count, 0);
  });

  define('outboxReplay filters by ids, topics, state and created range', async (t) => {
    const a = await finishedRow(t, 'a', 'dead');
    const b = await finishedRow(t, 'b', 'sent');
    const c = await finishedRow(t, 'c', 'dead');
    assert.equal(await t.driver.outboxReplay({ ids: [a], states: ['sent'] }), 0);
    assert.equal(await t.driver.outboxReplay({ ids: [a, b], states: ['dead'] }), 1);
    assert.equal(await t.driver.outboxReplay({ topics: ['b'] }), 1);
    await t.setTime('outbox', c, 'created_at', -3_600_000);
    assert.equal(await t.driver.outboxReplay({ createdTo: new Date(Date.now() - 60_000) }), 1);
    assert.deepEqual([a, b, c].map(() => 'pending'), await Promise.all([a, b, c].map(async (id) => (await t.row('outbox', id))!.state)));
  });

  define('outboxReplayPreview counts exactly what outboxReplay would move, samples the oldest, and changes nothing', async (t) => {
    const first = await finishedRow(t, 'preview.a', 'dead');
    const second = await finishedRow(t, 'preview.b', 'dead');
    const sent = await finishedRow(t, 'preview.c', 'sent');
    await finishedRow(t, 'other', 'dead');
    await enqueueRows(t, [{ topic: 'preview.a', payload: {} }]);
    await t.setTime('outbox', first, 'created_at', -60_000);
    const filter = { topicPatterns: ['preview.*'], states: ['dead' as const] };
    const preview = await t.driver.outboxReplayPreview({ filter, limit: 1 });
    assert.equal(preview.count, 2);
    assert.equal(preview.sample.length, 1);
    const [row] = preview.sample;
    assert.deepEqual([row!.id, row!.topic, row!.key, row!.state, row!.lastError], [first, 'preview.a', null, 'dead', 'failed preview.a']);
    assert.ok(row!.createdAt instanceof Date && row!.updatedAt instanceof Date);
    assert.equal(typeof row!.attempt, 'number');
    assert.equal((await t.row('outbox', first))!.state, 'dead', 'a preview moves nothing');
    assert.equal((await t.driver.outboxReplayPreview({ filter: { ids: [sent, second] }, limit: 10 })).count, 2, 'sent and dead by default at the driver');
    assert.deepEqual(await t.driver.outboxReplayPreview({ filter: { topics: ['nothing'] }, limit: 5 }), { count: 0, sample: [] });
    assert.equal(await t.driver.outboxReplay(filter), preview.count);
    await assert.rejects(t.driver.outboxReplayPreview({ filter: {}, limit: 5 }), UsageError);
  });

  define('outboxReplay with asRead moves a row only while its updated_at is the one read (to the millisecond)', async (t) => {
    const a = await finishedRow(t, 'as-read.a', 'dead');
    const b = await finishedRow(t, 'as-read.b', 'dead');
    const { sample } = await t.driver.outboxReplayPreview({ filter: { ids: [a, b], states: ['dead'] }, limit: 10 });
    const asRead = sample.map((r) => ({ id: r.id, updatedAtMs: r.updatedAt.getTime() }));
    assert.equal(asRead.length, 2);
    // b is replayed elsewhere and dies again: same state, a later updated_at.
    await t.setTime('outbox', b, 'updated_at', 1_000);
    const stale = asRead.map((r) => ({ ...r, updatedAtMs: r.updatedAtMs - 1 }));
    assert.equal(await t.driver.outboxReplay({ ids: [a, b], states: ['dead'], asRead: stale }), 0, 'a millisecond off is a change');
    assert.equal(await t.driver.outboxReplay({ ids: [a, b], states: ['dead'], asRead }), 1, 'the clock keeps sub-millisecond digits; the read value matches them truncated');
    assert.deepEqual([(await t.row('outbox', a))!.state, (await t.row('outbox', b))!.state], ['pending', 'dead']);
    await assert.rejects(t.driver.outboxReplay({ ids: [b], states: ['dead'], asRead: [] }), UsageError, 'an empty list never widens a replay');
  });

  define('outboxReplay with maxRows moves every matching row when no more than maxRows match, and none (ReplayLimitError) when more do', async (t) => {
    const rows = [await finishedRow(t, 'bounded.a', 'dead'), await finishedRow(t, 'bounded.a', 'dead'), await finishedRow(t, 'bounded.a', 'dead')];
    await assert.rejects(t.driver.outboxReplay({ topics: ['bounded.a'], states: ['dead'], maxRows: 2 }), ReplayLimitError);
    assert.deepEqual(await Promise.all(rows.map(async (id) => (await t.row('outbox', id))!.state)), ['dead', 'dead', 'dead'], 'nothing moved');
    assert.equal(await t.driver.outboxReplay({ topics: ['bounded.a'], states: ['dead'], maxRows: 3 }), 3);
    assert.equal(await t.driver.outboxReplay({ topics: ['bounded.a'], states: ['dead'], maxRows: 3 }), 0, 'replayed rows left the filter');
    await assert.rejects(t.driver.outboxReplay({ topics: ['bounded.a'], maxRows: 0 }), UsageError);
  });

  define('outboxReplay refuses an empty filter and states other than sent or dead', async (t) => {
    await assert.rejects(t.driver.outboxReplay({}), UsageError);
    await assert.rejects(t.driver.outboxReplay({ topics: ['x'], states: ['pending' as 'sent'] }), UsageError);
  });

  define('outboxDeleteFinished deletes old rows of one finished state, at most limit, never pending', async (t) => {
    const old1 = await finishedRow(t, 'a', 'sent');
    const old2 = await finishedRow(t, 'b', 'sent');
    const fresh = await finishedRow(t, 'c', 'sent');
    const oldDead = await finishedRow(t, 'd', 'dead');
    const [pending] = await enqueueRows(t, [{ topic: 'e', payload: {} }]);
    for (const id of [old1, old2, oldDead, pending!]) await t.setTime('outbox', id, 'updated_at', -7_200_000);
    assert.equal(await t.driver.outboxDeleteFinished({ state: 'sent', olderThanMs: 3_600_000, limit: 1 }), 1);
    assert.equal(await t.driver.outboxDeleteFinished({ state: 'sent', olderThanMs: 3_600_000, limit: 10 }), 1);
    assert.equal(await t.row('outbox', old1), undefined);
    assert.equal(await t.row('outbox', old2), undefined);
    assert.ok(await t.row('outbox', fresh));
    assert.ok(await t.row('outbox', oldDead));
    assert.ok(await t.row('outbox', pending!));
    await assert.rejects(t.driver.outboxDeleteFinished({ state: 'processed', olderThanMs: 0, limit: 10 }), UsageError);
  });
}
