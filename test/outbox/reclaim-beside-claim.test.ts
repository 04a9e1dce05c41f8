import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { ReclaimResult } from '../../lib/db/driver.ts';
import { OutboxPassError, runOutboxPass } from '../../lib/outbox/outbox-pass.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import { TransientDatabaseError } from '../../lib/errors.ts';
import type { OutboxPassDriver } from '../../lib/outbox/pass-context.ts';
import type { TestDatabase } from '../helpers/database.ts';
import { delegatingPassDriver, insertOutboxRows, inspectRows, passFixture, withOutboxDatabase } from '../helpers/outbox-pass-fixture.ts';
import { RecordingDestination } from '../helpers/recording-destination.ts';

/**
 * The pass's reclaim runs beside its first claim, not before it. The reclaim here is held back
 * until the test lets it go, so the first claim surely answers before it: the rows it returns to
 * `pending` are still delivered in the same pass, in drain and in deadline mode, and the pass
 * never returns while its reclaim is still running.
 */
describe('outbox pass: the reclaim beside the first claim', () => {
  let db: TestDatabase;
  withOutboxDatabase((d) => (db = d));

  /** An expired claim of `id`: `processing`, its lease over a minute ago. */
  const expire = (id: string) =>
    db.query(
      `UPDATE "${db.schema}".outbox SET state = 'processing', claim_token = gen_random_uuid(), key_first = true,
              claimed_at = clock_timestamp() - interval '2 minutes', lease_expires_at = clock_timestamp() - interval '1 minute' WHERE id = $1`,
      [id],
    );

  /** A pass driver whose reclaim waits for `release()` before it runs; `claimsBefore` counts the claims answered before it ran. */
  function heldReclaim(): { driver: OutboxPassDriver; release: () => void; claimsBefore: () => number; reclaimEnded: () => boolean } {
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    let ran = false;
    let ended = false;
    let claimsBefore = 0;
    const driver = delegatingPassDriver(db.driver, {
      outboxReclaimExpired: async (p): Promise<ReclaimResult> => {
        await held;
        ran = true;
        try {
          return await db.driver.outboxReclaimExpired(p);
        } finally {
          ended = true;
        }
      },
      outboxClaimMany: async (p) => {
        const rows = await db.driver.outboxClaimMany(p);
        if (!ran) claimsBefore++;
        return rows;
      },
    });
    return { driver, release, claimsBefore: () => claimsBefore, reclaimEnded: () => ended };
  }

  it('drain mode: a claim that found nothing before the reclaim ended does not end the drain; the reclaimed row is delivered', async () => {
    const [id] = await insertOutboxRows(db, [{ topic: 'orders', payload: { n: 1 } }]);
    await expire(id!);
    const { driver, release, claimsBefore } = heldReclaim();
    const destination = new RecordingDestination();
    const pass = runOutboxPass(passFixture(db, { destinations: [destination], driver }));
    // The first claim answers (nothing: the only row is in flight) while the reclaim is held.
    for (let i = 0; i < 200 && claimsBefore() === 0; i++) await new Promise((resolve) => setTimeout(resolve, 5));
    assert.equal(claimsBefore(), 1, 'the first claim ran before the reclaim');
    release();
    const summary = await pass;
    assert.equal(summary.reclaimed, 1);
    assert.equal(summary.sent, 1, 'the reclaimed row was claimed after the reclaim, in the same pass');
    assert.equal(summary.stoppedBecause, 'drained');
    assert.equal(destination.deliveries.length, 1);
    assert.equal((await inspectRows(db, [id!]))[0]!.state, 'sent');
  });

  for (const mode of ['drain', 'deadline'] as const) {
    it(`${mode} mode: the first claim takes due rows while the reclaim is held; a pass stopped meanwhile returns only after the reclaim ended`, async () => {
      const ids = await insertOutboxRows(db, Array.from({ length: 5 }, (_, n) => ({ topic: 'orders', payload: { n } })));
      await expire(ids[0]!);
      const { driver, release, claimsBefore, reclaimEnded } = heldReclaim();
      const destination = new RecordingDestination();
      const stop = new AbortController();
      let returned = false;
      const pass = runOutboxPass(passFixture(db, { destinations: [destination], driver, mode, signal: stop.signal })).finally(() => (returned = true));
      for (let i = 0; i < 200 && destination.deliveries.length < 4; i++) await new Promise((resolve) => setTimeout(resolve, 5));
      assert.equal(destination.deliveries.length, 4, 'the four due rows were claimed and delivered before the reclaim ran');
      assert.ok(claimsBefore() >= 1);
      stop.abort();
      await new Promise((resolve) => setTimeout(resolve, 50));
      assert.equal(returned, false, 'the stopped pass waits for its reclaim');
      release();
      const summary = await pass;
      assert.equal(reclaimEnded(), true);
      assert.equal(summary.sent, 4);
      assert.equal(summary.reclaimed, 1);
      assert.equal((await inspectRows(db, [ids[0]!]))[0]!.state, 'pending', 'the reclaimed row waits for the next pass');
    });
  }

  it('deadline mode: the idle wait after an empty first claim ends when the reclaim returns rows', async () => {
    const [id] = await insertOutboxRows(db, [{ topic: 'orders', payload: { n: 1 } }]);
    await expire(id!);
    const { driver, release, claimsBefore } = heldReclaim();
    const destination = new RecordingDestination();
    const stop = new AbortController();
    // Idle waits of 5 s: without the reclaim ending the wait, the row would wait that long.
    const pass = runOutboxPass({ ...passFixture(db, { destinations: [destination], driver, mode: 'deadline', signal: stop.signal, outbox: { pollIntervalMs: 5_000, maxPollIntervalMs: 5_000 } }) });
    for (let i = 0; i < 200 && claimsBefore() === 0; i++) await new Promise((resolve) => setTimeout(resolve, 5));
    assert.equal(claimsBefore(), 1);
    const released = performance.now();
    release();
    for (let i = 0; i < 400 && destination.deliveries.length === 0; i++) await new Promise((resolve) => setTimeout(resolve, 5));
    const waited = performance.now() - released;
    stop.abort();
    const summary = await pass;
    assert.equal(summary.sent, 1);
    assert.ok(waited < 2_000, `the reclaimed row was delivered ${Math.round(waited)} ms after the reclaim, not after the 5 s idle wait`);
  });

  it('deadline mode: a reclaim that ends while the first claim is still on its way (the claim saw nothing) ends the idle wait too', async () => {
    const [id] = await insertOutboxRows(db, [{ topic: 'orders', payload: { n: 1 } }]);
    await expire(id!);
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    let ended!: () => void;
    const reclaimEnded = new Promise<void>((resolve) => (ended = resolve));
    let claims = 0;
    const driver = delegatingPassDriver(db.driver, {
      outboxReclaimExpired: async (p) => {
        await held;
        try {
          return await db.driver.outboxReclaimExpired(p);
        } finally {
          ended();
        }
      },
      outboxClaimMany: async (p) => {
        const rows = await db.driver.outboxClaimMany(p);
        if (claims++ === 0) {
          // The first claim found nothing (its only row is in flight); its answer reaches the
          // pass only after the reclaim has returned the row and its result was taken in.
          release();
          await reclaimEnded;
          await new Promise((resolve) => setImmediate(resolve));
        }
        return rows;
      },
    });
    const destination = new RecordingDestination();
    const stop = new AbortController();
    const started = performance.now();
    const pass = runOutboxPass(passFixture(db, { destinations: [destination], driver, mode: 'deadline', signal: stop.signal, outbox: { pollIntervalMs: 5_000, maxPollIntervalMs: 5_000 } }));
    for (let i = 0; i < 600 && destination.deliveries.length === 0; i++) await new Promise((resolve) => setTimeout(resolve, 5));
    const waited = performance.now() - started;
    stop.abort();
    const summary = await pass;
    assert.equal(summary.reclaimed, 1);
    assert.equal(summary.sent, 1);
    assert.ok(waited < 2_000, `the reclaimed row was delivered ${Math.round(waited)} ms into the pass, not after the 5 s idle wait`);
  });

  it('a reclaim whose report fails (the metrics sink throws) fails the pass as a failed reclaim does: no unhandled rejection, the batch in flight settled before the pass returns', async () => {
    const [expired] = await insertOutboxRows(db, [
      { topic: 'orders', payload: { n: 0 } },
      { topic: 'orders', payload: { n: 1 } },
    ]);
    await expire(expired!);
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => unhandled.push(reason);
    process.on('unhandledRejection', onUnhandled);
    try {
      const { driver, release, claimsBefore } = heldReclaim();
      const destination = new RecordingDestination({ delayMs: 400 });
      const fixture = passFixture(db, { destinations: [destination], driver, mode: 'deadline', outbox: { pollIntervalMs: 5_000, maxPollIntervalMs: 5_000 } });
      const metrics = new QueueBoxMetrics({ namespace: 'QueueBoxTest', serviceName: 'queuebox-test', write: () => { throw new Error('metrics sink failed'); } });
      const pass = runOutboxPass({ ...fixture, metrics });
      // The first claim takes row 1 (its publish takes 400 ms); the pass then waits idle.
      for (let i = 0; i < 200 && (claimsBefore() < 2 || destination.offered.length === 0); i++) await new Promise((resolve) => setTimeout(resolve, 5));
      assert.ok(claimsBefore() >= 2, 'the pass claimed again and found nothing before the reclaim ran');
      const released = performance.now();
      release();
      await assert.rejects(pass, (error: Error & { summary?: { stoppedBecause: string; sent: number; abandoned: number } }) => {
        assert.ok(error instanceof OutboxPassError, `an OutboxPassError, not ${error.constructor.name}`);
        assert.match(error.message, /metrics sink failed/);
        assert.equal(error.summary?.stoppedBecause, 'error');
        assert.equal(error.summary?.sent, 1);
        assert.equal(error.summary?.abandoned, 0);
        return true;
      });
      assert.ok(performance.now() - released < 2_000, 'the failure ended the idle wait');
      const states = new Map((await inspectRows(db)).map((r) => [r.id, r.state]));
      assert.equal(states.get(expired!), 'pending', 'the reclaim itself committed');
      assert.deepEqual([...states.values()].sort(), ['pending', 'sent'], 'the batch in flight was settled before the pass returned');
      assert.equal(destination.deliveries.length, 1);
      await new Promise((resolve) => setImmediate(resolve));
      assert.deepEqual(unhandled, []);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
  });

  it('deadline mode: a reclaim that fails while the pass waits idle ends the wait, and the pass fails at once', async () => {
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    let claims = 0;
    const driver = delegatingPassDriver(db.driver, {
      outboxReclaimExpired: async () => {
        await held;
        throw new Error('connection reset');
      },
      outboxClaimMany: async (p) => {
        claims++;
        return db.driver.outboxClaimMany(p);
      },
    });
    const pass = runOutboxPass(passFixture(db, { destinations: [new RecordingDestination()], driver, mode: 'deadline', outbox: { pollIntervalMs: 5_000, maxPollIntervalMs: 5_000 } }));
    for (let i = 0; i < 200 && claims === 0; i++) await new Promise((resolve) => setTimeout(resolve, 5));
    await new Promise((resolve) => setTimeout(resolve, 50));
    const released = performance.now();
    release();
    await assert.rejects(pass, /connection reset/);
    assert.ok(performance.now() - released < 2_000, `the pass failed ${Math.round(performance.now() - released)} ms after the reclaim, not after the 5 s idle wait`);
  });

  it('a reclaim the database ends as a deadlock victim (it meets the first claim) runs again; the rows it returns are delivered', async () => {
    const [id] = await insertOutboxRows(db, [{ topic: 'orders', payload: { n: 1 } }]);
    await expire(id!);
    let calls = 0;
    const driver = delegatingPassDriver(db.driver, {
      outboxReclaimExpired: async (p) => {
        if (calls++ === 0) throw new TransientDatabaseError('deadlock detected', '40P01');
        return db.driver.outboxReclaimExpired(p);
      },
    });
    const destination = new RecordingDestination();
    const summary = await runOutboxPass(passFixture(db, { destinations: [destination], driver }));
    assert.equal(calls, 2);
    assert.equal(summary.reclaimed, 1);
    assert.equal(summary.sent, 1);
    assert.equal(summary.stoppedBecause, 'drained');
  });

  it('a key whose expired row the reclaim has not yet returned stays held: its next row is not claimed before it, and both go out in order', async () => {
    const [first, second] = await insertOutboxRows(db, [
      { topic: 'orders', key: 'k', payload: { n: 1 } },
      { topic: 'orders', key: 'k', payload: { n: 2 } },
    ]);
    await expire(first!);
    const { driver, release, claimsBefore } = heldReclaim();
    const destination = new RecordingDestination();
    const pass = runOutboxPass(passFixture(db, { destinations: [destination], driver }));
    for (let i = 0; i < 200 && claimsBefore() === 0; i++) await new Promise((resolve) => setTimeout(resolve, 5));
    assert.equal(claimsBefore(), 1);
    assert.equal(destination.offered.length, 0, 'the claim beside the reclaim took nothing of k');
    assert.equal((await inspectRows(db, [second!]))[0]!.state, 'pending');
    release();
    const summary = await pass;
    assert.equal(summary.sent, 2);
    assert.deepEqual(destination.deliveries.map((d) => (d.payload as { n: number }).n), [1, 2]);
  });

  it('a reclaim that fails fails the pass, after the batch already claimed is settled', async () => {
    await insertOutboxRows(db, Array.from({ length: 3 }, (_, n) => ({ topic: 'orders', payload: { n } })));
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const driver = delegatingPassDriver(db.driver, {
      outboxReclaimExpired: async () => {
        await held;
        throw new Error('connection reset');
      },
    });
    const destination = new RecordingDestination();
    const pass = runOutboxPass(passFixture(db, { destinations: [destination], driver }));
    for (let i = 0; i < 200 && destination.deliveries.length < 3; i++) await new Promise((resolve) => setTimeout(resolve, 5));
    release();
    await assert.rejects(pass, (error: Error & { summary?: { sent: number; stoppedBecause: string; abandoned: number } }) => {
      assert.match(error.message, /connection reset/);
      assert.equal(error.summary?.stoppedBecause, 'error');
      assert.equal(error.summary?.sent, 3);
      assert.equal(error.summary?.abandoned, 0);
      return true;
    });
    assert.deepEqual((await inspectRows(db)).map((r) => r.state), ['sent', 'sent', 'sent']);
  });
});
