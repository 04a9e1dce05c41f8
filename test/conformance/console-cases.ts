/**
 * Conformance cases of the operator console's reads (`outboxStatsByState`, `outboxBlockedKeys`,
 * `outboxDeadSearch`, `outboxRowGet`, `outboxClaimsInFlight` and the inbox equivalents).
 */
import assert from 'node:assert/strict';
import { parseStoredTraceContext } from '../../lib/observability/trace-context.ts';
import { enqueueRows, receiveRows, type ConformanceTarget, type DefineCase } from './driver-conformance.ts';

const LEASE = 60_000;
const BLOCKED = { limit: 50, scanLimit: 500, poisonAttempts: 3, waitingCap: 1000 };

async function claimOutbox(t: ConformanceTarget) {
  return t.driver.outboxClaimMany({ limit: 10, leaseMs: LEASE });
}

/** Claims and fails one outbox row `times` times; the last retry is due after `lastDelayMs`. */
async function failOutbox(t: ConformanceTarget, id: string, times: number, lastDelayMs: number): Promise<void> {
  for (let i = 0; i < times; i++) {
    const claimed = (await claimOutbox(t)).filter((r) => r.id === id);
    assert.equal(claimed.length, 1, `row ${id} claimed for failure ${i + 1}`);
    const delayMs = i === times - 1 ? lastDelayMs : 0;
    assert.deepEqual(await t.driver.outboxRetryMany({ items: [{ id, token: claimed[0]!.claimToken, delayMs, error: `boom ${i + 1}` }] }), [id]);
  }
}

