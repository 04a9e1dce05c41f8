/**
 * Seeding of the inbox for the relay and pull benches: `count` rows of one source in receive
 * order, spread round-robin over `aggregates` aggregates (0: no aggregate), then analysed.
 */
import type pg from 'pg';

/** Inserts the rows into `table` (already quoted) in one statement and runs `VACUUM ANALYZE`. */
export async function seedInbox(admin: pg.Client, table: string, p: { source: string; count: number; aggregates: number; consumption: 'push' | 'pull' }): Promise<void> {
  await admin.query(
    `INSERT INTO ${table} (source, idempotency_key, aggregate_id, event_type, payload, consumption)
     SELECT $2, 'k' || g, CASE WHEN $3::int > 0 THEN 'a' || (g % $3::int) END, 'created', jsonb_build_object('i', g, 'body', 'x'), $4
       FROM generate_series(1, $1::int) AS g ORDER BY g`,
    [p.count, p.source, p.aggregates, p.consumption],
  );
  await admin.query(`VACUUM ANALYZE ${table}`);
}
