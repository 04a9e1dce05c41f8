import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import { OLDEST_WINDOW } from '../../lib/db/postgres/claim-text.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';

const LIMIT = 2;
const LEASE = 60_000;
/**
 * Rows of aggregate `a` held behind its head in flight: the whole window (of pending rows for the
 * relay; of open rows, the head in flight among them, for pull), so the claim looks past it. Past
 * its window a claim reads a bounded sweep of the due rows after the window and a bounded turn of
 * the open aggregates (`inboxClaimBound`), and takes the rows it found in claim order: here its
 * sweep starts at the tied rows, so the tie-break decides which it takes.
 */
const blocked = (consumption: 'push' | 'pull') => LIMIT * OLDEST_WINDOW - (consumption === 'pull' ? 1 : 0);

interface Spec {
  key: string;
  aggregateId?: string | null;
  /** `scheduled_at` (and, unless `created`, `created_at`) in ms after a base an hour ago. */
  at: number;
  /** `created_at` in ms after the base. */
  created?: number;
  id?: string;
  attempt?: number;
}

/** Ten ids whose order is the reverse of the order the rows are received in. */
const reversedIds = Array.from({ length: 10 }, (_, n) => `00000000-0000-4000-8000-${String(9 - n).padStart(12, '0')}`);

/**
 * Claim order breaks ties: relay rows by `scheduled_at, sequence`, pull rows by `scheduled_at,
 * created_at, id`. Each case offers more rows than a claim takes (several windows' worth), all
 * due, and checks which ones it takes — on every path of the claim: due retries, the window of
 * the oldest rows, and past the window the heads and the rows without aggregate. Rows are
 * received (increasing `sequence`) in an order that differs from the order each tie-break column
 * gives, so reversing a column or swapping two of them takes other rows.
 */
for (const consumption of ['push', 'pull'] as const) {
  const order = consumption === 'push' ? 'scheduled_at, sequence' : 'scheduled_at, created_at, id';
  describe(`${consumption === 'push' ? 'relay' : 'pull'} claims break ties by ${order} (PostgreSQL)`, () => {
    let db: TestDatabase;
    before(async () => {
      db = await createTestDatabase();
    });
    after(async () => db.drop());
    // A driver of its own per test: the position a claim reads on from past its window is the
    // driver's, and one left by the rows of another test would start elsewhere.
    let driver: TestDatabase['driver'];
    beforeEach(async () => {
      await db.query(`TRUNCATE "${db.schema}".inbox`);
      driver = db.newDriver();
    });

    /** Receives the rows in the given order (increasing `sequence`). */
    const receive = (specs: Spec[]) =>
      db.query(
        `INSERT INTO "${db.schema}".inbox (id, source, idempotency_key, aggregate_id, payload, consumption, attempt, scheduled_at, created_at)
         SELECT COALESCE(s.id, gen_random_uuid()), 'shop', s.key, s.aggregate_id, '{}', $1, s.attempt,
                b.base + s.at * interval '1 millisecond', b.base + s.created * interval '1 millisecond'
           FROM unnest($2::text[], $3::text[], $4::double precision[], $5::double precision[], $6::uuid[], $7::int[]) WITH ORDINALITY
                AS s(key, aggregate_id, at, created, id, attempt, ord),
                (SELECT date_trunc('second', clock_timestamp()) - interval '1 hour' AS base) b
          ORDER BY s.ord`,
        [
          consumption,
          specs.map((s) => s.key),
          specs.map((s) => s.aggregateId ?? null),
          specs.map((s) => s.at),
          specs.map((s) => s.created ?? s.at),
          specs.map((s) => s.id ?? null),
          specs.map((s) => s.attempt ?? 0),
        ],
      );
    const claim = async (limit = LIMIT) => {
      const rows =
        consumption === 'push'
          ? await driver.inboxClaimPushMany({ limit, leaseMs: LEASE })
          : await driver.pullClaimMany({ source: 'shop', limit, leaseMs: LEASE });
      return rows.map((r) => r.idempotencyKey).sort();
    };
    /** Aggregate `a`: its head (claimed here, in flight) and `blocked` rows behind it, older than every other row. */
    const hotAggregateInFlight = async () => {
      await receive(Array.from({ length: blocked(consumption) + 1 }, (_, n) => ({ key: `a-${n}`, aggregateId: 'a', at: n - 1000 })));
      assert.deepEqual(await claim(1), ['a-0']);
    };
    /**
     * Ten rows (made by `row(n)`) received in the order n = 0…9 with the tie-break columns giving
     * another order; returns the keys of the `LIMIT` rows the order puts first.
     */
    const tied = async (row: (n: number) => Omit<Spec, 'at'>): Promise<string[]> => {
      if (consumption === 'push') {
        // equal scheduled_at: sequence decides (rows 0 and 1); but an earlier scheduled_at goes
        // first whatever the sequence (row 9, received last)
        await receive(Array.from({ length: 10 }, (_, n) => ({ ...row(n), at: n === 9 ? -1 : 0 })));
        return [row(0).key, row(9).key].sort();
      }
      // equal scheduled_at: created_at decides (rows 0…7 the earliest, more than the window
      // holds; rows 8, 9 later, in reverse of sequence); equal created_at too: id decides, in
      // reverse of sequence (rows 7, 6)
      await receive(
        Array.from({ length: 10 }, (_, n) => ({
          ...row(n),
          at: 0,
          created: n <= 7 ? 0 : 100 - n,
          id: reversedIds[n]!,
        })),
      );
      return [row(7).key, row(6).key].sort();
    };

    it('in the window of the oldest rows', async () => {
      const expected = await tied((n) => ({ key: `k-${n}`, aggregateId: n % 2 === 0 ? null : `agg-${n}` }));
      assert.deepEqual(await claim(), expected);
    });

    it('among due retries', async () => {
      const expected = await tied((n) => ({ key: `r-${n}`, aggregateId: n % 2 === 0 ? null : `agg-${n}`, attempt: 1 }));
      assert.deepEqual(await claim(), expected);
    });

    it('past the window: heads of aggregates and rows without aggregate in one order', async () => {
      await hotAggregateInFlight();
      const expected = await tied((n) => ({ key: `h-${n}`, aggregateId: n % 2 === 0 ? null : `agg-${n}` }));
      assert.deepEqual(await claim(), expected);
    });

    it('past the window: heads of aggregates', async () => {
      await hotAggregateInFlight();
      const expected = await tied((n) => ({ key: `h-${n}`, aggregateId: `agg-${n}` }));
      assert.deepEqual(await claim(), expected);
    });

    it('past the window: rows without aggregate', async () => {
      await hotAggregateInFlight();
      const expected = await tied((n) => ({ key: `n-${n}`, aggregateId: null }));
      assert.deepEqual(await claim(), expected);
    });
  });
}
