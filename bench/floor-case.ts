/**
 * The floor: a minimal raw-SQL drain of the QueueBox outbox table, no library code.
 *
 * Each of `workers` loops owns one connection and repeats two round trips until nothing is
 * left: claim up to 100 due `pending` rows with `FOR UPDATE SKIP LOCKED` (setting token, lease
 * and `claimed_at`, returning the columns a publisher needs), then mark them `sent` by `unnest`
 * of the ids. For keyed workloads the claim also honours one row per key in flight: a row is
 * claimable only when no `pending`/`processing` row of its key has a lower sequence — the same
 * rule QueueBox enforces, so the floor does the same work.
 */
import pg from 'pg';
import type { BenchCase, CaseContext, DrainResult } from './bench-case.ts';
import { dropSchema, outboxLatency, outboxTable, seedOutbox } from './outbox-table.ts';

/** Rows per claim of the floor (QueueBox's default `outbox.batchSize`). */
export const FLOOR_BATCH = 100;

function claimSql(table: string, keyed: boolean): string {
  const head = keyed
    ? `AND (c.key IS NULL OR NOT EXISTS (
         SELECT 1 FROM ${table} h WHERE h.key = c.key AND h.state IN ('pending', 'processing') AND h.sequence < c.sequence))`
    : '';
  return `WITH c AS (
      SELECT c.id FROM ${table} c
       WHERE c.state = 'pending' AND c.scheduled_at <= now() ${head}
       ORDER BY c.scheduled_at, c.sequence
       LIMIT ${FLOOR_BATCH}
       FOR UPDATE SKIP LOCKED)
    UPDATE ${table} o
       SET state = 'processing', claim_token = gen_random_uuid(), claimed_at = clock_timestamp(),
           lease_expires_at = clock_timestamp() + interval '5 minutes', updated_at = clock_timestamp()
      FROM c WHERE o.id = c.id
    RETURNING o.id, o.topic, o.key, o.payload, o.headers, o.claim_token`;
}

function settleSql(table: string): string {
  return `UPDATE ${table} o SET state = 'sent', updated_at = clock_timestamp(), lease_expires_at = NULL
            FROM unnest($1::uuid[], $2::uuid[]) AS s(id, token)
           WHERE o.id = s.id AND o.claim_token = s.token AND o.state = 'processing'`;
}

/** Runs `workers` claim/settle loops until `target` rows are sent or the time cap passes. */
export async function floorDrain(ctx: CaseContext): Promise<DrainResult> {
  const table = outboxTable(ctx);
  const claim = claimSql(table, ctx.workload.keys > 0);
  const settle = settleSql(table);
  const target = ctx.workload.drain;
  const stopAt = Date.now() + ctx.timeLimitMs;
  let moved = 0;
  let idle = 0;
  const loop = async () => {
    const client = new pg.Client({ connectionString: ctx.url });
    await client.connect();
    try {
      while (moved < target && Date.now() < stopAt) {
        const { rows } = await client.query<{ id: string; claim_token: string }>(claim);
        if (rows.length === 0) {
          // Every claimable head is in flight with another loop: yield briefly.
          idle++;
          await new Promise((resolve) => setTimeout(resolve, 1));
          continue;
        }
        const take = rows.slice(0, Math.max(0, target - moved));
        moved += take.length;
        await client.query(settle, [rows.map((r) => r.id), rows.map((r) => r.claim_token)]);
      }
    } finally {
      await client.end();
    }
  };
  await Promise.all(Array.from({ length: ctx.workers }, loop));
  return { moved: Math.min(moved, target), capped: moved < target, notes: { emptyClaims: idle } };
}

export const floorCase: BenchCase = {
  name: 'floor',
  describe: (ctx) =>
    `raw SQL, ${ctx.workers} loop(s) x (claim ${FLOOR_BATCH} SKIP LOCKED -> mark sent by unnest)${ctx.workload.keys > 0 ? ', head-of-key NOT EXISTS' : ''}`,
  prepare: seedOutbox,
  drain: floorDrain,
  latency: outboxLatency,
  cleanup: (ctx) => dropSchema(ctx.probe, ctx.schema),
};
