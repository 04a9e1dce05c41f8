/**
 * A pass claims its next batch while one of its own is in flight only once that batch has been out
 * for as long as a claim takes (`pipelineHoldMs`): the overlap then hides a destination's (or a
 * lock's) wait. With a destination that answers at once, the batch is in its sent mark by then, and
 * a claim sent alongside it only competes with it for the database — so the pass waits for the
 * batch instead. Measured in docs/performance-history.md ("A claim waits for a batch that is only settling").
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { claimMemoryOf, claimTimed, pipelineHoldMs } from '../../lib/outbox/claim-size.ts';
import { runOutboxPass } from '../../lib/outbox/outbox-pass.ts';
import type { OutboxPassDriver } from '../../lib/outbox/pass-context.ts';
import type { TestDatabase } from '../helpers/database.ts';
import { delegatingPassDriver, insertOutboxRows, passFixture, stateCounts, withOutboxDatabase } from '../helpers/outbox-pass-fixture.ts';
import { RecordingDestination } from '../helpers/recording-destination.ts';
import { delay } from '../helpers/wait.ts';

/** When each claim started, and each batch's life: from its claim's answer to its sent mark's. */
interface Timeline {
  claimsStartedAt: number[];
  batches: Array<{ claimedAt: number; settledAt?: number; firstId: string }>;
}

/** The database's driver with every claim taking at least `claimDelayMs` longer, timed. */
function timedDriver(db: TestDatabase, claimDelayMs: number, timeline: Timeline): OutboxPassDriver {
  return delegatingPassDriver(db.driver, {
    outboxClaimMany: async (p) => {
      timeline.claimsStartedAt.push(performance.now());
      await delay(claimDelayMs);
      const rows = await db.driver.outboxClaimMany(p);
      if (rows.length > 0) timeline.batches.push({ claimedAt: performance.now(), firstId: rows[0]!.id });
      return rows;
    },
    outboxMarkSentMany: async (p) => {
      const ids = await db.driver.outboxMarkSentMany(p);
      const batch = timeline.batches.find((b) => p.claims.some((c) => c.id === b.firstId));
      if (batch) batch.settledAt = performance.now();
      return ids;
    },
  });
}

/** Claims started while a batch claimed before them was still out (claimed, not yet marked sent). */
function claimsDuringBatches(timeline: Timeline): Array<{ startedAt: number; batchOutMs: number }> {
  const overlapping: Array<{ startedAt: number; batchOutMs: number }> = [];
  for (const startedAt of timeline.claimsStartedAt) {
    const out = timeline.batches.filter((b) => b.claimedAt < startedAt && (b.settledAt === undefined || b.settledAt > startedAt));
    if (out.length > 0) overlapping.push({ startedAt, batchOutMs: startedAt - Math.min(...out.map((b) => b.claimedAt)) });
  }
  return overlapping;
}

describe('pipelineHoldMs', () => {
  it('holds the claim until the oldest batch in flight has been out for a claim time', () => {
    assert.equal(pipelineHoldMs([], 50, 1000), 0, 'no batch in flight: claim now');
    assert.equal(pipelineHoldMs([990], 0, 1000), 0, 'no claim timed yet: claim now (pipelined, as before any measurement)');
    assert.equal(pipelineHoldMs([990], 50, 1000), 40, 'a batch out 10 ms, claims take 50: 40 ms more');
    assert.equal(pipelineHoldMs([990, 900], 50, 1000), -50, 'the oldest batch has been out 100 ms: claim now');
  });

  it('smooths the claim time over the last claims, kept per driver', () => {
    const driver = {};
    const memory = claimMemoryOf(driver, 10, 10);
    assert.equal(memory.claimMs, 0);
    claimTimed(memory, 100);
    assert.equal(memory.claimMs, 100);
    claimTimed(memory, 20);
    assert.equal(memory.claimMs, 60);
    assert.equal(claimMemoryOf(driver, 10, 10).claimMs, 60, 'the next invocation of the container starts from it');
  });
});

