/**
 * Seeding and inspection of a QueueBox outbox table for the floor and queuebox cases.
 */
import type pg from 'pg';
import { parseConfig } from '../lib/config/load-config.ts';
import type { QueueBoxConfig } from '../lib/config/schema.ts';
import { PostgresDriver } from '../lib/db/postgres/postgres-driver.ts';
import { quoteIdent } from '../lib/db/postgres/names.ts';
import type { CaseContext, Latency } from './bench-case.ts';
import { keyExpression } from './workloads.ts';

/** The bench's QueueBox config for a case schema (`overrides` merged at the top level). */
export function benchConfig(ctx: CaseContext, overrides: Record<string, unknown> = {}): QueueBoxConfig {
  return parseConfig({ ...overrides, database: { url: ctx.url, schema: ctx.schema, poolMax: Math.max(2, ctx.workers + 1) } });
}

/** Qualified outbox table of the case schema. */
export function outboxTable(ctx: CaseContext): string {
  return `${quoteIdent(ctx.schema)}.${quoteIdent('outbox')}`;
}

/**
 * Migrates the schema with QueueBox's own migrations and inserts the workload's rows in one
 * statement. `outbox` overrides the config's outbox section (its `batchSize` names the claim
 * functions `migrate` creates).
 */
export async function seedOutbox(ctx: CaseContext, outbox?: Record<string, unknown>): Promise<void> {
  const driver = new PostgresDriver({ config: benchConfig(ctx, outbox ? { outbox } : {}), url: ctx.url });
  try {
    await driver.migrate();
  } finally {
    await driver.close();
  }
  const { seed } = ctx.workload;
  // Bulk load: build the secondary indexes once after the insert instead of row by row (the
  // definitions are read back from the catalog, so they are exactly the migration's).
  const { rows: indexes } = await ctx.probe.query<{ name: string; def: string }>(
    `SELECT indexname AS name, indexdef AS def FROM pg_indexes WHERE schemaname = $1 AND tablename = 'outbox' AND indexname <> 'outbox_pkey'`,
    [ctx.schema],
  );
  for (const index of indexes) await ctx.probe.query(`DROP INDEX ${quoteIdent(ctx.schema)}.${quoteIdent(index.name)}`);
  await ctx.probe.query(
    `INSERT INTO ${outboxTable(ctx)} (topic, key, payload)
     SELECT 'bench.event', ${keyExpression(ctx.workload, 'g')}, jsonb_build_object('i', g, 'body', 'x')
       FROM generate_series(1, $1::int) AS g ORDER BY g`,
    [seed],
  );
  for (const index of indexes) await ctx.probe.query(index.def);
  await ctx.probe.query(`VACUUM ANALYZE ${outboxTable(ctx)}`);
}

/** Rows of the outbox in state `sent`. */
export async function sentCount(ctx: CaseContext): Promise<number> {
  const { rows } = await ctx.probe.query<{ n: string }>(`SELECT count(*) AS n FROM ${outboxTable(ctx)} WHERE state = 'sent'`);
  return Number(rows[0]!.n);
}

/** p50/p99 of `updated_at - claimed_at` over sent rows (claim to mark-sent, database clock). */
export async function outboxLatency(ctx: CaseContext): Promise<Latency | null> {
  const { rows } = await ctx.probe.query<{ p50: number | null; p99: number | null }>(
    `SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms) AS p50, percentile_cont(0.99) WITHIN GROUP (ORDER BY ms) AS p99
       FROM (SELECT EXTRACT(EPOCH FROM updated_at - claimed_at) * 1000 AS ms FROM ${outboxTable(ctx)} WHERE state = 'sent') s`,
  );
  const r = rows[0]!;
  return r.p50 === null || r.p99 === null ? null : { p50Ms: r.p50, p99Ms: r.p99 };
}

/** Drops the case schema. */
export async function dropSchema(client: pg.Client, schema: string): Promise<void> {
  await client.query(`DROP SCHEMA IF EXISTS ${quoteIdent(schema)} CASCADE`);
}
