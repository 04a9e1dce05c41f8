/**
 * The floor: a minimal raw-SQL drain of the QueueBox outbox table, no library code.
 *
 * Each of `loops` loops owns one connection and repeats two round trips until nothing is left:
 * claim up to `batch` due `pending` rows with `FOR UPDATE SKIP LOCKED` (setting token, lease and
 * `claimed_at`, returning the columns a publisher needs), then mark them `sent` by `unnest` of the
 * ids and tokens. For keyed workloads the claim also honours one row per key in flight: a row is
 * claimable only when no `pending`/`processing` row of its key has a lower sequence and no row of
 * its key is `processing` — the same rule QueueBox enforces, so the floor does the same work (one
 * probe of the index of the keys in flight, `<table>_key_busy_idx`, per candidate).
 *
 * Settings (`ctx.settings`; `npm run bench:sweep` tries them and `npm run bench` runs each
 * workload's best, see bench/best-settings.ts):
 * - `batch` — rows per claim (default 100, QueueBox's default `outbox.batchSize`);
 * - `loops` — concurrent claim/settle loops, one connection each (default `--workers`);
 * - `claim` — `cte`: `WITH c AS (SELECT … FOR UPDATE SKIP LOCKED) UPDATE … FROM c`, or `in`:
 *   `UPDATE … WHERE id IN (SELECT … FOR UPDATE SKIP LOCKED)` (default `cte`);
 * - `prepared` — named prepared statements, planned once per connection (default false).
 */
import pg from 'pg';
import type { BenchCase, CaseContext, DrainResult } from './bench-case.ts';
import { dropSchema, outboxLatency, outboxTable, seedOutbox } from './outbox-table.ts';

/** Rows per claim of the floor without settings (QueueBox's default `outbox.batchSize`). */
export const FLOOR_BATCH = 100;

/** The floor's settings for a run, defaults filled in. */
export interface FloorSettings {
  batch: number;
  loops: number;
  claim: 'cte' | 'in';
  prepared: boolean;
}

/** Reads and checks `ctx.settings` (an unknown or malformed setting is an error naming it). */
export function floorSettings(ctx: Pick<CaseContext, 'settings' | 'workers'>): FloorSettings {
  const s = ctx.settings ?? {};
  for (const name of Object.keys(s)) {
    if (!['batch', 'loops', 'claim', 'prepared'].includes(name)) throw new Error(`floor: unknown setting ${name}`);
  }
  const count = (name: string, fallback: number) => {
    const v = s[name] ?? fallback;
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 1) throw new Error(`floor: setting ${name} = ${String(v)} is not a positive integer`);
    return v;
  };
  const claim = s.claim ?? 'cte';
  if (claim !== 'cte' && claim !== 'in') throw new Error(`floor: setting claim = ${String(claim)} is not cte or in`);
  const prepared = s.prepared ?? false;
  if (typeof prepared !== 'boolean') throw new Error(`floor: setting prepared = ${String(prepared)} is not a boolean`);
  return { batch: count('batch', FLOOR_BATCH), loops: count('loops', ctx.workers), claim, prepared };
}

const CLAIM_SET = `SET state = 'processing', claim_token = gen_random_uuid(), claimed_at = clock_timestamp(),
           lease_expires_at = clock_timestamp() + interval '5 minutes', updated_at = clock_timestamp()`;
const RETURNING = `RETURNING o.id, o.topic, o.key, o.payload, o.headers, o.claim_token`;

/**
 * Keyless: the first due rows, `SKIP LOCKED`. Keyed: the fastest ordered claim we know in plain
 * SQL — the first two batches of due rows, of which the heads of keys with nothing in flight;
 * when they leave room, a loose index scan of the key-head index (one probe per open key) for the
 * heads of the other keys that can move. One row per key in flight, `sequence` order per key.
 */
