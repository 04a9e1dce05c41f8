/**
 * A claim brings its rows' payloads into the container's memory: a pass lowers its claim limit
 * below `outbox.batchSize` once a claim shows rows so large that a full batch would exceed
 * `CLAIM_PAYLOAD_BUDGET_CHARS`, and goes back to `batchSize` once rows are small again. The size
 * is remembered per driver, as a container keeps its driver across invocations.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { OutboxPassDriver } from '../../lib/outbox/pass-context.ts';
import { afterClaim, CLAIM_PAYLOAD_BUDGET_CHARS, claimLimitFor, claimLimitRung, claimMemoryOf, MAX_PIPELINE_PAUSE, mayPipeline, nextClaimSize, rowsPerCallOf, rowsPublishableBefore } from '../../lib/outbox/claim-size.ts';
import { runOutboxPass } from '../../lib/outbox/outbox-pass.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { delegatingPassDriver, passFixture } from '../helpers/outbox-pass-fixture.ts';
import { RecordingDestination } from '../helpers/recording-destination.ts';

/** A test database whose outbox claims `batchSize` rows, growing to `maxBatchSize`. */
function outboxDatabase(outbox: { batchSize: number; maxBatchSize: number }): () => TestDatabase {
  let db: TestDatabase | undefined;
  before(async () => {
    db = await createTestDatabase({
      destinations: { main: { type: 'sqs', queueUrl: 'http://localhost:1/000000000000/main' } },
      outbox: { routes: [{ topicPattern: '**', destination: 'main' }], ...outbox },
    });
  });
  after(async () => db?.drop());
  return () => db!;
}

/** The database's driver, recording each claim's limit and how many rows it returned. */
function recordingDriver(db: TestDatabase, limits: number[], counts: number[] = []): OutboxPassDriver {
  return delegatingPassDriver(db.driver, {
    outboxClaimMany: async (p) => {
      limits.push(p.limit);
      const rows = await db.driver.outboxClaimMany(p);
      counts.push(rows.length);
      return rows;
    },
  });
}

describe('claim limit by payload size', () => {
  it('is batchSize for small rows and with nothing claimed yet; fewer rows, at least one, for large ones', () => {
    assert.equal(claimLimitFor(500, undefined), 500);
    assert.equal(claimLimitFor(500, { rows: 0, payloadChars: 0 }), 500);
    assert.equal(claimLimitFor(500, { rows: 100, payloadChars: 100 * 1000 }), 500);
    const big = 512 * 1024;
    assert.equal(claimLimitFor(500, { rows: 10, payloadChars: 10 * big }), CLAIM_PAYLOAD_BUDGET_CHARS / big);
    assert.equal(claimLimitFor(500, { rows: 1, payloadChars: CLAIM_PAYLOAD_BUDGET_CHARS * 3 }), 1);
    // exactly at the budget: a full batch
    assert.equal(claimLimitFor(64, { rows: 1, payloadChars: CLAIM_PAYLOAD_BUDGET_CHARS / 64 }), 64);
  });

  describe('in a pass against PostgreSQL', () => {
    const database = outboxDatabase({ batchSize: 100, maxBatchSize: 100 });

    it('claims fewer rows after a claim of large payloads, then batchSize again after small ones, across passes of one driver', async () => {
      const db = database();
      const big = 512 * 1024; // 100 of these would be 50 MiB of payload text in one claim
      await db.query(
        `INSERT INTO "${db.schema}".outbox (topic, payload)
         SELECT 'big', jsonb_build_object('i', g, 'pad', repeat('x', $1)) FROM generate_series(1, 120) g`,
        [big],
      );
      const limits: number[] = [];
      const counts: number[] = [];
      const driver = recordingDriver(db, limits, counts);
      const destination = new RecordingDestination({ name: 'main', answer: () => 'sent' });
      const first = await runOutboxPass(passFixture(db, { destinations: [destination], driver }));
      assert.equal(first.sent, 120);
      const perClaim = Math.floor(CLAIM_PAYLOAD_BUDGET_CHARS / (big + 20));
      // The first claim knows nothing yet; the next ones hold at most 32 MiB of payload each
      // (the bound rounded down to a rung: 63 rows → 50).
      assert.equal(limits[0], 100);
      assert.equal(counts[0], 100);
      assert.equal(limits[1], claimLimitRung(perClaim, 100, 100), `second limit ${limits[1]}, at most ${perClaim}`);
      assert.ok(limits[1]! * big <= CLAIM_PAYLOAD_BUDGET_CHARS);

      // Small rows: the next pass of the same driver starts from the large claim, then goes back up.
      await db.query(`INSERT INTO "${db.schema}".outbox (topic, payload) SELECT 'small', jsonb_build_object('i', g) FROM generate_series(1, 300) g`);
      limits.length = 0;
      const second = await runOutboxPass(passFixture(db, { destinations: [destination], driver }));
      assert.equal(second.sent, 300);
      assert.ok(limits[0]! < 100, `the driver remembers the large rows: ${limits[0]}`);
      assert.equal(limits[1], 100, 'a claim of small rows brings the limit back to batchSize');
    });
  });
});

