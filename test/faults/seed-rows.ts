/**
 * The messages of a fault run (default split 60 / 25 / 15 %), inserted in bulk (one statement per table): outbox rows with keys
 * (some keyless, 0.5 % poison), push inbox rows of source `shop` in aggregates (some without),
 * and pull rows of source `jobs` (1 % poison). Insertion order is `sequence` order.
 */
import type { TestDatabase } from '../helpers/database.ts';
import type { Prng } from './prng.ts';

/** Inserts `messages` rows, `shares.push` and `shares.pull` of them inbox rows, the rest outbox rows; returns the counts. */
export async function seedRows(db: TestDatabase, messages: number, prng: Prng, shares: { push: number; pull: number }): Promise<{ outbox: number; push: number; pull: number }> {
  const s = `"${db.schema}"`;
  const push = Math.floor(messages * shares.push);
  const pull = Math.floor(messages * shares.pull);
  const outbox = messages - push - pull;
  const chunk = 20_000;
  for (let start = 0; start < outbox; start += chunk) {
    const n = Math.min(chunk, outbox - start);
    const keys: Array<string | null> = [];
    const payloads: string[] = [];
    for (let i = 0; i < n; i++) {
      keys.push(prng.chance(0.2) ? null : `k${prng.int(0, Math.max(1, Math.floor(outbox / 25)))}`);
      payloads.push(JSON.stringify(prng.chance(0.005) ? { seq: start + i, poison: true } : { seq: start + i }));
    }
    await db.pool.query(
      `INSERT INTO ${s}.outbox (topic, key, payload, max_attempts)
       SELECT 'orders.created', k, p::jsonb, 10 FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS u(k, p, ord) ORDER BY ord`,
      [keys, payloads],
    );
  }
  for (const [source, count, consumption, prefix, poison] of [
    ['shop', push, 'push', 'a', 0],
    ['jobs', pull, 'pull', 'j', 0.01],
  ] as const) {
    for (let start = 0; start < count; start += chunk) {
      const n = Math.min(chunk, count - start);
      const aggregates: Array<string | null> = [];
      const payloads: string[] = [];
      for (let i = 0; i < n; i++) {
        aggregates.push(prng.chance(0.2) ? null : `${prefix}${prng.int(0, Math.max(1, Math.floor(count / 20)))}`);
        payloads.push(JSON.stringify(prng.chance(poison) ? { seq: start + i, poison: true } : { seq: start + i }));
      }
      await db.pool.query(
        `INSERT INTO ${s}.inbox (source, idempotency_key, aggregate_id, event_type, payload, consumption, created_at, scheduled_at)
         SELECT $1, $2 || ord, a, 'created', p::jsonb, $3,
                statement_timestamp() + ord * interval '1 microsecond', statement_timestamp() + ord * interval '1 microsecond'
           FROM unnest($4::text[], $5::text[]) WITH ORDINALITY AS u(a, p, ord) ORDER BY ord`,
        [source, `${source}-${start}-`, consumption, aggregates, payloads],
      );
    }
  }
  // Fresh bulk loads have no statistics yet; without them the claim statements plan badly.
  await db.pool.query(`ANALYZE ${s}.outbox`);
  await db.pool.query(`ANALYZE ${s}.inbox`);
  return { outbox, push, pull };
}
