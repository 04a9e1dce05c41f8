/**
 * A claim of `outbox.maxBatchSize` rows that took every row that could move leaves nothing to the
 * next claim — the pass's own pipelined claim or another pass's, which comes back empty after
 * reading the window for nothing. The PostgreSQL window claim reads one row past its batch and
 * says whether it took them all (`exhausted`); the pass then caps its claims at half of
 * `maxBatchSize` (`learnCeiling`), and raises the cap again after full claims that left rows.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { OutboxPassDriver } from '../../lib/outbox/pass-context.ts';
import { afterClaim, CEILING_RECOVERY, claimMemoryOf, learnCeiling } from '../../lib/outbox/claim-size.ts';
import { runOutboxPass } from '../../lib/outbox/outbox-pass.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { delegatingPassDriver, passFixture } from '../helpers/outbox-pass-fixture.ts';
import { RecordingDestination } from '../helpers/recording-destination.ts';

describe('claim ceiling (learnCeiling)', () => {
  it('halves after a full claim of the most that took every row, and only then', () => {
    const memory = claimMemoryOf({}, 100, 1000);
    memory.size = 1000;
    learnCeiling(memory, { limit: 1000, rows: 1000, exhausted: false, base: 100, max: 1000 });
    assert.equal(memory.ceiling, 1000, 'a full claim that left rows');
    learnCeiling(memory, { limit: 1000, rows: 1000, exhausted: undefined, base: 100, max: 1000 });
    assert.equal(memory.ceiling, 1000, 'the driver cannot tell');
    learnCeiling(memory, { limit: 1000, rows: 600, exhausted: true, base: 100, max: 1000 });
    assert.equal(memory.ceiling, 1000, 'not full: the size shrinks on its own (nextClaimSize)');
    learnCeiling(memory, { limit: 500, rows: 500, exhausted: true, base: 100, max: 1000 });
    assert.equal(memory.ceiling, 1000, 'below the most: a claim sharing the rows with another');
    learnCeiling(memory, { limit: 1000, rows: 1000, exhausted: true, base: 100, max: 1000 });
    assert.equal(memory.ceiling, 500);
    assert.equal(memory.size, 500);
    learnCeiling(memory, { limit: 500, rows: 500, exhausted: true, base: 100, max: 1000 });
    assert.equal(memory.ceiling, 500, 'never below half the most');
  });

  it('leaves a claim of a few keys\' runs of rows alone (fewer heads than half the claim)', () => {
    const memory = claimMemoryOf({}, 100, 1000);
    memory.size = 1000;
    learnCeiling(memory, { limit: 1000, rows: 1000, exhausted: true, heads: 100, base: 100, max: 1000 });
    assert.equal(memory.ceiling, 1000, '100 keys, 10 rows each');
    learnCeiling(memory, { limit: 1000, rows: 1000, exhausted: true, heads: 500, base: 100, max: 1000 });
    assert.equal(memory.ceiling, 500, '500 keys, two rows each');
  });

  it('never below batchSize, and not at all when batchSize is the most', () => {
    const small = claimMemoryOf({}, 400, 600);
    learnCeiling(small, { limit: 600, rows: 600, exhausted: true, base: 400, max: 600 });
    assert.equal(small.ceiling, 400);
    const fixed = claimMemoryOf({}, 100, 100);
    learnCeiling(fixed, { limit: 100, rows: 100, exhausted: true, base: 100, max: 100 });
    assert.equal(fixed.ceiling, 100);
  });

  it(`rises again after ${CEILING_RECOVERY} full claims in a row at the ceiling that left rows`, () => {
    const memory = claimMemoryOf({}, 100, 1000);
    const claim = (limit: number, rows: number, exhausted: boolean) => afterClaim(memory, { pipelined: false, limit, rows, exhausted, base: 100, max: 1000, largestRowChars: 0 });
    memory.size = 1000;
    claim(1000, 1000, true);
    assert.equal(memory.ceiling, 500);
    for (let i = 0; i < CEILING_RECOVERY - 1; i++) claim(500, 500, false);
    assert.equal(memory.ceiling, 500);
    assert.equal(memory.size, 500, 'the size does not grow past the ceiling');
    claim(500, 500, true);
    for (let i = 0; i < CEILING_RECOVERY - 1; i++) claim(500, 500, false);
    assert.equal(memory.ceiling, 500, 'a claim that took every row started the count again');
    claim(500, 300, false);
    for (let i = 0; i < CEILING_RECOVERY - 1; i++) claim(500, 500, false);
    assert.equal(memory.ceiling, 500, 'so did one that was not full');
    claim(500, 500, false);
    assert.equal(memory.ceiling, 1000);
    claim(500, 500, false);
    assert.equal(memory.size, 1000, 'and the size grows to the most again');
  });

  it('is kept per driver, across passes, within the configured sizes', () => {
    const driver = {};
    const memory = claimMemoryOf(driver, 100, 1000);
    memory.size = 1000;
    learnCeiling(memory, { limit: 1000, rows: 1000, exhausted: true, base: 100, max: 1000 });
    assert.equal(claimMemoryOf(driver, 100, 1000).ceiling, 500);
    assert.equal(claimMemoryOf(driver, 100, 300).ceiling, 300, 'a lower maxBatchSize takes effect');
    assert.equal(claimMemoryOf(driver, 400, 1000).size, 400);
  });
});

describe('claim ceiling against PostgreSQL', () => {
  let db: TestDatabase | undefined;
  before(async () => {
    db = await createTestDatabase({
      destinations: { main: { type: 'sqs', queueUrl: 'http://localhost:1/000000000000/main' } },
      outbox: { routes: [{ topicPattern: '**', destination: 'main' }], batchSize: 10, maxBatchSize: 40, rowsPerKey: 1 },
    });
  });
  after(async () => db?.drop());

  /** `keys` keys of `perKey` rows each, in rounds (the oldest rows are every key's head). */
  async function seed(keys: number, perKey: number): Promise<void> {
    await db!.query(`DELETE FROM "${db!.schema}".outbox`);
    await db!.query(
      `INSERT INTO "${db!.schema}".outbox (topic, key, payload)
       SELECT 't', 'k' || k, jsonb_build_object('k', k, 'r', r) FROM generate_series(1, $2::int) r, generate_series(1, $1::int) k ORDER BY r, k`,
      [keys, perKey],
    );
  }

  it('the window claim says whether it took every row that could move', async () => {
    await seed(40, 3);
    const all = await db!.driver.outboxClaimMany({ limit: 40, leaseMs: 60_000, rowsPerKey: 1 });
    assert.equal(all.length, 40);
    assert.equal(all.exhausted, true, 'the head of every key: nothing left');

    await seed(41, 3);
    const most = await db!.driver.outboxClaimMany({ limit: 40, leaseMs: 60_000, rowsPerKey: 1 });
    assert.equal(most.length, 40);
    assert.equal(most.exhausted, false, 'one key left for the next claim');
    const last = await db!.driver.outboxClaimMany({ limit: 40, leaseMs: 60_000, rowsPerKey: 1 });
    assert.equal(last.length, 1, 'the row past the batch was read, not claimed');

    await seed(0, 0);
    await db!.query(`INSERT INTO "${db!.schema}".outbox (topic, payload) SELECT 't', jsonb_build_object('i', g) FROM generate_series(1, 100) g`);
    const keyless = await db!.driver.outboxClaimMany({ limit: 40, leaseMs: 60_000, rowsPerKey: 1 });
    assert.equal(keyless.length, 40);
    assert.equal(keyless.exhausted, false);
  });

  it('so does the full claim, for the heads past a window that a key in flight held', async () => {
    // A database of its own: the full claim's turn of the open keys starts at the first key.
    const own = await createTestDatabase({
      destinations: { main: { type: 'sqs', queueUrl: 'http://localhost:1/000000000000/main' } },
      outbox: { routes: [{ topicPattern: '**', destination: 'main' }], batchSize: 10, rowsPerKey: 1 },
    });
    try {
      // 100 rows of key h, then the single rows of 20 other keys: with h in flight, the window of
      // the oldest 3 × 10 rows holds no row that can move, and the full claim reads the open keys.
      await own.query(`INSERT INTO "${own.schema}".outbox (topic, key, payload) SELECT 't', 'h', jsonb_build_object('r', r) FROM generate_series(1, 100) r ORDER BY r`);
      await own.query(`INSERT INTO "${own.schema}".outbox (topic, key, payload) SELECT 't', 'k' || k, jsonb_build_object('k', k) FROM generate_series(1, 20) k ORDER BY k`);
      const claims: Array<{ rows: number; exhausted: boolean | undefined; h: boolean }> = [];
      for (;;) {
        const rows = await own.driver.outboxClaimMany({ limit: 10, leaseMs: 60_000, rowsPerKey: 1 });
        if (rows.length === 0) break;
        claims.push({ rows: rows.length, exhausted: rows.exhausted, h: rows.some((row) => row.key === 'h') });
        assert.ok(claims.length < 10, 'the 21 heads are claimed in a few claims');
      }
      const seen = JSON.stringify(claims);
      assert.ok(claims[0]!.h, `h first: ${seen}`);
      assert.equal(claims.reduce((n, c) => n + c.rows, 0), 21, seen);
      // Every claim but the last left heads that could move: none may say it took them all.
      for (const claim of claims.slice(0, -1)) assert.notEqual(claim.exhausted, true, seen);

      // The heads of 9 keys besides h in flight: a full claim of 10 (whose turn reads 10 open
      // keys, h among them) takes them all.
      await own.query(`DELETE FROM "${own.schema}".outbox WHERE key <> 'h'`);
      await own.query(`INSERT INTO "${own.schema}".outbox (topic, key, payload) SELECT 't', 'j' || k, jsonb_build_object('k', k) FROM generate_series(1, 9) k ORDER BY k`);
      let all = await own.driver.outboxClaimMany({ limit: 10, leaseMs: 60_000, rowsPerKey: 1 });
      // A turn of the keys that started past the first key (where the last claim stopped) cannot tell.
      if (all.length < 9) all = await own.driver.outboxClaimMany({ limit: 10, leaseMs: 60_000, rowsPerKey: 1 });
      assert.equal(all.length, 9);
      assert.equal(all.exhausted, true, 'every head that could move was taken');
    } finally {
      await own.drop();
    }
  });

  it('a pass whose full claim took every key claims half as many after it', async () => {
    await seed(40, 12);
    const limits: number[][] = [[]];
    const counts: number[][] = [[]];
    const drivers: OutboxPassDriver[] = [0].map((i) =>
      delegatingPassDriver(db!.driver, {
        outboxClaimMany: async (p) => {
          limits[i]!.push(p.limit);
          const rows = await db!.driver.outboxClaimMany(p);
          counts[i]!.push(rows.length);
          return rows;
        },
      }),
    );
    // One pass alone: claims grow 10, 20, 40; the claim of 40 takes every key's head.
    const destination = new RecordingDestination({ name: 'main', answer: () => 'sent' });
    const firstPass = await runOutboxPass(passFixture(db!, { destinations: [destination], driver: drivers[0]! }));
    assert.equal(firstPass.sent, 480);
    const at = limits[0]!.findIndex((limit, i) => limit === 40 && counts[0]![i] === 40);
    assert.ok(at >= 0, `a full claim of 40: ${limits[0]!.join(',')}`);
    assert.equal(limits[0]![at + 1], 20, `the claim after it: ${limits[0]!.join(',')}`);

  });
});
