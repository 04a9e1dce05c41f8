/**
 * Conformance cases of the inbox methods (receive, relay claim, forward, settle, operations).
 */
import assert from 'node:assert/strict';
import type { ClaimRef, Driver } from '../../lib/db/driver.ts';
import { UsageError } from '../../lib/errors.ts';
import { enqueueRows, receiveRows, type ConformanceTarget, type DefineCase } from './driver-conformance.ts';
import { withStatementBudget } from '../../lib/db/statement-budget.ts';
import { defineFenceCases } from './fence-cases.ts';

const LEASE = 60_000;

async function claimOne(t: ConformanceTarget): Promise<ClaimRef> {
  await receiveRows(t, [{ idempotencyKey: `fenced-${Math.random()}` }]);
  const [row] = await t.driver.inboxClaimPushMany({ limit: 1, leaseMs: LEASE });
  return { id: row!.id, token: row!.claimToken };
}

/** Receives one row and finishes it as `processed` (through a forward) or `dead`. */
async function finishedRow(t: ConformanceTarget, key: string, outcome: 'processed' | 'dead'): Promise<string> {
  await receiveRows(t, [{ idempotencyKey: key, source: `source-${key}` }]);
  const [row] = await t.driver.inboxClaimPushMany({ limit: 1, leaseMs: LEASE });
  const claim = { id: row!.id, token: row!.claimToken };
  if (outcome === 'processed') assert.equal(await t.driver.inboxForward({ ...claim, outbox: { topic: `relayed.${key}`, payload: {} } }, { maxAttempts: 5 }), true);
  else assert.deepEqual(await t.driver.inboxMarkDeadMany({ items: [{ ...claim, error: `failed ${key}` }] }), [claim.id]);
  return claim.id;
}

