/**
 * Conformance cases of the pull methods: claim, renew, complete in the caller's transaction,
 * retry, dead, release — each finishing write fenced.
 */
import assert from 'node:assert/strict';
import type { ClaimRef } from '../../lib/db/driver.ts';
import { receiveRows, type ConformanceTarget, type DefineCase } from './driver-conformance.ts';
import { defineFenceCases } from './fence-cases.ts';

const LEASE = 30_000;

/** Receives pull rows of `source` in order; returns their ids. */
function receivePull(t: ConformanceTarget, source: string, rows: Array<{ key: string; aggregateId?: string; delayMs?: number }>): Promise<string[]> {
  return receiveRows(
    t,
    rows.map((r) => ({ source, idempotencyKey: r.key, consumption: 'pull' as const, ...(r.aggregateId ? { aggregateId: r.aggregateId } : {}), ...(r.delayMs ? { delayMs: r.delayMs } : {}) })),
  );
}

async function claimOne(t: ConformanceTarget): Promise<ClaimRef> {
  await receivePull(t, 'orders', [{ key: `k-${Math.random()}` }]);
  const [row] = await t.driver.pullClaimMany({ source: 'orders', limit: 1, leaseMs: LEASE });
  return { id: row!.id, token: row!.claimToken };
}

export function definePullCases(define: DefineCase): void {
  define('pullClaimMany claims due rows of one source, one per aggregate, in receive order', async (t) => {
    const [a1, a2, b1, free1, , later] = await receivePull(t, 'orders', [
      { key: 'a1', aggregateId: 'A' },
      { key: 'a2', aggregateId: 'A' },
      { key: 'b1', aggregateId: 'B' },
      { key: 'f1' },
      { key: 'f2' },
      { key: 'later', delayMs: 60_000 },
    ]);
    await receivePull(t, 'payments', [{ key: 'other-source' }]);
    await receiveRows(t, [{ source: 'orders', idempotencyKey: 'push-row' }]);
    const claimed = await t.driver.pullClaimMany({ source: 'orders', limit: 3, leaseMs: LEASE });
    assert.deepEqual(claimed.map((r) => r.id), [a1, b1, free1]);
    assert.ok(claimed.every((r) => r.source === 'orders' && r.attempt === 0));
    const rest = await t.driver.pullClaimMany({ source: 'orders', limit: 10, leaseMs: LEASE });
    assert.deepEqual(rest.map((r) => r.idempotencyKey), ['f2'], 'a2 waits for a1; later is not due; push rows are not pulled');
    assert.ok(a2 && later);
  });

  define('pullClaimMany takes expired processing rows again with a new token, and skips aggregates under a live lease', async (t) => {
    const [a1, , b1] = await receivePull(t, 'orders', [{ key: 'a1', aggregateId: 'A' }, { key: 'a2', aggregateId: 'A' }, { key: 'b1', aggregateId: 'B' }]);
    const first = await t.driver.pullClaimMany({ source: 'orders', limit: 10, leaseMs: LEASE });
    assert.deepEqual(first.map((r) => r.id), [a1, b1]);
    await t.setTime('inbox', a1!, 'lease_expires_at', -1000);
    const again = await t.driver.pullClaimMany({ source: 'orders', limit: 10, leaseMs: LEASE });
    assert.deepEqual(again.map((r) => r.id), [a1], 'A is free again (its lease expired), B is under a live lease');
    assert.notEqual(again[0]!.claimToken, first[0]!.claimToken);
    const oldOwner = { id: a1!, token: first[0]!.claimToken };
    assert.equal(await t.inTransaction((tx) => t.driver.pullComplete(tx, oldOwner), 'commit'), false, 'the old owner is fenced out');
  });

  define('pullClaimMany takes due retries before first attempts received earlier, and returns them first', async (t) => {
    const [a1] = await receivePull(t, 'orders', [{ key: 'a1', aggregateId: 'A' }, { key: 'a2', aggregateId: 'A' }]);
    const [row] = await t.driver.pullClaimMany({ source: 'orders', limit: 1, leaseMs: LEASE });
    assert.equal(row!.id, a1);
    assert.equal(await t.driver.pullRetry({ id: a1!, token: row!.claimToken, delayMs: 0, error: 'handler failed' }), true);
    const [f1, f2] = await receivePull(t, 'orders', [{ key: 'f1' }, { key: 'f2' }]);
    for (const [id, ms] of [[f1!, -30_000], [f2!, -20_000]] as const) await t.setTime('inbox', id, 'scheduled_at', ms);
    const claimed = await t.driver.pullClaimMany({ source: 'orders', limit: 2, leaseMs: LEASE });
    assert.deepEqual(claimed.map((r) => r.id), [a1, f1]);
    assert.deepEqual(claimed.map((r) => r.attempt), [1, 0]);
    assert.ok(f2);
  });

  define('pullClaimMany treats an empty aggregate id as no aggregate: its rows are claimed freely, none waits for another', async (t) => {
    // Straight through inboxInsert: receivePull leaves an empty aggregate id out.
    const pull = (key: string, aggregateId: string) => ({ source: 'orders', idempotencyKey: key, consumption: 'pull' as const, aggregateId });
    const [e1, e2, a1, e3] = await receiveRows(t, [pull('e1', ''), pull('e2', ''), pull('a1', 'A'), pull('e3', ''), pull('a2', 'A')]);
    const claimed = await t.driver.pullClaimMany({ source: 'orders', limit: 10, leaseMs: LEASE });
    assert.deepEqual(claimed.map((r) => r.id).sort(), [e1, e2, a1, e3].sort(), 'every empty-aggregate row at once; A one at a time');
    assert.ok(claimed.filter((r) => r.id !== a1).every((r) => r.aggregateId === ''));
    const [e4] = await receiveRows(t, [pull('e4', '')]);
    assert.deepEqual((await t.driver.pullClaimMany({ source: 'orders', limit: 10, leaseMs: LEASE })).map((r) => r.id), [e4], 'rows under a live lease hold no empty aggregate');
  });

  define('pullClaimMany by four workers at once: every row once, one per aggregate', async (t) => {
    const rows = [];
    for (let n = 0; n < 3; n++) for (const aggregateId of ['a', 'b', 'c', 'd', 'e']) rows.push({ key: `${aggregateId}-${n}`, aggregateId });
    await receivePull(t, 'orders', rows);
    const workers = [t.newDriver(), t.newDriver(), t.newDriver(), t.newDriver()];
    const all = (await Promise.all(workers.map((d) => d.pullClaimMany({ source: 'orders', limit: 4, leaseMs: LEASE })))).flat();
    await Promise.all(workers.map((d) => d.close()));
    assert.deepEqual(all.map((r) => r.idempotencyKey).sort(), ['a-0', 'b-0', 'c-0', 'd-0', 'e-0']);
  });

  defineFenceCases(define, {
    method: 'pullRenew',
    table: 'inbox',
    claim: claimOne,
    write: (t, c) => t.driver.pullRenew({ ...c, leaseMs: 600_000 }),
    check: (row, before) => assert.ok(row.lease_expires_at!.getTime() > before.lease_expires_at!.getTime() + 500_000),
  });
  defineFenceCases(define, {
    method: 'pullComplete (committed caller transaction)',
    table: 'inbox',
    claim: claimOne,
    write: (t, c) => t.inTransaction((tx) => t.driver.pullComplete(tx, c), 'commit'),
    check: (row) => {
      assert.equal(row.state, 'processed');
      assert.ok(row.processed_at instanceof Date);
    },
  });
  defineFenceCases(define, {
    method: 'pullRetry',
    table: 'inbox',
    claim: claimOne,
    write: (t, c) => t.driver.pullRetry({ ...c, delayMs: 30_000, error: 'handler failed' }),
    check: (row, before) => {
      assert.equal(row.state, 'pending');
      assert.equal(row.attempt, before.attempt + 1);
      assert.equal(row.last_error, 'handler failed');
      assert.equal(row.claim_token?.toLowerCase(), before.claim_token?.toLowerCase(), 'the token stays on the pending row');
      assert.ok(row.scheduled_at.getTime() >= before.claimed_at!.getTime() + 29_000);
    },
  });
  defineFenceCases(define, {
    method: 'pullMarkDead',
    table: 'inbox',
    claim: claimOne,
    write: (t, c) => t.driver.pullMarkDead({ ...c, error: 'poison' }),
    check: (row) => {
      assert.equal(row.state, 'dead');
      assert.equal(row.last_error, 'poison');
    },
  });
  defineFenceCases(define, {
    method: 'pullRelease',
    table: 'inbox',
    claim: claimOne,
    write: (t, c) => t.driver.pullRelease(c),
    check: (row, before) => {
      assert.equal(row.state, 'pending');
      assert.equal(row.attempt, before.attempt);
      assert.deepEqual(row.scheduled_at, before.scheduled_at);
      assert.equal(row.claim_token?.toLowerCase(), before.claim_token?.toLowerCase(), 'the token stays on the pending row');
    },
  });

  define('pullComplete commits or rolls back with the caller transaction', async (t) => {
    const claim = await claimOne(t);
    assert.equal(await t.inTransaction((tx) => t.driver.pullComplete(tx, claim), 'rollback'), true);
    const row = (await t.row('inbox', claim.id))!;
    assert.equal(row.state, 'processing', 'the rolled back completion left the claim in place');
    assert.equal(row.claim_token, claim.token);
    assert.equal(await t.inTransaction((tx) => t.driver.pullComplete(tx, claim), 'commit'), true);
    assert.equal((await t.row('inbox', claim.id))!.state, 'processed');
  });

  define('pullComplete on a push row changes nothing', async (t) => {
    await receiveRows(t, [{ idempotencyKey: 'push' }]);
    const [row] = await t.driver.inboxClaimPushMany({ limit: 1, leaseMs: LEASE });
    assert.equal(await t.inTransaction((tx) => t.driver.pullComplete(tx, { id: row!.id, token: row!.claimToken }), 'commit'), false);
    assert.equal((await t.row('inbox', row!.id))!.state, 'processing');
  });
}