describe('claim size growth (outbox.maxBatchSize)', () => {
  it('doubles after a full claim at the full size up to the most, halves after one less than half full down to batchSize, else stays', () => {
    assert.equal(nextClaimSize(100, 100, 100, 100, 1000), 200);
    assert.equal(nextClaimSize(800, 800, 800, 100, 1000), 1000);
    assert.equal(nextClaimSize(1000, 1000, 1000, 100, 1000), 1000);
    assert.equal(nextClaimSize(400, 400, 150, 100, 1000), 200);
    assert.equal(nextClaimSize(200, 200, 0, 100, 1000), 100);
    assert.equal(nextClaimSize(100, 100, 0, 100, 1000), 100);
    assert.equal(nextClaimSize(400, 400, 200, 100, 1000), 400);
    // maxBatchSize = batchSize: a fixed size
    assert.equal(nextClaimSize(100, 100, 100, 100, 100), 100);
  });

  it('a bounded claim (payload, deadline) never grows the size, and one less than half full still shrinks it', () => {
    assert.equal(nextClaimSize(800, 671, 671, 100, 1000), 800, 'full at a bounded limit: no growth');
    assert.equal(nextClaimSize(800, 671, 5, 100, 1000), 335, 'held by few keys: halves from the limit it ran with');
    assert.equal(nextClaimSize(800, 120, 5, 100, 1000), 100);
  });

  it('grows only while the largest row seen times the grown size fits the payload budget', () => {
    const big = 512 * 1024;
    assert.equal(nextClaimSize(50, 50, 50, 50, 1000, big), CLAIM_PAYLOAD_BUDGET_CHARS / big);
    assert.equal(nextClaimSize(64, 64, 64, 50, 1000, big), 64, 'at the budget: stays');
    assert.equal(nextClaimSize(100, 100, 100, 100, 1000, 1000), 200);
  });

  it('a pipelined claim that came back short leaves the size; one that found nothing pauses pipelining, doubling up to the most', () => {
    const memory = claimMemoryOf({}, 100, 1000);
    const claim = (pipelined: boolean, limit: number, rows: number) => afterClaim(memory, { pipelined, limit, rows, base: 100, max: 1000, largestRowChars: 0 });
    claim(false, 100, 100);
    assert.equal(memory.size, 200);
    claim(true, 200, 0);
    assert.equal(memory.size, 200, 'the pass held the keys itself: no shrink');
    assert.equal(memory.pipelinePause, 1);
    assert.equal(mayPipeline(memory, 1, 2), false);
    assert.equal(mayPipeline(memory, 0, 2), true, 'with nothing in flight a claim is always sent');
    assert.equal(mayPipeline(memory, 1, 2, true), true, 'paused, but the wait for the batch ran out');
    assert.equal(mayPipeline(memory, 2, 2, true), false, 'never past the batches in flight');
    claim(false, 200, 200);
    assert.equal(memory.size, 400);
    assert.equal(memory.pipelinePause, 0);
    assert.equal(mayPipeline(memory, 1, 2), true);
    assert.equal(mayPipeline(memory, 2, 2), false, 'never past the batches in flight');
    const pauses: number[] = [];
    for (let i = 0; i < 7; i++) {
      claim(true, 400, 0);
      pauses.push(memory.pipelinePause);
      while (memory.pipelinePause > 0) claim(false, 400, 200);
    }
    assert.equal(MAX_PIPELINE_PAUSE, 16);
    assert.deepEqual(pauses, [2, 4, 8, 16, 16, 16, 16], 'doubling from 1 (set by the first empty one above) up to 16');
    claim(true, 400, 150);
    assert.equal(memory.size, 400, 'short but with rows, pipelined: no shrink');
    assert.equal(memory.pipelineBackoff, 1, 'a pipelined claim with rows resets the pause');
    claim(true, 400, 0);
    assert.equal(memory.pipelinePause, 1);
    claim(false, 400, 150);
    assert.equal(memory.size, 200, 'short with nothing in flight: halves as before');
  });

  it('rounds bounded limits to a few rungs', () => {
    assert.deepEqual([1000, 999, 800, 671, 400, 250, 100, 99, 50, 37, 1].map((l) => claimLimitRung(l, 100, 1000)), [1000, 800, 800, 400, 400, 200, 100, 50, 50, 25, 1]);
  });

  describe('in a pass against PostgreSQL', () => {
    const database = outboxDatabase({ batchSize: 50, maxBatchSize: 400 });

    it('grows keyless claims to maxBatchSize, and keeps claims of a table held by few keys at batchSize', async () => {
      const db = database();
      const recording = (limits: number[]) => recordingDriver(db, limits);
      await db.query(`DELETE FROM "${db.schema}".outbox`);
      await db.query(`INSERT INTO "${db.schema}".outbox (topic, payload) SELECT 'k', jsonb_build_object('i', g) FROM generate_series(1, 2000) g`);
      const limits: number[] = [];
      const destination = new RecordingDestination({ name: 'main', answer: () => 'sent' });
      const keyless = await runOutboxPass(passFixture(db, { destinations: [destination], driver: recording(limits) }));
      assert.equal(keyless.sent, 2000);
      assert.equal(limits[0], 50);
      assert.ok(limits.includes(400), `claims grew from batchSize to maxBatchSize: ${limits.join(', ')}`);
      assert.ok(limits.every((l) => [50, 100, 200, 400].includes(l)), `by doubling, never past maxBatchSize: ${limits.join(', ')}`);
      assert.ok(limits.indexOf(100) < limits.indexOf(200) && limits.indexOf(200) < limits.indexOf(400), limits.join(', '));

      // 2 keys, 1,000 rows each: a claim never gets more than 20 rows (10 per key, the default
      // outbox.rowsPerKey), so the size comes back down.
      await db.query(`INSERT INTO "${db.schema}".outbox (topic, key, payload) SELECT 'k', 'key-' || (g % 2), jsonb_build_object('i', g) FROM generate_series(1, 2000) g`);
      const keyed: number[] = [];
      const held = await runOutboxPass(passFixture(db, { destinations: [destination], driver: recording(keyed) }));
      assert.equal(held.sent, 2000);
      assert.ok(keyed.slice(-50).every((l) => l === 50), `back at batchSize while 2 keys bound the claims: ${keyed.slice(-10).join(', ')}`);
    });

    it('on a table whose keys one batch holds, pipelined claims pause instead of finding nothing at every other claim, and keep the size', async () => {
      const db = database();
      await db.query(`DELETE FROM "${db.schema}".outbox`);
      // 20 keys, 100 rows each: a claim of 200 or more takes 20 keys' 10 rows each (the default
      // outbox.rowsPerKey), and while that batch publishes no row of the table can move. Each call
      // takes 40 ms, so a batch is out far longer than a pipelined claim takes even on a loaded
      // machine: a claim that overlapped a batch settling (5 ms calls did, on a loaded CI run)
      // finds its rows and resets the pause, which is right, but not what this test counts.
      await db.query(`INSERT INTO "${db.schema}".outbox (topic, key, payload) SELECT 'k', 'key-' || (g % 20), jsonb_build_object('i', g) FROM generate_series(1, 2000) g`);
      const limits: number[] = [];
      const counts: number[] = [];
      const destination = new RecordingDestination({ name: 'main', answer: () => 'sent', delayMs: 40 });
      const summary = await runOutboxPass(passFixture(db, { destinations: [destination], driver: recordingDriver(db, limits, counts) }));
      assert.equal(summary.sent, 2000);
      const empty = counts.filter((n) => n === 0).length;
      // 50, 100, 200 and then 200 rows a claim: 13 claims with rows. Pipelining at every claim
      // would add an empty claim after each (12, and the last one that proves the table drained);
      // paused 1, 2, 4, 8 claims after each empty one, 4 and the last.
      assert.ok(counts.filter((n) => n > 0).length <= 14, `claims with rows: ${counts.join(', ')}`);
      assert.ok(empty <= 5, `at most 5 claims found nothing: ${counts.join(', ')}`);
      // The last claim found the table drained, with nothing in flight: that one halves the size.
      assert.ok(limits.indexOf(400) !== -1 && limits.slice(limits.indexOf(400), -1).every((l) => l === 400), `the size grew to 400 and stayed: ${limits.join(', ')}`);
    });
  });
});