export function defineConsoleCases(define: DefineCase): void {
  define('outboxStatsByState counts each state up to the cap, the oldest due pending age and the last hour', async (t) => {
    await enqueueRows(t, [1, 2, 3].map((n) => ({ topic: 't', payload: { n } })));
    const [claimed] = await t.driver.outboxClaimMany({ limit: 1, leaseMs: LEASE });
    await t.driver.outboxMarkSentMany({ claims: [{ id: claimed!.id, token: claimed!.claimToken }] });
    const [dying] = await t.driver.outboxClaimMany({ limit: 1, leaseMs: LEASE });
    await t.driver.outboxMarkDeadMany({ items: [{ id: dying!.id, token: dying!.claimToken, error: 'x' }] });
    const [pendingId] = await enqueueRows(t, [{ topic: 't', payload: {} }]);
    await t.setTime('outbox', pendingId!, 'scheduled_at', -90_000);
    await enqueueRows(t, [{ topic: 'later', payload: {}, delayMs: 600_000 }]);
    const stats = await t.driver.outboxStatsByState({ countCap: 100 });
    assert.deepEqual(stats.counts, { pending: 3, processing: 0, sent: 1, dead: 1 });
    assert.ok(stats.oldestPendingAgeSeconds >= 89 && stats.oldestPendingAgeSeconds < 120, `oldest ${stats.oldestPendingAgeSeconds}`);
    assert.deepEqual(stats.finishedLastHour, { sent: 1, dead: 1 });
    assert.deepEqual(stats.finishedLastMinute, { sent: 1, dead: 1 });
    const capped = await t.driver.outboxStatsByState({ countCap: 2 });
    assert.equal(capped.counts.pending, 2, 'counts stop at the cap');
    assert.equal(capped.countCap, 2);
  });

  define('inboxStatsByState counts push and pull rows per state', async (t) => {
    await receiveRows(t, [{ idempotencyKey: 'a' }, { idempotencyKey: 'b' }, { idempotencyKey: 'c', consumption: 'pull', source: 'p' }]);
    const [row] = await t.driver.inboxClaimPushMany({ limit: 1, leaseMs: LEASE });
    await t.driver.inboxMarkDeadMany({ items: [{ id: row!.id, token: row!.claimToken, error: 'bad' }] });
    const stats = await t.driver.inboxStatsByState({ countCap: 100 });
    assert.deepEqual(stats.counts, { pending: 2, processing: 0, processed: 0, dead: 1 });
    assert.deepEqual(stats.finishedLastHour, { processed: 0, dead: 1 });
  });

  define('inboxStatsByState ages the oldest due pending row, push or pull, of any source', async (t) => {
    const ageOf = async () => (await t.driver.inboxStatsByState({ countCap: 100 })).oldestPendingAgeSeconds;
    const [push] = await receiveRows(t, [{ idempotencyKey: 'push' }]);
    await t.setTime('inbox', push!, 'scheduled_at', -30_000);
    const pushAge = await ageOf();
    assert.ok(pushAge >= 29 && pushAge < 60, `push only: ${pushAge}`);
    // Pull rows of two sources: the second source's first row waited longest; its second is not due.
    const [, waiting, later] = await receiveRows(t, [
      { idempotencyKey: 'pa', consumption: 'pull', source: 'alpha' },
      { idempotencyKey: 'pb', consumption: 'pull', source: 'beta' },
      { idempotencyKey: 'pc', consumption: 'pull', source: 'beta' },
    ]);
    await t.setTime('inbox', waiting!, 'scheduled_at', -90_000);
    await t.setTime('inbox', later!, 'scheduled_at', 600_000);
    const pullAge = await ageOf();
    assert.ok(pullAge >= 89 && pullAge < 120, `a pull row waited longest: ${pullAge}`);
    // In a handler, the row is no longer pending: the age is the push row's again.
    const [claimed] = await t.driver.pullClaimMany({ source: 'beta', limit: 1, leaseMs: LEASE });
    assert.equal(claimed?.id, waiting);
    const afterClaim = await ageOf();
    assert.ok(afterClaim >= 29 && afterClaim < 60, `the pull row claimed: ${afterClaim}`);
  });

  define('outboxClaimsInFlight lists processing rows by lease expiry with the lease left on the database clock', async (t) => {
    await enqueueRows(t, [{ topic: 'a', key: 'k1', payload: {} }, { topic: 'b', key: 'k2', payload: {} }]);
    const rows = await claimOutbox(t);
    await t.setTime('outbox', rows[1]!.id, 'lease_expires_at', -5_000);
    const claims = await t.driver.outboxClaimsInFlight({ limit: 10 });
    assert.deepEqual(claims.map((c) => c.id), [rows[1]!.id, rows[0]!.id]);
    assert.ok(claims[0]!.leaseLeftMs < -4_000 && claims[0]!.leaseLeftMs > -10_000, `expired ${claims[0]!.leaseLeftMs}`);
    assert.ok(claims[1]!.leaseLeftMs > 50_000 && claims[1]!.leaseLeftMs <= LEASE, `live ${claims[1]!.leaseLeftMs}`);
    assert.equal(claims[1]!.label, rows[0]!.topic);
    assert.equal((await t.driver.outboxClaimsInFlight({ limit: 1 })).length, 1);
  });

  define('outboxBlockedKeys finds heads with an expired lease, a poison row, a retry backing off and a future schedule, with the rows behind', async (t) => {
    const [a1] = await enqueueRows(t, [1, 2, 3].map((n) => ({ topic: 'a', key: 'A', payload: { n } })));
    const [claimedA] = await claimOutbox(t);
    assert.equal(claimedA!.id, a1);
    await t.setTime('outbox', a1!, 'lease_expires_at', -1_000);
    const [c1] = await enqueueRows(t, [1, 2].map((n) => ({ topic: 'c', key: 'C', payload: { n } })));
    await failOutbox(t, c1!, 1, 60_000);
    const [b1] = await enqueueRows(t, [1, 2].map((n) => ({ topic: 'b', key: 'B', payload: { n } })));
    await failOutbox(t, b1!, 4, 0);
    const [d1] = await enqueueRows(t, [
      { topic: 'd', key: 'D', payload: {}, delayMs: 60_000 },
      { topic: 'd', key: 'D', payload: {} },
      { topic: 'e', key: 'E', payload: {} },
      { topic: 'e', key: 'E', payload: {} },
      { topic: 'f', key: 'F', payload: {}, delayMs: 60_000 },
      { topic: 'free', payload: {}, delayMs: 60_000 },
    ]);
    const heads = await t.driver.outboxBlockedKeys(BLOCKED);
    const byKey = new Map(heads.map((h) => [h.key, h]));
    assert.deepEqual([...byKey.keys()].sort(), ['A', 'B', 'C', 'D'], 'E is due and moving, F has nothing behind it');
    assert.deepEqual({ id: byKey.get('A')!.id, state: byKey.get('A')!.state, waiting: byKey.get('A')!.waitingBehind }, { id: a1, state: 'processing', waiting: 2 });
    assert.ok(byKey.get('A')!.leaseLeftMs < 0);
    const b = byKey.get('B')!;
    assert.deepEqual({ id: b.id, attempt: b.attempt, maxAttempts: b.maxAttempts, lastError: b.lastError, waiting: b.waitingBehind }, { id: b1, attempt: 4, maxAttempts: 5, lastError: 'boom 4', waiting: 1 });
    const c = byKey.get('C')!;
    assert.equal(c.id, c1);
    assert.equal(c.attempt, 1);
    assert.ok(c.dueInMs > 50_000, `retry due in ${c.dueInMs}`);
    assert.deepEqual({ id: byKey.get('D')!.id, attempt: byKey.get('D')!.attempt }, { id: d1, attempt: 0 });
    assert.equal(heads[0]!.key, 'A', 'most rows waiting first');
    assert.equal((await t.driver.outboxBlockedKeys({ ...BLOCKED, limit: 2 })).length, 2);
  });

  define('inboxBlockedAggregates finds a push head with an expired lease and a pull head backing off', async (t) => {
    const [p1] = await receiveRows(t, [
      { idempotencyKey: 'p1', aggregateId: 'agg' },
      { idempotencyKey: 'p2', aggregateId: 'agg' },
      { idempotencyKey: 'p3', aggregateId: 'agg' },
    ]);
    const [claimed] = await t.driver.inboxClaimPushMany({ limit: 10, leaseMs: LEASE });
    assert.equal(claimed!.id, p1);
    await t.setTime('inbox', p1!, 'lease_expires_at', -1_000);
    const [q1] = await receiveRows(t, [
      { idempotencyKey: 'q1', aggregateId: 'agg', source: 'partner', consumption: 'pull' },
      { idempotencyKey: 'q2', aggregateId: 'agg', source: 'partner', consumption: 'pull' },
    ]);
    const [pulled] = await t.driver.pullClaimMany({ source: 'partner', limit: 1, leaseMs: LEASE });
    assert.equal(pulled!.id, q1);
    assert.equal(await t.driver.pullRetry({ id: q1!, token: pulled!.claimToken, delayMs: 60_000, error: 'later' }), true);
    const heads = await t.driver.inboxBlockedAggregates(BLOCKED);
    assert.deepEqual(
      heads.map((h) => ({ id: h.id, label: h.label, key: h.key, state: h.state, waiting: h.waitingBehind, maxAttempts: h.maxAttempts })),
      [
        { id: p1, label: 'src', key: 'agg', state: 'processing', waiting: 2, maxAttempts: null },
        { id: q1, label: 'partner', key: 'agg', state: 'pending', waiting: 1, maxAttempts: null },
      ],
    );
    assert.equal(heads[1]!.lastError, 'later');
  });

  define('outboxDeadSearch pages dead rows newest first, filters by topic and time, and stops at the scan limit', async (t) => {
    const dead: string[] = [];
    for (const topic of ['x', 'y', 'x']) {
      await enqueueRows(t, [{ topic, payload: { topic } }]);
      const [row] = await claimOutbox(t);
      await t.driver.outboxMarkDeadMany({ items: [{ id: row!.id, token: row!.claimToken, error: `died: ${topic}` }] });
      dead.push(row!.id);
    }
    await t.setTime('outbox', dead[0]!, 'updated_at', -3_000);
    await t.setTime('outbox', dead[1]!, 'updated_at', -2_000);
    await t.setTime('outbox', dead[2]!, 'updated_at', -1_000);
    const all = await t.driver.outboxDeadSearch({ limit: 10, scanLimit: 100 });
    assert.deepEqual(all.rows.map((r) => r.id), [dead[2], dead[1], dead[0]]);
    assert.deepEqual(all.rows[0]!.payload, { topic: 'x' });
    assert.equal(all.rows[0]!.lastError, 'died: x');
    assert.deepEqual({ more: all.more, scanCapped: all.scanCapped }, { more: false, scanCapped: false });
    const x = await t.driver.outboxDeadSearch({ label: 'x', limit: 1, scanLimit: 100 });
    assert.deepEqual({ ids: x.rows.map((r) => r.id), more: x.more }, { ids: [dead[2]], more: true });
    assert.equal(all.next, undefined, 'no cursor when nothing more matches');
    assert.match(x.next!.at, /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6,7}Z$/, 'the stored time, sub-millisecond digits kept');
    assert.equal(x.next!.id, dead[2]);
    const after = await t.driver.outboxDeadSearch({ label: 'x', before: x.next!, limit: 1, scanLimit: 100 });
    assert.deepEqual({ ids: after.rows.map((r) => r.id), more: after.more, next: after.next }, { ids: [dead[0]], more: false, next: undefined });
    const older = await t.driver.outboxDeadSearch({ label: 'x', to: all.rows[0]!.updatedAt, limit: 10, scanLimit: 100 });
    assert.deepEqual(older.rows.map((r) => r.id), [dead[0]]);
    const from = await t.driver.outboxDeadSearch({ from: all.rows[1]!.updatedAt, limit: 10, scanLimit: 100 });
    assert.deepEqual(from.rows.map((r) => r.id), [dead[2], dead[1]]);
    const capped = await t.driver.outboxDeadSearch({ label: 'y', limit: 10, scanLimit: 1 });
    assert.deepEqual({ rows: capped.rows.length, scanCapped: capped.scanCapped }, { rows: 0, scanCapped: true });
  });

  define('inboxDeadSearch filters dead rows by source', async (t) => {
    await t.driver.inboxInsert({ source: 's1', idempotencyKey: 'k1', payload: { a: 1 }, consumption: 'push', deadReason: 'unreadable' });
    await t.driver.inboxInsert({ source: 's2', idempotencyKey: 'k2', payload: { a: 2 }, consumption: 'push', deadReason: 'bad' });
    const page = await t.driver.inboxDeadSearch({ label: 's2', limit: 10, scanLimit: 100 });
    assert.deepEqual(page.rows.map((r) => [r.label, r.lastError, r.details['idempotency key']]), [['s2', 'bad', 'k2']]);
  });

  define('outboxDeadGroups and inboxDeadGroups count the newest dead rows per topic or source and consumption and error start, largest first', async (t) => {
    const die = async (topic: string, error: string) => {
      await enqueueRows(t, [{ topic, payload: {} }]);
      const [row] = await claimOutbox(t);
      await t.driver.outboxMarkDeadMany({ items: [{ id: row!.id, token: row!.claimToken, error }] });
    };
    for (let i = 0; i < 3; i++) await die('order.paid', `HTTP 503 from orders (request ${i})`);
    await die('order.paid', 'HTTP 400 bad payload');
    await die('user.created', 'HTTP 503 from orders (request 9)');
    const groups = await t.driver.outboxDeadGroups({ scanLimit: 100, limit: 10, errorChars: 16 });
    assert.deepEqual(
      groups.groups.map((g) => [g.label, g.consumption, g.error, g.count]),
      [
        ['order.paid', null, 'HTTP 503 from or', 3],
        ['user.created', null, 'HTTP 503 from or', 1],
        ['order.paid', null, 'HTTP 400 bad pay', 1],
      ],
      'largest first; of equal counts the one with the newest row first',
    );
    assert.equal(groups.groups.length, 3);
    assert.deepEqual([groups.scanned, groups.scanCapped], [5, false]);
    assert.ok(groups.groups.every((g) => g.latest instanceof Date));
    const capped = await t.driver.outboxDeadGroups({ scanLimit: 2, limit: 1, errorChars: 16 });
    assert.deepEqual([capped.groups.length, capped.scanned, capped.scanCapped], [1, 2, true]);
    await t.driver.inboxInsert({ source: 's1', idempotencyKey: 'k1', payload: {}, consumption: 'push', deadReason: 'unreadable body' });
    await t.driver.inboxInsert({ source: 's1', idempotencyKey: 'k2', payload: {}, consumption: 'pull', deadReason: 'unreadable body' });
    await t.driver.inboxInsert({ source: 's1', idempotencyKey: 'k3', payload: {}, consumption: 'pull', deadReason: 'unreadable body, again' });
    const inbox = await t.driver.inboxDeadGroups({ scanLimit: 100, limit: 10, errorChars: 10 });
    assert.deepEqual(inbox.groups.map((g) => [g.label, g.consumption, g.error, g.count]), [['s1', 'pull', 'unreadable', 2], ['s1', 'push', 'unreadable', 1]]);
    await assert.rejects(t.driver.outboxDeadGroups({ scanLimit: 100, limit: 10, errorChars: 5000 }));
  });

  define('outboxRowGet and inboxRowGet read one row with every column; absent or malformed ids read nothing', async (t) => {
    const trace = { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', tracestate: 'congo=t61rcWkgMzE' };
    const [id] = await enqueueRows(t, [{ topic: 'order.paid', key: 'o-1', payload: { orderId: 'o-1' }, headers: { h: 'v' }, trace }]);
    const row = (await t.driver.outboxRowGet({ id: id! }))!;
    assert.deepEqual(
      { id: row.id, label: row.label, key: row.key, state: row.state, attempt: row.attempt, maxAttempts: row.maxAttempts, payload: row.payload, headers: row.headers, replayCount: row.replayCount },
      { id, label: 'order.paid', key: 'o-1', state: 'pending', attempt: 0, maxAttempts: 5, payload: { orderId: 'o-1' }, headers: { h: 'v' }, replayCount: 0 },
    );
    assert.ok(row.createdAt instanceof Date && row.scheduledAt instanceof Date);
    assert.deepEqual(parseStoredTraceContext(row.traceContext), trace, 'the stored trace context, as the column holds it');
    assert.equal(await t.driver.outboxRowGet({ id: '00000000-0000-4000-8000-000000000000' }), undefined);
    assert.equal(await t.driver.outboxRowGet({ id: "1' OR '1'='1" }), undefined);
    const [inboxId] = await receiveRows(t, [{ idempotencyKey: 'idem-1', aggregateId: 'agg', eventType: 'paid' }]);
    const inboxRow = (await t.driver.inboxRowGet({ id: inboxId! }))!;
    assert.deepEqual([inboxRow.label, inboxRow.key, inboxRow.details['idempotency key'], inboxRow.details['event type']], ['src', 'agg', 'idem-1', 'paid']);
    assert.equal(inboxRow.traceContext, null, 'received without a trace header');
    const [tracedInbox] = await receiveRows(t, [{ idempotencyKey: 'idem-2', trace: { awsTraceHeader: 'Root=1-5759e988-bd862e3fe1be46a994272793' } }]);
    assert.deepEqual(parseStoredTraceContext((await t.driver.inboxRowGet({ id: tracedInbox! }))!.traceContext), { awsTraceHeader: 'Root=1-5759e988-bd862e3fe1be46a994272793' });
    assert.equal(await t.driver.inboxRowGet({ id: 'nope' }), undefined);
  });
}
