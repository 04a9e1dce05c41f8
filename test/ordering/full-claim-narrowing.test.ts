/**
 * The full claim narrows its window and its sweep to the first row of each key before the head
 * test (`firstOfKeyIn`): a change of cost, never of result. On random tables — keys NULL, '' and
 * named; pending, processing and sent rows; retries; rows due later with lower sequences; ties in
 * `scheduled_at` — the statement as sent and the same statement without the narrowing claim the
 * same rows from the same table and answer the same sweep position, window count and `took_all`.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { outboxClaimStatements } from '../../lib/db/postgres/outbox-queries.ts';
import { Prng } from '../faults/prng.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';

const LEASE = 60_000;

/** The full claim text without the narrowing: each `firstOfKeyIn(rows)` replaced by `rows`. */
function withoutNarrowing(text: string): string {
  const narrowing =
    /\(SELECT r\.ctid, r\.scheduled_at, r\.sequence FROM \(\s*SELECT f\.ctid, f\.scheduled_at, f\.sequence, f\.key, min\(f\.sequence\) OVER \(PARTITION BY f\.key\) AS key_first\s*FROM ([\s\S]*?) f\) r\s*WHERE r\.key IS NULL OR r\.key = '' OR r\.sequence = r\.key_first\)/g;
  const replaced = text.replace(narrowing, '$1');
  assert.equal(text.match(narrowing)?.length, 2, 'the window and the sweep are narrowed');
  assert.doesNotMatch(replaced, /PARTITION BY f\.key/, 'no narrowing left');
  return replaced;
}

describe('outbox full claim: narrowing the window by key changes no claim (PostgreSQL)', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase();
  });
  after(async () => db.drop());

  it('the same rows, sweep position, window count and took_all on 60 random tables, batches of 2 to 5, one and three rows per key', async () => {
    const t = `"${db.schema}".outbox`;
    const client = await db.pool.connect();
    try {
      let compared = 0;
      let claimedSomething = 0;
      for (let seed = 1; seed <= 60; seed++) {
        // Seeded (mulberry32), so a failure names its seed.
        const next = new Prng(seed).float;
        const pick = <T>(xs: readonly T[]): T => xs[Math.floor(next() * xs.length)]!;
        const limit = 2 + Math.floor(next() * 4);
        const rowsPerKey = pick([1, 3]);
        await client.query(`TRUNCATE ${t}`);
        const rows = 20 + Math.floor(next() * 60);
        // A key holds one processing row at most (the key holder's unique index).
        const held = new Set<string>();
        for (let i = 0; i < rows; i++) {
          const key = pick([null, '', 'a', 'a', 'b', 'b', 'c', 'd', 'e']);
          const dueIn = pick([-60, -60, -30, -30, -10, 0, 120]);
          let state = pick(['pending', 'pending', 'pending', 'pending', 'processing', 'sent']);
          if (state === 'processing' && key !== null && key !== '') {
            if (held.has(key)) state = 'pending';
            held.add(key);
          }
          const attempt = state === 'pending' && next() < 0.15 ? 1 : 0;
          await client.query(
            `INSERT INTO ${t} (topic, key, payload, state, attempt, scheduled_at, claim_token, lease_expires_at)
             VALUES ('t', $1, '{}', $2::varchar, $3, now() + $4 * interval '1 second', CASE WHEN $2::varchar = 'processing' THEN gen_random_uuid() END,
                     CASE WHEN $2::varchar = 'processing' THEN now() + interval '1 hour' END)`,
            [key, state, attempt, dueIn],
          );
        }
        const { rows: positions } = await client.query<{ at: string; sequence: string }>(
          `SELECT (extract(epoch FROM scheduled_at) * 1000000)::bigint::text AS at, sequence::text AS sequence FROM ${t} ORDER BY random() LIMIT 1`,
        );
        const sweep = next() < 0.5 || positions.length === 0 ? [null, null, null, null] : [positions[0]!.at, positions[0]!.sequence, null, pick([null, 'a', 'b', 'c'])];
        const narrowed = outboxClaimStatements(db.driver.ctx.names, limit, rowsPerKey).full.text;
        const answers: string[] = [];
        for (const text of [narrowed, withoutNarrowing(narrowed)]) {
          await client.query('BEGIN');
          try {
            const { rows: claimed } = await client.query<Record<string, unknown>>(text, [LEASE, ...sweep]);
            const ids = claimed.flatMap((r) => (r.id === null ? [] : [String(r.id)])).sort();
            const first = claimed[0] ?? {};
            answers.push(JSON.stringify({ ids, window: first.window_rows, at: first.sweep_at_us, sequence: first.sweep_sequence, horizon: first.sweep_horizon_us === null, key: first.sweep_key, tookAll: first.took_all ?? null }));
          } finally {
            await client.query('ROLLBACK');
          }
        }
        assert.equal(answers[1], answers[0], `seed ${seed}: limit ${limit}, ${rowsPerKey} rows per key, sweep ${JSON.stringify(sweep)}`);
        compared++;
        if (!answers[0]!.includes('"ids":[]')) claimedSomething++;
      }
      assert.equal(compared, 60);
      assert.ok(claimedSomething >= 30, `claims that took rows: ${claimedSomething} of 60`);
    } finally {
      client.release();
    }
  });
});
