import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { ReclaimResult } from '../../lib/db/driver.ts';
import { runOutboxPass } from '../../lib/outbox/outbox-pass.ts';
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
