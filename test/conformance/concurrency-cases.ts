/**
 * Conformance cases of claims under concurrency and isolation: a key enqueued while claims run
 * (with READ_COMMITTED_SNAPSHOT on and off where the dialect has it), the claim order returned,
 * keys that differ only in case, and a hot key with 10,000 waiting rows next to enqueues.
 */
import assert from 'node:assert/strict';
import type { Driver, OutboxRow } from '../../lib/db/driver.ts';
import { enqueueRows, receiveRows, type ConformanceTarget, type DefineCase } from './driver-conformance.ts';

const LEASE = 60_000;

/** The isolation settings a case runs under: RCSI on and off where the target can switch it, else the target's own. */
async function eachIsolation(t: ConformanceTarget, run: (label: string) => Promise<void>): Promise<void> {
  if (!t.readCommittedSnapshot) {
    await run('default isolation');
    return;
  }
  const before = await t.readCommittedSnapshot(true);
  try {
    await run('READ_COMMITTED_SNAPSHOT ON');
    await t.readCommittedSnapshot(false);
    await run('READ_COMMITTED_SNAPSHOT OFF');
  } finally {
    await t.readCommittedSnapshot(before);
  }
}

/** Claims on `drivers` in turn until `done` settles, then once more; returns every row claimed. */
async function claimWhile(drivers: Driver[], done: Promise<unknown>): Promise<OutboxRow[]> {
  let settled = false;
  void done.finally(() => {
    settled = true;
  });
  const claimed: OutboxRow[] = [];
  const loop = async (driver: Driver) => {
    do claimed.push(...(await driver.outboxClaimMany({ limit: 10, leaseMs: LEASE })));
    while (!settled);
    claimed.push(...(await driver.outboxClaimMany({ limit: 10, leaseMs: LEASE })));
  };
  await Promise.all(drivers.map(loop));
  return claimed;
}

