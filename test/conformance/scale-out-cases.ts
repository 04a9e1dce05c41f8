/**
 * Conformance cases of scale-out: the backlog counts (outboxCountDue, inboxCountDue) and the
 * slots of started passes (scaleOutAcquire, scaleOutStart, scaleOutRelease).
 */
import assert from 'node:assert/strict';
import { enqueueRows, receiveRows, type DefineCase } from './driver-conformance.ts';

export function defineScaleOutCases(define: DefineCase): void {
  define('outboxCountDue and inboxCountDue count due pending rows only (push rows for the inbox), stopping at the limit', async (t) => {
    await enqueueRows(t, [{ topic: 'a', payload: {} }, { topic: 'b', payload: {} }, { topic: 'c', payload: {} }, { topic: 'd', payload: {} }, { topic: 'later', payload: {}, delayMs: 60_000 }]);
    await t.driver.outboxClaimMany({ limit: 1, leaseMs: 60_000 });
    assert.equal(await t.driver.outboxCountDue({ limit: 100 }), 3, 'neither the claimed nor the delayed row');
    assert.equal(await t.driver.outboxCountDue({ limit: 2 }), 2, 'the count stops at the limit');
    await receiveRows(t, [{ idempotencyKey: 'p1' }, { idempotencyKey: 'p2' }, { idempotencyKey: 'pull', consumption: 'pull' }, { idempotencyKey: 'later', delayMs: 60_000 }]);
    assert.equal(await t.driver.inboxCountDue({ limit: 100 }), 2, 'due push rows only');
    assert.equal(await t.driver.inboxCountDue({ limit: 1 }), 1);
  });

  define('scaleOutAcquire takes the lowest free slots up to want minus those held; concurrent callers never share a slot nor exceed the slots', async (t) => {
    const first = await t.driver.scaleOutAcquire({ worker: 'outboxPoller', slots: 3, want: 1, leaseMs: 60_000 });
    assert.deepEqual(first.map((s) => s.slot), [1]);
    assert.match(first[0]!.token, /^\d+$/);
    const more = await t.driver.scaleOutAcquire({ worker: 'outboxPoller', slots: 3, want: 2, leaseMs: 60_000 });
    assert.deepEqual(more.map((s) => s.slot), [2], 'one held already: one more for two in all');
    assert.deepEqual(await t.driver.scaleOutAcquire({ worker: 'outboxPoller', slots: 3, want: 2, leaseMs: 60_000 }), [], 'two held: none more');
    assert.deepEqual((await t.driver.scaleOutAcquire({ worker: 'inboxRelay', slots: 3, want: 1, leaseMs: 60_000 })).map((s) => s.slot), [1], 'another worker has slots of its own');

    const replicas = [t.newDriver(), t.newDriver(), t.newDriver(), t.newDriver()];
    const taken = (await Promise.all(replicas.map((d) => d.scaleOutAcquire({ worker: 'outboxPoller', slots: 5, want: 5, leaseMs: 60_000 })))).flat();
    assert.deepEqual(taken.map((s) => s.slot).sort(), [3, 4, 5], 'the three free slots, each to one caller');
    await Promise.all(replicas.map((d) => d.close()));
  });

  define('scaleOutStart takes a slot over once, under a live lease; scaleOutRelease frees it only with the token it holds', async (t) => {
    const [slot] = await t.driver.scaleOutAcquire({ worker: 'inboxRelay', slots: 2, want: 1, leaseMs: 60_000 });
    const [a, b] = await Promise.all([t.driver.scaleOutStart({ worker: 'inboxRelay', slot: slot!, leaseMs: 120_000 }), t.newDriver().scaleOutStart({ worker: 'inboxRelay', slot: slot!, leaseMs: 120_000 })]);
    const held = a ?? b;
    assert.ok((a === undefined) !== (b === undefined), 'one of two deliveries takes the slot over');
    assert.notEqual(held!.token, slot!.token, 'a new token');
    assert.equal(await t.driver.scaleOutRelease({ worker: 'inboxRelay', slot: slot! }), false, 'the old token frees nothing');
    assert.equal(await t.driver.scaleOutRelease({ worker: 'inboxRelay', slot: held! }), true);
    assert.deepEqual((await t.driver.scaleOutAcquire({ worker: 'inboxRelay', slots: 2, want: 1, leaseMs: 60_000 })).map((s) => s.slot), [1], 'free again');

    const [late] = await t.driver.scaleOutAcquire({ worker: 'inboxRelay', slots: 2, want: 2, leaseMs: 50 });
    assert.equal(late!.slot, 2);
    await new Promise((resolve) => setTimeout(resolve, 150));
    assert.equal(await t.driver.scaleOutStart({ worker: 'inboxRelay', slot: late!, leaseMs: 60_000 }), undefined, 'an event that waited past its lease runs no pass');
    assert.deepEqual((await t.driver.scaleOutAcquire({ worker: 'inboxRelay', slots: 2, want: 2, leaseMs: 60_000 })).map((s) => s.slot), [2], 'an expired slot is free');
  });
}
