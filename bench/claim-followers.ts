/**
 * `npx tsx bench/claim-followers.ts`: the PostgreSQL outbox claim of 1,000 with and without the
 * rows after each head (`outbox.rowsPerKey` 10 and 1), on 20,000 rows over 1,000 keys of which
 * 500 are held in flight, so the heads fill half the claim and the followers the rest. Each claim
 * runs in a transaction that is rolled back (every run sees the same rows); the last of 4 runs is
 * reported, then the plan of the full claim with followers under EXPLAIN (ANALYZE, BUFFERS).
 * Uses DATABASE_URL (a test schema is created and dropped).
 */
import { outboxClaimStatements } from '../lib/db/postgres/outbox-queries.ts';
import { pgNames } from '../lib/db/postgres/names.ts';
import { createTestDatabase } from '../test/helpers/database.ts';
import { dropSchemasOnSignal } from '../test/helpers/drop-on-signal.ts';

dropSchemasOnSignal();
const db = await createTestDatabase({});
try {
  const table = `"${db.schema}".outbox`;
  await db.query(`INSERT INTO ${table} (topic, key, payload) SELECT 't', 'k' || (g % 1000), jsonb_build_object('i', g) FROM generate_series(1, 20000) g`);
  await db.query(`ANALYZE ${table}`);
  const held = await db.driver.outboxClaimMany({ limit: 500, leaseMs: 600_000, rowsPerKey: 1 });
  console.log(`${held.length} keys held in flight`);
  const names = pgNames(db.schema, db.config.tables);
  for (const rowsPerKey of [1, 10]) {
    const statements = outboxClaimStatements(names, 1000, rowsPerKey);
    const runs: Array<[string, string, unknown[]]> = [
      ['window', statements.window.text, [600_000]],
      ['full', statements.full.text, [600_000, null, null, null, null]],
    ];
    for (const [label, text, params] of runs) {
      const client = await db.pool.connect();
      try {
        let last = '';
        for (let i = 0; i < 4; i++) {
          await client.query('BEGIN');
          const started = performance.now();
          const result = await client.query(text, params);
          last = `${result.rowCount} rows, ${(performance.now() - started).toFixed(1)} ms`;
          await client.query('ROLLBACK');
        }
        console.log(`rowsPerKey ${rowsPerKey}, ${label} claim: ${last}`);
        if (rowsPerKey === 10 && label === 'full') {
          await client.query('BEGIN');
          const plan = await client.query<Record<string, string>>(`EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) ${text}`, params);
          await client.query('ROLLBACK');
          console.log(plan.rows.map((row) => row['QUERY PLAN']).join('\n'));
        }
      } finally {
        client.release();
      }
    }
  }
} finally {
  await db.drop();
}