export function defineConcurrencyCases(define: DefineCase): void {
  define('a key enqueued while claims run has one row in flight, its head, under each isolation setting', async (t) => {
    await eachIsolation(t, async (label) => {
      const replicas = [t.newDriver(), t.newDriver()];
      for (let round = 0; round < 10; round += 1) {
        const key = `race-${label}-${round}`;
        const enqueue = enqueueRows(t, [1, 2, 3].map((n) => ({ topic: 'race', key, payload: { n } })));
        const claimed = (await claimWhile(replicas, enqueue)).filter((r) => r.key === key);
        const ids = await enqueue;
        assert.ok(claimed.length <= 1, `${label}, round ${round}: ${claimed.length} rows of ${key} in flight`);
        assert.deepEqual(claimed.map((r) => r.id), [ids[0]].slice(0, claimed.length), `${label}: only the head is claimed`);
        const rest = await replicas[0]!.outboxClaimMany({ limit: 10, leaseMs: LEASE });
        assert.deepEqual(rest.filter((r) => r.key === key).map((r) => r.id), claimed.length === 0 ? [ids[0]] : [], `${label}: the key waits for its head`);
      }
    });
  });

  define('pullClaimMany returns rows in claim order, sorted by the database: due retries, then scheduled_at', async (t) => {
    const ids = (await receiveRows(t, ['r1', 'r2', 'r3'].map((k) => ({ source: 'ordered', idempotencyKey: k, consumption: 'pull' as const })))) as [string, string, string];
    const first = await t.driver.pullClaimMany({ source: 'ordered', limit: 3, leaseMs: LEASE });
    const token = (id: string) => first.find((r) => r.id === id)!.claimToken;
    assert.equal(await t.driver.pullRetry({ id: ids[1], token: token(ids[1]), delayMs: 0, error: 'again' }), true);
    for (const id of [ids[0], ids[2]]) assert.equal(await t.driver.pullRelease({ id, token: token(id) }), true);
    for (const [id, ms] of [[ids[2], -30_000], [ids[0], -20_000], [ids[1], -10_000]] as const) await t.setTime('inbox', id, 'scheduled_at', ms);
    const claimed = await t.driver.pullClaimMany({ source: 'ordered', limit: 3, leaseMs: LEASE });
    assert.deepEqual(claimed.map((r) => r.id), [ids[1], ids[2], ids[0]]);
  });

  define('keys, sources and idempotency keys that differ only in case (or trailing spaces) are different: every message is stored', async (t) => {
    const results = [];
    for (const idempotencyKey of ['Key-1', 'key-1', 'KEY-1', 'key-1 ']) results.push(await t.driver.inboxInsert({ source: 'src', idempotencyKey, payload: { idempotencyKey }, consumption: 'push' }));
    assert.deepEqual(results.map((r) => r.duplicate), [false, false, false, false]);
    assert.equal(new Set(results.map((r) => r.id)).size, 4);
    const again = await t.driver.inboxInsert({ source: 'src', idempotencyKey: 'key-1', payload: {}, consumption: 'push' });
    assert.deepEqual(again, { id: results[1]!.id, duplicate: true }, 'an exact duplicate is still one message');

    const [lower] = await receiveRows(t, [{ source: 'orders', idempotencyKey: 'o-1', consumption: 'pull' }]);
    await receiveRows(t, [{ source: 'Orders', idempotencyKey: 'o-1', consumption: 'pull' }, { source: 'orders ', idempotencyKey: 'o-1', consumption: 'pull' }]);
    assert.deepEqual((await t.driver.pullClaimMany({ source: 'orders', limit: 10, leaseMs: LEASE })).map((r) => r.id), [lower], 'a pull claim takes its exact source only');

    const [upper, lowerKey] = await enqueueRows(t, [{ topic: 'case', key: 'K', payload: {} }, { topic: 'case', key: 'k', payload: {} }]);
    const claimed = await t.driver.outboxClaimMany({ limit: 10, leaseMs: LEASE });
    assert.deepEqual(claimed.filter((r) => r.topic === 'case').map((r) => r.id), [upper, lowerKey], 'K and k are two keys, each with its head in flight');
  });

  define('a hot key with 10,000 waiting rows: claims take its head and the other keys, in order, and enqueues of other keys go on', async (t) => {
    await t.inTransaction(async (tx) => {
      for (let n = 0; n < 10_000; n += 1) await t.driver.outboxInsert(tx, { topic: 'hot', key: 'hot', payload: { n } }, { maxAttempts: 5 });
    }, 'commit');
    const escalationsBefore = await t.lockEscalations?.('outbox');
    const hotSeen: number[] = [];
    let coldSent = 0;
    for (let round = 0; round < 5; round += 1) {
      const enqueued = enqueueRows(t, [{ topic: 'cold', key: `cold-${round}`, payload: { round } }]);
      const claimed = await t.driver.outboxClaimMany({ limit: 10, leaseMs: LEASE });
      await enqueued;
      const hot = claimed.filter((r) => r.key === 'hot');
      assert.equal(hot.length, 1, `round ${round}: the hot key's head, once`);
      hotSeen.push((hot[0]!.payload as { n: number }).n);
      assert.ok(claimed.every((r) => r.key === 'hot' || r.topic === 'cold'));
      const sent = await t.driver.outboxMarkSentMany({ claims: claimed.map((r) => ({ id: r.id, token: r.claimToken })) });
      assert.equal(sent.length, claimed.length);
      coldSent += claimed.length - 1;
    }
    assert.deepEqual(hotSeen, [0, 1, 2, 3, 4], 'the hot key moves in sequence order');
    assert.equal(await t.count('outbox', 'sent'), 5 + coldSent);
    assert.equal(await t.count('outbox', 'pending'), 10_000 - 5 + (5 - coldSent), 'every enqueue of another key landed');
    if (escalationsBefore !== undefined) assert.equal(await t.lockEscalations!('outbox'), escalationsBefore, 'no claim escalated to a table lock');
  });
}
