/**
 * Conformance cases of the inbox requeue (`inboxReplay`, `inboxReplayPreview`): dead push and pull
 * rows back to `pending`, filtered like the outbox replay, bounded, checked as read, and in order:
 * a requeued row is its aggregate's head again.
 */
import assert from 'node:assert/strict';
import { ReplayLimitError, UsageError } from '../../lib/errors.ts';
import { receiveRows, type ConformanceTarget, type DefineCase } from './driver-conformance.ts';

const LEASE = 60_000;

/** Receives rows of `source` and lets each of them die through its consumption's own claim and dead write. */
async function deadRows(t: ConformanceTarget, source: string, consumption: 'push' | 'pull', rows: Array<{ key: string; aggregateId?: string }>): Promise<string[]> {
  const ids = await receiveRows(t, rows.map((r) => ({ source, idempotencyKey: r.key, consumption, ...(r.aggregateId ? { aggregateId: r.aggregateId } : {}) })));
  for (const id of ids) {
    const claimed = consumption === 'push' ? await t.driver.inboxClaimPushMany({ limit: 10, leaseMs: LEASE }) : await t.driver.pullClaimMany({ source, limit: 10, leaseMs: LEASE });
    const row = claimed.find((r) => r.id === id);
    assert.ok(row, `row ${id} is claimable`);
    for (const other of claimed.filter((r) => r.id !== id)) {
      if (consumption === 'push') await t.driver.inboxRetryMany({ items: [{ id: other.id, token: other.claimToken, delayMs: 0, error: 'not now' }] });
      else await t.driver.pullRelease({ id: other.id, token: other.claimToken });
    }
    const error = `HTTP 503 from ${source} ${row.idempotencyKey}`;
    if (consumption === 'push') assert.deepEqual(await t.driver.inboxMarkDeadMany({ items: [{ id, token: row.claimToken, error }] }), [id]);
    else assert.equal(await t.driver.pullMarkDead({ id, token: row.claimToken, error }), true);
  }
  return ids;
}