describe('claim size near the deadline', () => {
  it('is batchSize until a call was timed, never below batchSize, else what the time left can publish with the call slots left', () => {
    assert.equal(rowsPublishableBefore(5_000, 0, 8, 100, 0, 10), 100);
    // one batch already publishing: half the slots
    assert.equal(rowsPublishableBefore(2_000, 50, 8, 100, 1, 10), 800);
    // 50 ms calls, 8 at once, 10 rows each: 2 s left is 20 rounds at twice the slowest call
    assert.equal(rowsPublishableBefore(2_000, 50, 8, 100, 0, 10), 1_600);
    assert.equal(rowsPublishableBefore(500, 50, 8, 100, 0, 10), 400);
    assert.equal(rowsPublishableBefore(50, 50, 8, 100, 0, 10), 100);
    assert.equal(rowsPublishableBefore(0, 50, 8, 100, 0, 10), 100);
    // a destination that takes 2 rows a call publishes a fifth of that in the same time
    assert.equal(rowsPublishableBefore(2_000, 50, 8, 100, 0, 2), 320);
  });

  it('counts the rows of a call of the destination that takes the fewest', () => {
    assert.equal(rowsPerCallOf([{ maxBatchSize: 10 }, { maxBatchSize: 10 }]), 10);
    assert.equal(rowsPerCallOf([{ maxBatchSize: 10 }, { maxBatchSize: 3 }]), 3);
    assert.equal(rowsPerCallOf([]), 1);
  });

  describe('in a pass against PostgreSQL', () => {
    const database = outboxDatabase({ batchSize: 50, maxBatchSize: 1000 });

    it('a grown claim is cut to what the time left can publish: the pass ends at its deadline with no row abandoned', async () => {
      const db = database();
      await db.query(`INSERT INTO "${db.schema}".outbox (topic, payload) SELECT 'k', jsonb_build_object('i', g) FROM generate_series(1, 20000) g`);
      const limits: number[] = [];
      const destination = new RecordingDestination({ name: 'main', answer: () => 'sent', delayMs: 40 });
      const fixture = passFixture(db, { destinations: [destination], driver: recordingDriver(db, limits), timeoutMs: 2500, mode: 'deadline', outbox: { concurrency: 2 } });
      const summary = await runOutboxPass(fixture);
      assert.equal(summary.stoppedBecause, 'deadline');
      assert.ok(Math.max(...limits) > 50, `claims grew: ${limits.join(', ')}`);
      assert.ok(limits.at(-1)! < Math.max(...limits), `the last claims were cut to the time left: ${limits.join(', ')}`);
      assert.equal(summary.abandoned, 0, `every claimed row was settled before the deadline: ${JSON.stringify(summary)}`);
    });
  });
});