describe('outbox pass: the next claim overlaps a batch only once the batch has been out for a claim time', () => {
  let db: TestDatabase;
  withOutboxDatabase((created) => (db = created));

  it('a destination that answers at once: each claim waits for the batch before it (claims and sent marks do not overlap)', async () => {
    await insertOutboxRows(db, Array.from({ length: 50 }, (_, i) => ({ topic: 'fast', payload: { i } })));
    const timeline: Timeline = { claimsStartedAt: [], batches: [] };
    const destination = new RecordingDestination();
    // A claim takes 300 ms or more; the batch's publish answers at once and its sent mark is one
    // short statement, so every batch is settled long before a claim's time has passed.
    const summary = await runOutboxPass(passFixture(db, { destinations: [destination], driver: timedDriver(db, 300, timeline), outbox: { batchSize: 10, maxBatchSize: 10 } }));
    assert.equal(summary.sent, 50);
    assert.deepEqual(await stateCounts(db), { sent: 50 });
    assert.equal(timeline.batches.length, 5);
    assert.ok(timeline.batches.every((b) => b.settledAt !== undefined), 'every batch marked sent');
    assert.deepEqual(claimsDuringBatches(timeline), [], 'no claim was sent while a batch of the pass was out');
  });

  it('a destination slower than a claim: the next claim is sent while the batch publishes, once it has been out for a claim time', async () => {
    await insertOutboxRows(db, Array.from({ length: 30 }, (_, i) => ({ topic: 'slow', payload: { i } })));
    const timeline: Timeline = { claimsStartedAt: [], batches: [] };
    // One call per batch (10 rows), 800 ms each; a claim takes about 100 ms.
    const destination = new RecordingDestination({ delayMs: 800 });
    const summary = await runOutboxPass(passFixture(db, { destinations: [destination], driver: timedDriver(db, 100, timeline), outbox: { batchSize: 10, maxBatchSize: 10 } }));
    assert.equal(summary.sent, 30);
    assert.deepEqual(await stateCounts(db), { sent: 30 });
    const overlapping = claimsDuringBatches(timeline);
    assert.ok(overlapping.length >= 2, `claims pipelined behind publishing batches: ${JSON.stringify(overlapping)}`);
    for (const claim of overlapping) {
      // Held for the smoothed claim time (at least the 100 ms delay of every claim).
      assert.ok(claim.batchOutMs >= 95, `a claim was sent ${claim.batchOutMs.toFixed(1)} ms after the batch it overlaps left, before a claim's time`);
    }
  });

  it('claims slower than maxPollIntervalMs: the hold ends at maxPollIntervalMs, so a row committed meanwhile is not held up by slow claims', async () => {
    await insertOutboxRows(db, Array.from({ length: 20 }, (_, i) => ({ topic: 'slow', payload: { i } })));
    const timeline: Timeline = { claimsStartedAt: [], batches: [] };
    // Claims take 900 ms (a lock wait, say); a batch publishes for 3 s; maxPollIntervalMs is 200.
    const destination = new RecordingDestination({ delayMs: 3000 });
    const summary = await runOutboxPass(
      passFixture(db, { destinations: [destination], driver: timedDriver(db, 900, timeline), outbox: { batchSize: 10, maxBatchSize: 10, maxPollIntervalMs: 200 } }),
    );
    assert.equal(summary.sent, 20);
    const overlapping = claimsDuringBatches(timeline);
    assert.ok(overlapping.length >= 1, 'a claim was sent while the first batch published');
    const first = overlapping[0]!;
    assert.ok(first.batchOutMs >= 190 && first.batchOutMs < 600, `the claim was held ${first.batchOutMs.toFixed(1)} ms (maxPollIntervalMs 200, claims 900 ms)`);
  });
});