export function defineInboxReplayCases(define: DefineCase): void {
  define('inboxReplay moves dead push and pull rows to pending, resetting attempt, schedule, error and claim, keeping sequence', async (t) => {
    const [push] = await deadRows(t, 'stripe', 'push', [{ key: 'p1' }]);
    const [pull] = await deadRows(t, 'billing', 'pull', [{ key: 'q1' }]);
    const before = (await t.row('inbox', push!))!;
    assert.equal(await t.driver.inboxReplay({ ids: [push!, pull!] }), 2);
    for (const id of [push!, pull!]) {
      const row = (await t.row('inbox', id))!;
      assert.deepEqual([row.state, row.attempt, row.last_error, row.claim_token, row.lease_expires_at, row.processed_at ?? null], ['pending', 0, null, null, null, null]);
    }
    assert.equal(String((await t.row('inbox', push!))!.sequence), String(before.sequence), 'sequence kept');
    assert.equal(await t.driver.inboxReplay({ ids: [push!, pull!] }), 0, 'requeued rows left the filter');
    assert.deepEqual((await t.driver.inboxClaimPushMany({ limit: 10, leaseMs: LEASE })).map((r) => r.id), [push], 'the relay claims the requeued push row');
    assert.deepEqual((await t.driver.pullClaimMany({ source: 'billing', limit: 10, leaseMs: LEASE })).map((r) => r.id), [pull], 'a pull claim takes the requeued pull row');
  });

  define('inboxReplay moves dead rows only, and filters by sources, consumption, created range and last error', async (t) => {
    const [a] = await deadRows(t, 'stripe', 'push', [{ key: 'a' }]);
    const [b] = await deadRows(t, 'github', 'push', [{ key: 'b' }]);
    const [c] = await deadRows(t, 'stripe', 'pull', [{ key: 'c' }]);
    const [pending] = await receiveRows(t, [{ source: 'stripe', idempotencyKey: 'still-pending' }]);
    assert.equal(await t.driver.inboxReplay({ ids: [pending!] }), 0, 'a pending row is not dead');
    assert.equal(await t.driver.inboxReplay({ sources: ['stripe'], consumption: 'pull' }), 1);
    assert.equal((await t.row('inbox', c!))!.state, 'pending');
    assert.equal(await t.driver.inboxReplay({ lastErrorPrefix: 'HTTP 503 from github' }), 1);
    assert.equal((await t.row('inbox', b!))!.state, 'pending');
    assert.equal(await t.driver.inboxReplay({ lastErrorPrefix: 'http 503' }), 0, 'the prefix is case-exact');
    assert.equal(await t.driver.inboxReplay({ lastErrorPrefix: 'HTTP 503 from stripe a ' }), 0, 'a prefix longer than the error matches nothing');
    assert.equal(await t.driver.inboxReplay({ createdTo: new Date(Date.now() - 60_000) }), 0);
    await t.setTime('inbox', a!, 'created_at', -3_600_000);
    assert.equal(await t.driver.inboxReplay({ createdTo: new Date(Date.now() - 60_000), consumption: 'push' }), 1);
    assert.equal((await t.row('inbox', a!))!.state, 'pending');
    await assert.rejects(t.driver.inboxReplay({}), UsageError, 'an empty filter is refused');
    await assert.rejects(t.driver.inboxReplay({ consumption: 'push' }), UsageError, 'consumption alone is no filter');
    await assert.rejects(t.driver.inboxReplay({ lastErrorPrefix: '' }), UsageError);
  });

  define('inboxReplayPreview counts exactly what inboxReplay would move, samples the oldest, and changes nothing', async (t) => {
    const [first, second] = await deadRows(t, 'stripe', 'push', [{ key: 'one', aggregateId: 'cus-1' }, { key: 'two' }]);
    await deadRows(t, 'other', 'push', [{ key: 'three' }]);
    await t.setTime('inbox', first!, 'created_at', -60_000);
    const filter = { sources: ['stripe'] };
    const preview = await t.driver.inboxReplayPreview({ filter, limit: 1 });
    assert.equal(preview.count, 2);
    const [row] = preview.sample;
    assert.deepEqual([row!.id, row!.source, row!.aggregateId, row!.consumption, row!.state, row!.lastError], [first, 'stripe', 'cus-1', 'push', 'dead', 'HTTP 503 from stripe one']);
    assert.ok(row!.createdAt instanceof Date && row!.updatedAt instanceof Date);
    assert.equal((await t.row('inbox', first!))!.state, 'dead', 'a preview moves nothing');
    assert.deepEqual(await t.driver.inboxReplayPreview({ filter: { sources: ['nothing'] }, limit: 5 }), { count: 0, sample: [] });
    assert.equal((await t.driver.inboxReplayPreview({ filter, limit: 0 })).sample.length, 0);
    assert.equal(await t.driver.inboxReplay(filter), preview.count);
    assert.equal((await t.row('inbox', second!))!.state, 'pending');
  });

  define('inboxReplay with asRead moves a row only while it is as read, and with maxRows none when more match', async (t) => {
    const [a, b, c] = await deadRows(t, 'stripe', 'pull', [{ key: 'a' }, { key: 'b' }, { key: 'c' }]);
    const { sample } = await t.driver.inboxReplayPreview({ filter: { ids: [a!, b!] }, limit: 10 });
    const asRead = sample.map((r) => ({ id: r.id, updatedAtMs: r.updatedAt.getTime() }));
    await t.setTime('inbox', b!, 'updated_at', 1_000);
    assert.equal(await t.driver.inboxReplay({ ids: [a!, b!], asRead }), 1);
    assert.deepEqual([(await t.row('inbox', a!))!.state, (await t.row('inbox', b!))!.state], ['pending', 'dead']);
    await assert.rejects(t.driver.inboxReplay({ ids: [b!], asRead: [] }), UsageError, 'an empty list never widens a requeue');
    await assert.rejects(t.driver.inboxReplay({ sources: ['stripe'], maxRows: 1 }), ReplayLimitError);
    assert.deepEqual([(await t.row('inbox', b!))!.state, (await t.row('inbox', c!))!.state], ['dead', 'dead'], 'nothing moved');
    assert.equal(await t.driver.inboxReplay({ sources: ['stripe'], maxRows: 2 }), 2);
    await assert.rejects(t.driver.inboxReplay({ sources: ['stripe'], maxRows: 0 }), UsageError);
  });

  define('a requeued relay row is its aggregate head again: the aggregate pending rows wait for it, one row in flight', async (t) => {
    // Row 1 of aggregate A dies; row 2 arrives after it and waits (pending) while 1 is requeued.
    const [first] = await deadRows(t, 'stripe', 'push', [{ key: 'a1', aggregateId: 'A' }]);
    const [second] = await receiveRows(t, [{ source: 'stripe', idempotencyKey: 'a2', aggregateId: 'A' }]);
    assert.equal(await t.driver.inboxReplay({ ids: [first!] }), 1);
    const claimed = await t.driver.inboxClaimPushMany({ limit: 10, leaseMs: LEASE });
    assert.deepEqual(claimed.map((r) => r.id), [first], 'the requeued row goes first; the later row of its aggregate waits');
    assert.deepEqual(await t.driver.inboxClaimPushMany({ limit: 10, leaseMs: LEASE }), [], 'one row of the aggregate in flight');
    assert.equal(await t.driver.inboxForward({ id: first!, token: claimed[0]!.claimToken, outbox: { topic: 'stripe.a1', payload: {} } }, { maxAttempts: 5 }), true);
    assert.deepEqual((await t.driver.inboxClaimPushMany({ limit: 10, leaseMs: LEASE })).map((r) => r.id), [second]);
  });

  define('a requeued pull row waits while a later row of its aggregate is under a live lease, then goes before the rest', async (t) => {
    const [first] = await deadRows(t, 'billing', 'pull', [{ key: 'b1', aggregateId: 'B' }]);
    const [second, third] = await receiveRows(t, [
      { source: 'billing', idempotencyKey: 'b2', aggregateId: 'B', consumption: 'pull' },
      { source: 'billing', idempotencyKey: 'b3', aggregateId: 'B', consumption: 'pull' },
    ]);
    const [inFlight] = await t.driver.pullClaimMany({ source: 'billing', limit: 10, leaseMs: LEASE });
    assert.equal(inFlight!.id, second);
    assert.equal(await t.driver.inboxReplay({ ids: [first!] }), 1);
    assert.deepEqual(await t.driver.pullClaimMany({ source: 'billing', limit: 10, leaseMs: LEASE }), [], 'the aggregate is under a live lease: nothing of it is claimed');
    assert.equal(await t.inTransaction((tx) => t.driver.pullComplete(tx, { id: second!, token: inFlight!.claimToken }), 'commit'), true);
    assert.deepEqual((await t.driver.pullClaimMany({ source: 'billing', limit: 10, leaseMs: LEASE })).map((r) => r.id), [first], 'the requeued row goes before the later pending row');
    assert.equal((await t.row('inbox', third!))!.state, 'pending');
  });
}
