/**
 * `npx tsx bench/claim-open-keys.ts [--keys 1000,10000,50000] [--runs 15]`: the PostgreSQL outbox
 * claim of 100 at many open keys, its window blocked and not, in the same run.
 *
 * For each number of open keys (two rows each, so every key has a row waiting behind its head):
 * - unblocked: the window claim on that table (the window fills the batch);
 * - blocked: the full claim on the same table with a hot key in front: its head in flight and
 *   1,000 rows behind it, older than every other row, so the window gives nothing and the claim
 *   must look past it.
 * Each claim runs in a transaction that is rolled back (every run sees the same rows), with the
 * plan settings of the claim functions; the median of `--runs` runs is reported, with the shared
 * buffers of one run under EXPLAIN (ANALYZE, BUFFERS). Times are noisy on a shared machine: compare
 * the columns of one run.
 */
import { parseArgs } from 'node:util';
import pg from 'pg';
import { parseConfig } from '../lib/config/load-config.ts';
import { PostgresDriver } from '../lib/db/postgres/postgres-driver.ts';
import { quoteIdent } from '../lib/db/postgres/names.ts';
import { outboxClaimStatements } from '../lib/db/postgres/outbox-queries.ts';
import { CLAIM_FUNCTION_SETTINGS, type ClaimStatement } from '../lib/db/postgres/claim-functions.ts';
import { startEmbeddedDatabase } from '../lib/local/embedded-database.ts';
import { createdSchema, dropSchemasOnSignal } from '../test/helpers/drop-on-signal.ts';

const LIMIT = 100;
const HOT_BACKLOG = 1_000;

async function measure(client: pg.Client, statement: ClaimStatement, runs: number): Promise<{ ms: number; buffers: number; claimed: number }> {
  const values = [60_000, ...statement.params.slice(1).map(() => null)];
  const once = async (text: string) => {
    await client.query('BEGIN');
    try {
      for (const setting of CLAIM_FUNCTION_SETTINGS) await client.query(`SET LOCAL ${setting.replace('=', ' = ')}`);
      const started = performance.now();
      const result = await client.query(text, values);
      return { ms: performance.now() - started, result };
    } finally {
      await client.query('ROLLBACK');
    }
  };
  for (let i = 0; i < 3; i++) await once(statement.text);
  const times: number[] = [];
  let claimed = 0;
  for (let i = 0; i < runs; i++) {
    const { ms, result } = await once(statement.text);
    times.push(ms);
    claimed = result.rows.filter((r: { id: string | null }) => r.id !== null).length;
  }
  times.sort((a, b) => a - b);
  const { result } = await once(`EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${statement.text}`);
  const plan = (result.rows[0] as { 'QUERY PLAN': Array<{ Plan: Record<string, number> }> })['QUERY PLAN'][0]!.Plan;
  return { ms: Math.round(times[Math.floor(times.length / 2)]! * 10) / 10, buffers: (plan['Shared Hit Blocks'] ?? 0) + (plan['Shared Read Blocks'] ?? 0), claimed };
}

async function main(): Promise<void> {
  dropSchemasOnSignal();
  const { values } = parseArgs({ options: { keys: { type: 'string', default: '1000,10000,50000' }, runs: { type: 'string', default: '15' } } });
  const embedded = process.env.DATABASE_URL ? undefined : await startEmbeddedDatabase();
  const url = process.env.DATABASE_URL ?? embedded!.url;
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    for (const keys of values.keys.split(',').map(Number)) {
      const schema = `qb_open_keys_${Math.random().toString(36).slice(2, 10)}`;
      const forget = createdSchema(url, schema);
      const config = parseConfig({ database: { url, schema } });
      const driver = new PostgresDriver({ config, url });
      try {
        await driver.migrate();
        const t = `${quoteIdent(schema)}.${quoteIdent('outbox')}`;
        const statements = outboxClaimStatements(driver.ctx.names, LIMIT);
        await client.query(`INSERT INTO ${t} (topic, key, payload) SELECT 't', 'k' || (g % $1), '{}' FROM generate_series(0, $1 * 2 - 1) g ORDER BY g`, [keys]);
        await client.query(`VACUUM ANALYZE ${t}`);
        const unblocked = await measure(client, statements.window, Number(values.runs));
        await client.query(
          `INSERT INTO ${t} (topic, key, payload, scheduled_at) SELECT 't', 'hot', '{}', now() - interval '1 hour' FROM generate_series(0, $1::int)`,
          [HOT_BACKLOG],
        );
        await client.query(
          `UPDATE ${t} SET state = 'processing', claim_token = gen_random_uuid(), lease_expires_at = now() + interval '1 hour'
            WHERE id = (SELECT id FROM ${t} WHERE key = 'hot' ORDER BY sequence LIMIT 1)`,
        );
        await client.query(`VACUUM ANALYZE ${t}`);
        const blocked = await measure(client, statements.full, Number(values.runs));
        process.stdout.write(`${JSON.stringify({ openKeys: keys, unblocked, blocked, ratio: Math.round((blocked.ms / unblocked.ms) * 100) / 100 })}\n`);
      } finally {
        await driver.close();
        await client.query(`DROP SCHEMA IF EXISTS ${quoteIdent(schema)} CASCADE`);
        forget();
      }
    }
  } finally {
    await client.end();
    await embedded?.stop();
  }
}

main().catch((error: unknown) => {
  process.stderr.write(`${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exit(1);
});