export function defineInboxCases(define: DefineCase): void {
  define('inboxInsert stores a message once per (source, idempotency key) and reports the duplicate', async (t) => {
    const message = { source: 'stripe', idempotencyKey: 'evt-1', aggregateId: 'cus-1', eventType: 'paid', payload: { amount: 5 }, headers: { 'x-a': 'b' }, correlationId: 'c-1', consumption: 'push' as const };
    const first = await t.driver.inboxInsert(message);
    const second = await t.driver.inboxInsert({ ...message, payload: { amount: 6 } });
    const otherSource = await t.driver.inboxInsert({ ...message, source: 'github' });
    assert.equal(first.duplicate, false);
    assert.deepEqual(second, { id: first.id, duplicate: true });
    assert.equal(otherSource.duplicate, false);
    const row = (await t.row('inbox', first.id))!;
    assert.equal(row.state, 'pending');
    assert.deepEqual(row.payload, { amount: 5 });
    assert.deepEqual(row.headers, { 'x-a': 'b' });
    assert.equal(row.aggregate_id, 'cus-1');
    assert.equal(row.event_type, 'paid');
    assert.equal(row.correlation_id, 'c-1');
    assert.equal(row.consumption, 'push');
  });

  define('inboxInsert of the same key by five receivers at once stores one row', async (t) => {
    const receivers = [0, 1, 2, 3, 4].map(() => t.newDriver());
    const results = await Promise.all(receivers.map((d) => d.inboxInsert({ source: 'sqs', idempotencyKey: 'same', payload: 'not json', consumption: 'push' })));
    await Promise.all(receivers.map((d) => d.close()));
    assert.equal(results.filter((r) => !r.duplicate).length, 1);
    assert.equal(new Set(results.map((r) => r.id)).size, 1);
    assert.equal(await t.count('inbox'), 1);
    assert.equal((await t.row('inbox', results[0]!.id))!.payload, 'not json', 'a string payload is kept as a JSON string');
  });

  define('inboxInsert stores a rejected message directly as dead, and inside a caller transaction', async (t) => {
    const dead = await t.driver.inboxInsert({ source: 'sqs', idempotencyKey: 'bad', payload: 'x', consumption: 'push', deadReason: 'body is not JSON' });
    const row = (await t.row('inbox', dead.id))!;
    assert.equal(row.state, 'dead');
    assert.equal(row.last_error, 'body is not JSON');
    const rolledBack = await t.inTransaction((tx) => t.driver.inboxInsert({ source: 'sqs', idempotencyKey: 'tx', payload: {}, consumption: 'push' }, tx), 'rollback');
    assert.equal(await t.row('inbox', rolledBack.id), undefined);
  });

  define('inboxClaimPushMany claims one row per aggregate of each source; rows without aggregate (none or empty) freely', async (t) => {
    const [a1, a2, b1, otherA1, otherA2, free, empty1, empty2] = await receiveRows(t, [
      { idempotencyKey: 'a1', aggregateId: 'A' },
      { idempotencyKey: 'a2', aggregateId: 'A' },
      { idempotencyKey: 'b1', aggregateId: 'B' },
      { idempotencyKey: 'a3', aggregateId: 'A', source: 'other' },
      { idempotencyKey: 'a4', aggregateId: 'A', source: 'other' },
      { idempotencyKey: 'free' },
      { idempotencyKey: 'e1', aggregateId: '' },
      { idempotencyKey: 'e2', aggregateId: '' },
    ]);
    const claimed = await t.driver.inboxClaimPushMany({ limit: 10, leaseMs: LEASE });
    assert.deepEqual(claimed.map((r) => r.id).sort(), [a1, b1, otherA1, free, empty1, empty2].sort(), 'aggregate A of another source is another aggregate');
    assert.ok(a2 && otherA2);
    const row = claimed.find((r) => r.id === a1)!;
    assert.equal(row.idempotencyKey, 'a1');
    assert.equal(row.aggregateId, 'A');
    assert.deepEqual(row.payload, { k: 'a1' });
    assert.equal((await t.row('inbox', a1!))!.state, 'processing');
  });

  define('inboxClaimPushMany skips pull rows, rows not yet due and aggregates with a processing row', async (t) => {
    await receiveRows(t, [
      { idempotencyKey: 'pull', consumption: 'pull' },
      { idempotencyKey: 'later', delayMs: 60_000 },
      { idempotencyKey: 'a1', aggregateId: 'A' },
    ]);
    const claimed = await t.driver.inboxClaimPushMany({ limit: 10, leaseMs: LEASE });
    assert.deepEqual(claimed.map((r) => r.idempotencyKey), ['a1']);
    const first = claimed[0];
    await t.setTime('inbox', first!.id, 'lease_expires_at', -1000);
    await receiveRows(t, [{ idempotencyKey: 'a2', aggregateId: 'A' }]);
    assert.deepEqual(await t.driver.inboxClaimPushMany({ limit: 10, leaseMs: LEASE }), [], 'an expired processing row holds its aggregate until reclaimed');
  });

  define('inboxClaimPushMany: a delayed row of one source holds only its own source\'s aggregate', async (t) => {
    const [held] = await receiveRows(t, [{ idempotencyKey: 'late', aggregateId: 'order-1', delayMs: 60_000 }]);
    const [mine] = await receiveRows(t, [{ idempotencyKey: 'next', aggregateId: 'order-1' }]);
    const [theirs1, theirs2] = await receiveRows(t, [
      { idempotencyKey: 'x1', aggregateId: 'order-1', source: 'other' },
      { idempotencyKey: 'x2', aggregateId: 'order-1', source: 'other' },
    ]);
    const first = await t.driver.inboxClaimPushMany({ limit: 10, leaseMs: LEASE });
    assert.deepEqual(first.map((r) => r.id), [theirs1], 'the other source moves; this source waits behind its delayed row');
    assert.equal(await t.driver.inboxForward({ id: theirs1!, token: first[0]!.claimToken, outbox: { topic: 'x', key: 'order-1', payload: {} } }, { maxAttempts: 5 }), true);
    assert.deepEqual((await t.driver.inboxClaimPushMany({ limit: 10, leaseMs: LEASE })).map((r) => r.id), [theirs2]);
    assert.ok(held && mine);
  });

  define('inboxClaimPushMany takes due retries before first attempts received earlier', async (t) => {
    const [a1] = await receiveRows(t, [{ idempotencyKey: 'a1', aggregateId: 'A' }, { idempotencyKey: 'a2', aggregateId: 'A' }]);
    const [row] = await t.driver.inboxClaimPushMany({ limit: 1, leaseMs: LEASE });
    assert.equal(row!.id, a1);
    assert.deepEqual(await t.driver.inboxRetryMany({ items: [{ id: a1!, token: row!.claimToken, delayMs: 0, error: 'outbox busy' }] }), [a1]);
    const [b1, b2] = await receiveRows(t, [{ idempotencyKey: 'b1' }, { idempotencyKey: 'b2' }]);
    for (const [id, ms] of [[b1!, -30_000], [b2!, -20_000]] as const) await t.setTime('inbox', id, 'scheduled_at', ms);
    const claimed = await t.driver.inboxClaimPushMany({ limit: 2, leaseMs: LEASE });
    assert.deepEqual(claimed.map((r) => r.id).sort(), [a1, b1].sort(), 'the due retry, then the earliest first attempt');
    assert.equal(claimed.find((r) => r.id === a1)!.attempt, 1);
  });

  define('inboxClaimPushMany by four relays at once: one row per aggregate', async (t) => {
    const messages = [];
    for (let n = 0; n < 3; n++) for (const aggregateId of ['a', 'b', 'c', 'd']) messages.push({ idempotencyKey: `${aggregateId}-${n}`, aggregateId });
    await receiveRows(t, messages);
    const relays = [t.newDriver(), t.newDriver(), t.newDriver(), t.newDriver()];
    const all = (await Promise.all(relays.map((d) => d.inboxClaimPushMany({ limit: 3, leaseMs: LEASE })))).flat();
    await Promise.all(relays.map((d) => d.close()));
    assert.equal(all.length, 4);
    assert.deepEqual(all.map((r) => r.idempotencyKey).sort(), ['a-0', 'b-0', 'c-0', 'd-0']);
  });

  defineFenceCases(define, {
    method: 'inboxRenewMany',
    table: 'inbox',
    claim: claimOne,
    write: async (t, c) => (await t.driver.inboxRenewMany({ claims: [c], leaseMs: 600_000 })).includes(c.id),
    check: (row, before) => assert.ok(row.lease_expires_at!.getTime() > before.lease_expires_at!.getTime() + 500_000),
  });
  defineFenceCases(define, {
    method: 'inboxForward',
    table: 'inbox',
    claim: claimOne,
    write: (t, c) => t.driver.inboxForward({ ...c, outbox: { topic: 'relayed', key: 'agg', payload: { x: 1 } } }, { maxAttempts: 5 }),
    check: (row) => {
      assert.equal(row.state, 'processed');
      assert.ok(row.processed_at instanceof Date);
    },
  });
  defineFenceCases(define, {
    method: 'inboxRetryMany',
    table: 'inbox',
    claim: claimOne,
    write: async (t, c) => (await t.driver.inboxRetryMany({ items: [{ ...c, delayMs: 30_000, error: 'boom' }] })).includes(c.id),
    check: (row, before) => {
      assert.equal(row.state, 'pending');
      assert.equal(row.attempt, before.attempt + 1);
      assert.equal(row.last_error, 'boom');
      assert.ok(row.scheduled_at.getTime() >= before.claimed_at!.getTime() + 29_000);
    },
  });
  defineFenceCases(define, {
    method: 'inboxMarkDeadMany',
    table: 'inbox',
    claim: claimOne,
    write: async (t, c) => (await t.driver.inboxMarkDeadMany({ items: [{ ...c, error: 'bad topic' }] })).includes(c.id),
    check: (row) => assert.equal(row.state, 'dead'),
  });

  define('inboxForward writes the outbox row with the processed mark; a lost claim leaves no outbox row', async (t) => {
    const claim = await claimOne(t);
    assert.equal(await t.driver.inboxForward({ ...claim, token: '00000000-0000-4000-8000-000000000000', outbox: { topic: 'lost', payload: {} } }, { maxAttempts: 5 }), false);
    assert.equal(await t.count('outbox'), 0, 'the outbox insert was rolled back');
    assert.equal(await t.driver.inboxForward({ ...claim, outbox: { id: '7f9619ff-8b86-4011-b42d-00c04fd430c8', topic: 'kept', key: 'agg', payload: { x: 1 } } }, { maxAttempts: 3 }), true);
    const outboxRow = (await t.row('outbox', '7f9619ff-8b86-4011-b42d-00c04fd430c8'))!;
    assert.equal(outboxRow.topic, 'kept');
    assert.equal(outboxRow.max_attempts, 3);
    assert.equal(await t.count('outbox'), 1);
  });

  define('inboxForwardMany forwards the batch in order, skipping items whose claim was lost (no outbox row for them)', async (t) => {
    const forwardMany = t.driver.inboxForwardMany;
    if (t.driver.dialect === 'sqlserver') {
      assert.equal(forwardMany, undefined, 'SQL Server has no batched forward: its relay forwards row by row');
      return;
    }
    assert.ok(forwardMany, 'PostgreSQL forwards a batch in one statement');
    await receiveRows(t, [{ idempotencyKey: 'm-1' }, { idempotencyKey: 'm-2' }, { idempotencyKey: 'm-3' }]);
    const rows = await t.driver.inboxClaimPushMany({ limit: 3, leaseMs: LEASE });
    assert.equal(rows.length, 3);
    const outboxIds = ['0b1f0000-0000-4000-8000-000000000001', '0b1f0000-0000-4000-8000-000000000002', '0b1f0000-0000-4000-8000-000000000003'];
    const items = rows.map((r, i) => ({ id: r.id, token: r.claimToken, outbox: { id: outboxIds[i], topic: `t.${i}`, key: i === 0 ? 'agg' : null, payload: { i }, headers: { 'x-n': String(i) } } }));
    items[1]!.token = '00000000-0000-4000-8000-000000000000'; // a claim lost to another owner
    const forwarded = await forwardMany(items, { maxAttempts: 4 });
    assert.deepEqual(forwarded, [rows[0]!.id, rows[2]!.id]);
    assert.equal((await t.row('inbox', rows[0]!.id))!.state, 'processed');
    assert.equal((await t.row('inbox', rows[1]!.id))!.state, 'processing', 'the lost item is left to its owner');
    assert.equal((await t.row('inbox', rows[2]!.id))!.state, 'processed');
    assert.equal(await t.count('outbox'), 2);
    assert.equal(await t.row('outbox', outboxIds[1]!), undefined);
    const first = (await t.row('outbox', outboxIds[0]!))!;
    const third = (await t.row('outbox', outboxIds[2]!))!;
    assert.deepEqual([first.topic, first.key, first.payload, first.headers, first.max_attempts, first.state], ['t.0', 'agg', { i: 0 }, { 'x-n': '0' }, 4, 'pending']);
    assert.ok(BigInt(String(first.sequence)) < BigInt(String(third.sequence)), 'outbox rows in the items\' order');
    assert.deepEqual(await forwardMany([], { maxAttempts: 4 }), []);
  });

  define('inboxReclaimExpired returns expired push rows to pending, leaves pull rows, and is throttled', async (t) => {
    await receiveRows(t, [{ idempotencyKey: 'push' }, { idempotencyKey: 'pull', consumption: 'pull', source: 'p' }]);
    const [push] = await t.driver.inboxClaimPushMany({ limit: 1, leaseMs: LEASE });
    const [pull] = await t.driver.pullClaimMany({ source: 'p', limit: 1, leaseMs: LEASE });
    await t.setTime('inbox', push!.id, 'lease_expires_at', -1000);
    await t.setTime('inbox', pull!.id, 'lease_expires_at', -1000);
    assert.deepEqual(await t.driver.inboxReclaimExpired({ throttleMs: 60_000, maxAttempts: 5 }), { ran: true, reclaimed: 1, dead: 0 });
    assert.equal((await t.row('inbox', push!.id))!.state, 'pending');
    assert.equal((await t.row('inbox', push!.id))!.attempt, 1, 'the lost lease is a failed attempt');
    assert.equal((await t.row('inbox', push!.id))!.last_error, 'lease expired during forward attempt 1 of 5 (the call did not finish within its lease)');
    assert.equal((await t.row('inbox', pull!.id))!.state, 'processing');
    assert.deepEqual(await t.driver.inboxReclaimExpired({ throttleMs: 60_000, maxAttempts: 5 }), { ran: false, reclaimed: 0, dead: 0 });
    assert.equal((await t.driver.inboxReclaimExpired({ maxAttempts: 5 })).ran, true);
  });

  define('inboxStats counts rows per state and the oldest due pending row', async (t) => {
    await finishedRow(t, 'done', 'processed');
    const [old] = await receiveRows(t, [{ idempotencyKey: 'old' }, { idempotencyKey: 'pull', consumption: 'pull' }]);
    await t.setTime('inbox', old!, 'scheduled_at', -20_000);
    const stats = await t.driver.inboxStats();
    assert.deepEqual(stats.counts, { pending: 2, processing: 0, processed: 1, dead: 0 });
    assert.ok(stats.oldestPendingAgeSeconds >= 19 && stats.oldestPendingAgeSeconds < 60, `age ${stats.oldestPendingAgeSeconds}`);
    const backlog = await t.driver.inboxStats({ pendingOnly: true });
    assert.deepEqual(backlog.counts, { pending: 1 }, 'pendingOnly counts pending push rows only (the relay backlog)');
    assert.ok(Math.abs(backlog.oldestPendingAgeSeconds - stats.oldestPendingAgeSeconds) < 5, `age ${backlog.oldestPendingAgeSeconds}`);
  });

  define('stats onceEveryMs: of readers asking at once one counts, the others are told it was read; a table each; a read without it always counts', async (t) => {
    await receiveRows(t, [{ idempotencyKey: 'a' }, { idempotencyKey: 'b' }]);
    const everyMs = 1_500;
    const asked = await Promise.all(Array.from({ length: 4 }, () => t.driver.inboxStats({ pendingOnly: true, onceEveryMs: everyMs })));
    const counted = asked.filter((s) => s.skipped !== true);
    assert.equal(counted.length, 1, 'one of four concurrent readers counts');
    assert.deepEqual(counted[0]!.counts, { pending: 2 });
    for (const s of asked.filter((x) => x.skipped === true)) assert.deepEqual(s.counts, {}, 'a skipped read counts nothing');
    assert.equal((await t.driver.inboxStats({ pendingOnly: true, onceEveryMs: everyMs })).skipped, true, 'within the interval: skipped');
    assert.deepEqual((await t.driver.inboxStats({ pendingOnly: true })).counts, { pending: 2 }, 'a read without onceEveryMs is not gated');
    assert.notEqual((await t.driver.outboxStats({ pendingOnly: true, onceEveryMs: everyMs })).skipped, true, 'the outbox has its own gate');
    await new Promise((resolve) => setTimeout(resolve, everyMs + 300));
    const again = await t.driver.inboxStats({ pendingOnly: true, onceEveryMs: everyMs });
    assert.notEqual(again.skipped, true, 'after the interval the next reader counts');
    assert.deepEqual(again.counts, { pending: 2 });
  });

  define('stats onceEveryMs: a count that fails after its gate opened gives the turn back, so the next reader counts at once', async (t) => {
    await receiveRows(t, [{ idempotencyKey: 'a' }]);
    await enqueueRows(t, [{ topic: 'orders', payload: {} }]);
    const everyMs = 1_000;
    const other = t.newDriver();
    try {
      for (const table of ['outbox', 'inbox'] as const) {
        const stats = (driver: Driver) => (table === 'outbox' ? driver.outboxStats({ pendingOnly: true, onceEveryMs: everyMs }) : driver.inboxStats({ pendingOnly: true, onceEveryMs: everyMs }));
        // First on a gate row the turn creates, then on the row of an earlier turn, over.
        for (const gate of ['new', 'earlier'] as const) {
          if (gate === 'earlier') await new Promise((resolve) => setTimeout(resolve, everyMs + 200));
          // The count waits on a lock past a statement timeout of its own (a fixed budget: the
          // invocation still has time, so the turn can be given back; a count that used up the
          // invocation's time leaves its turn taken). The gate row, in another table, opens first.
          const unlock = await t.lockTable(table);
          let failed: unknown;
          try {
            await withStatementBudget(() => 300, () => stats(t.driver));
          } catch (error) {
            failed = error;
          } finally {
            await unlock();
          }
          assert.ok(failed instanceof Error, `${table}, ${gate} gate row: the count under the lock fails (${String(failed)})`);
          const next = await stats(other);
          assert.notEqual(next.skipped, true, `${table}, ${gate} gate row: the next reader, on another driver, counts at once`);
          assert.deepEqual(next.counts, { pending: 1 });
          assert.equal((await stats(t.driver)).skipped, true, `${table}, ${gate} gate row: the turn that counted holds the gate`);
        }
      }
    } finally {
      await other.close();
    }
  });

  define('inboxStats pendingOnly: an old pull row does not make a push backlog due later look due (age 0)', async (t) => {
    const [pull, push] = await receiveRows(t, [{ idempotencyKey: 'pull', consumption: 'pull' }, { idempotencyKey: 'push' }]);
    await t.setTime('inbox', pull!, 'scheduled_at', -20_000);
    await t.setTime('inbox', push!, 'scheduled_at', 60_000);
    const backlog = await t.driver.inboxStats({ pendingOnly: true });
    assert.deepEqual(backlog.counts, { pending: 1 });
    assert.equal(backlog.oldestPendingAgeSeconds, 0, 'the push row is not due, the pull row is not the relay backlog');
    // Status's read ages every due pending row it counts, pull rows too: the pull row's ~20 s.
    const stats = await t.driver.inboxStats();
    assert.ok(stats.oldestPendingAgeSeconds >= 15 && stats.oldestPendingAgeSeconds < 60, `the pull row's age, got ${stats.oldestPendingAgeSeconds}`);
  });

  define('inboxDeadList lists dead rows newest first with source and last error', async (t) => {
    await finishedRow(t, 'first', 'dead');
    const second = await finishedRow(t, 'second', 'dead');
    const [row] = await t.driver.inboxDeadList({ limit: 1 });
    assert.deepEqual([row!.id, row!.topicOrSource, row!.lastError], [second, 'source-second', 'failed second']);
    assert.equal((await t.driver.inboxDeadList({ limit: 10 })).length, 2);
  });

  define('inboxDeleteFinished deletes old processed or dead rows, at most limit, never pending', async (t) => {
    const old1 = await finishedRow(t, 'a', 'processed');
    const old2 = await finishedRow(t, 'b', 'processed');
    const fresh = await finishedRow(t, 'c', 'processed');
    const [pending] = await receiveRows(t, [{ idempotencyKey: 'p' }]);
    for (const id of [old1, old2, pending!]) await t.setTime('inbox', id, 'created_at', -7_200_000);
    assert.equal(await t.driver.inboxDeleteFinished({ state: 'processed', olderThanMs: 3_600_000, limit: 1 }), 1);
    assert.equal(await t.driver.inboxDeleteFinished({ state: 'processed', olderThanMs: 3_600_000, limit: 10 }), 1);
    assert.equal(await t.count('inbox', 'processed'), 1);
    assert.ok(await t.row('inbox', fresh));
    assert.ok(await t.row('inbox', pending!));
    await assert.rejects(t.driver.inboxDeleteFinished({ state: 'sent', olderThanMs: 0, limit: 10 }), UsageError);
  });
  define('inboxDeleteFinished keeps the rows of the keep sources until they are older than the keep age (a replay horizon)', async (t) => {
    const kept = await finishedRow(t, 'k', 'dead');
    const other = await finishedRow(t, 'o', 'dead');
    const ancient = await finishedRow(t, 'a', 'dead');
    for (const id of [kept, other]) await t.setTime('inbox', id, 'created_at', -7_200_000);
    await t.setTime('inbox', ancient, 'created_at', -4 * 3_600_000);
    const keep = { sources: ['source-k', 'source-a'], olderThanMs: 3 * 3_600_000 };
    assert.equal(await t.driver.inboxDeleteFinished({ state: 'dead', olderThanMs: 3_600_000, limit: 10, keep }), 2);
    assert.ok(await t.row('inbox', kept), 'a kept source younger than the keep age stays');
    assert.equal(await t.row('inbox', other), undefined);
    assert.equal(await t.row('inbox', ancient), undefined, 'a kept source older than the keep age goes');
  });
}