export function floorClaimSql(table: string, keyed: boolean, { batch, claim }: FloorSettings): string {
  if (!keyed) {
    const due = `SELECT c.id FROM ${table} c
       WHERE c.state = 'pending' AND c.scheduled_at <= now()
       ORDER BY c.scheduled_at, c.sequence
       LIMIT ${batch}
       FOR UPDATE SKIP LOCKED`;
    return claim === 'in'
      ? `UPDATE ${table} o ${CLAIM_SET} WHERE o.id IN (${due}) ${RETURNING}`
      : `WITH c AS (${due})
    UPDATE ${table} o ${CLAIM_SET} FROM c WHERE o.id = c.id ${RETURNING}`;
  }
  const free = (c: string) => `NOT EXISTS (SELECT 1 FROM ${table} h WHERE h.key = ${c}.key AND h.state IN ('pending', 'processing') AND h.sequence < ${c}.sequence)
           AND NOT EXISTS (SELECT 1 FROM ${table} b WHERE b.key = ${c}.key AND b.key <> '' AND b.state = 'processing')`;
  return `WITH RECURSIVE ks AS (
      (SELECT key FROM ${table} WHERE state IN ('pending', 'processing') AND key > '' ORDER BY key LIMIT 1)
      UNION ALL
      SELECT (SELECT k.key FROM ${table} k WHERE k.state IN ('pending', 'processing') AND k.key > ks.key ORDER BY k.key LIMIT 1)
        FROM ks WHERE ks.key IS NOT NULL),
    heads AS (
      SELECT h.id, h.sequence FROM ks CROSS JOIN LATERAL (
          SELECT o.id, o.state, o.sequence FROM ${table} o WHERE o.key = ks.key AND o.state IN ('pending', 'processing')
           ORDER BY o.sequence LIMIT 1) h
       WHERE h.state = 'pending'
         AND NOT EXISTS (SELECT 1 FROM ${table} b WHERE b.key = ks.key AND b.key <> '' AND b.state = 'processing')),
    oldest AS (
      SELECT c.id FROM (SELECT id FROM ${table} WHERE state = 'pending' ORDER BY scheduled_at, sequence LIMIT ${batch * 2}) w
        JOIN ${table} c ON c.id = w.id
       WHERE c.state = 'pending' AND ${free('c')}
       ORDER BY c.scheduled_at, c.sequence LIMIT ${batch}
       FOR UPDATE OF c SKIP LOCKED),
    picked AS (
      SELECT id FROM oldest
      UNION ALL
      SELECT id FROM (
        SELECT c.id FROM heads JOIN ${table} c ON c.id = heads.id
         WHERE c.state = 'pending' AND c.id NOT IN (SELECT id FROM oldest)
         ORDER BY heads.sequence LIMIT ${batch}
         FOR UPDATE OF c SKIP LOCKED) f
      LIMIT ${batch})
    UPDATE ${table} o ${CLAIM_SET} ${claim === 'in' ? 'WHERE o.id IN (SELECT id FROM picked)' : 'FROM picked WHERE o.id = picked.id'} ${RETURNING}`;
}

function settleSql(table: string): string {
  return `UPDATE ${table} o SET state = 'sent', updated_at = clock_timestamp(), lease_expires_at = NULL
            FROM unnest($1::uuid[], $2::uuid[]) AS s(id, token)
           WHERE o.id = s.id AND o.claim_token = s.token AND o.state = 'processing'`;
}

/** The floor's keyless claim at its default settings (batch 100, `cte`), for bench:profile. */
export function floorClaimText(table: string): string {
  return floorClaimSql(table, false, { batch: FLOOR_BATCH, loops: 1, claim: 'cte', prepared: false });
}

/** The floor's sent mark by `unnest` of ids and tokens. */
export function floorSettleText(table: string): string {
  return settleSql(table);
}

/** Runs `loops` claim/settle loops until `target` rows are sent or the time cap passes. */
export async function floorDrain(ctx: CaseContext): Promise<DrainResult> {
  const table = outboxTable(ctx);
  const settings = floorSettings(ctx);
  // A prepared statement is named per text; the name is per connection, so one name serves all loops.
  const named = (name: string, text: string) => (values?: unknown[]) => (settings.prepared ? { name, text, ...(values ? { values } : {}) } : { text, ...(values ? { values } : {}) });
  const claim = named('floor_claim', floorClaimSql(table, ctx.workload.keys > 0, settings));
  const settle = named('floor_settle', settleSql(table));
  const target = ctx.workload.drain;
  const stopAt = Date.now() + ctx.timeLimitMs;
  let moved = 0;
  let idle = 0;
  // Round-trip time of the claims and the sent marks, summed over the loops (the notes).
  const timing = { claims: 0, claimMs: 0, settles: 0, settleMs: 0 };
  const loop = async () => {
    const client = new pg.Client({ connectionString: ctx.url });
    await client.connect();
    try {
      while (moved < target && Date.now() < stopAt) {
        const at = performance.now();
        const { rows } = await client.query<{ id: string; claim_token: string }>(claim());
        const claimed = performance.now();
        timing.claimMs += claimed - at;
        timing.claims++;
        if (rows.length === 0) {
          // Every claimable head is in flight with another loop: yield briefly.
          idle++;
          await new Promise((resolve) => setTimeout(resolve, 1));
          continue;
        }
        const take = rows.slice(0, Math.max(0, target - moved));
        moved += take.length;
        await client.query(settle([rows.map((r) => r.id), rows.map((r) => r.claim_token)]));
        timing.settleMs += performance.now() - claimed;
        timing.settles++;
      }
    } finally {
      await client.end();
    }
  };
  await Promise.all(Array.from({ length: settings.loops }, loop));
  const average = (ms: number, n: number) => Math.round((ms / Math.max(1, n)) * 10) / 10;
  return {
    moved: Math.min(moved, target),
    capped: moved < target,
    notes: { claims: timing.claims, emptyClaims: idle, claimMsAvg: average(timing.claimMs, timing.claims), settleMsAvg: average(timing.settleMs, timing.settles) },
  };
}

export const floorCase: BenchCase = {
  name: 'floor',
  describe: (ctx) => {
    const s = floorSettings(ctx);
    return `raw SQL, ${s.loops} loop(s) x (claim ${s.batch} SKIP LOCKED [${s.claim}${s.prepared ? ', prepared' : ''}] -> mark sent by unnest)${ctx.workload.keys > 0 ? ', oldest-window heads + loose index scan of key heads' : ''}`;
  },
  prepare: seedOutbox,
  drain: floorDrain,
  latency: outboxLatency,
  cleanup: (ctx) => dropSchema(ctx.probe, ctx.schema),
};
