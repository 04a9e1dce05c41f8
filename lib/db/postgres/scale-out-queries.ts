/**
 * Scale-out: the due backlog counted up to a limit, and the slots of the passes a pass starts
 * (`lib/runtime/scale-out.ts`), kept in the maintenance table — one row per slot
 * (`scale-out-slot-name.ts`) whose `last_run_at` is the slot's lease expiry on the database clock.
 *
 * A slot's token is that expiry in microseconds since 1970 (text): every statement that takes,
 * renews or frees a slot compares it, so a duplicate delivery of a start event, or one that waited
 * past its lease, finds another token (or an expired lease) and changes nothing.
 */
import type { ScaleOutSlot, ScaleOutWorker } from '../driver.ts';
import { scaleOutSlotName, scaleOutSlotNumber, scaleOutSlotPrefix } from '../scale-out-slot-name.ts';
import { msInterval, type PgContext } from './context.ts';
import { pgQuery } from './pg-pool.ts';

/** The slot's token: its lease expiry in microseconds since 1970, exact (PostgreSQL keeps microseconds). */
const TOKEN = `((EXTRACT(EPOCH FROM m.last_run_at) * 1000000)::bigint)::text`;

/** Due pending outbox rows, counted up to `limit` through the partial pending index. */
export async function outboxCountDue(ctx: PgContext, limit: number): Promise<number> {
  const { rows } = await pgQuery<{ n: number }>(
    ctx.pool,
    `SELECT count(*)::int AS n FROM (
       SELECT 1 FROM ${ctx.names.outbox} WHERE state = 'pending' AND scheduled_at <= pg_catalog.clock_timestamp() LIMIT $1
     ) due`,
    [limit],
  );
  return rows[0]!.n;
}

/** Due pending push rows of the inbox, counted up to `limit` through the partial push-pending index. */
export async function inboxCountDue(ctx: PgContext, limit: number): Promise<number> {
  const { rows } = await pgQuery<{ n: number }>(
    ctx.pool,
    `SELECT count(*)::int AS n FROM (
       SELECT 1 FROM ${ctx.names.inbox} WHERE state = 'pending' AND consumption = 'push' AND scheduled_at <= pg_catalog.clock_timestamp() LIMIT $1
     ) due`,
    [limit],
  );
  return rows[0]!.n;
}

/**
 * One statement: the free slots among `1..slots` (no row, or a lease that has passed), lowest
 * first, as many as `want` minus the slots held (any number: a slot above `slots`, held since the
 * setting was lowered, counts too); each taken by an upsert whose `WHERE` re-checks the expiry on the
 * row's latest version, so of two concurrent callers only one takes a slot.
 */
export async function scaleOutAcquire(ctx: PgContext, p: { worker: ScaleOutWorker; slots: number; want: number; leaseMs: number }): Promise<ScaleOutSlot[]> {
  if (p.slots < 1 || p.want < 1) return [];
  const m = ctx.names.maintenance;
  const { rows } = await pgQuery<{ name: string; token: string }>(
    ctx.pool,
    `WITH held AS (
       SELECT count(*)::int AS n FROM ${m} h WHERE left(h.name, length($1::text)) = $1::text AND h.last_run_at > pg_catalog.clock_timestamp()
     ), free AS (
       SELECT $1::text || s.n::text AS name FROM generate_series(1, $2::int) AS s(n)
        WHERE NOT EXISTS (SELECT 1 FROM ${m} h WHERE h.name = $1::text || s.n::text AND h.last_run_at > pg_catalog.clock_timestamp())
        ORDER BY s.n
        LIMIT GREATEST(0, $3::int - (SELECT n FROM held))
     )
     INSERT INTO ${m} AS m (name, last_run_at)
     SELECT name, pg_catalog.clock_timestamp() + ${msInterval('$4')} FROM free
     ON CONFLICT (name) DO UPDATE SET last_run_at = EXCLUDED.last_run_at WHERE m.last_run_at <= pg_catalog.clock_timestamp()
     RETURNING m.name, ${TOKEN} AS token`,
    [scaleOutSlotPrefix(p.worker, ctx.names.outboxTable), p.slots, p.want, p.leaseMs],
  );
  return rows.map((r) => ({ slot: scaleOutSlotNumber(r.name), token: r.token })).sort((a, b) => a.slot - b.slot);
}

/** Takes over a slot still holding `token` under a live lease: a lease `leaseMs` from now, and its new token. */
export async function scaleOutStart(ctx: PgContext, p: { worker: ScaleOutWorker; slot: ScaleOutSlot; leaseMs: number }): Promise<ScaleOutSlot | undefined> {
  const { rows } = await pgQuery<{ token: string }>(
    ctx.pool,
    `UPDATE ${ctx.names.maintenance} AS m SET last_run_at = pg_catalog.clock_timestamp() + ${msInterval('$3')}
      WHERE m.name = $1 AND m.last_run_at > pg_catalog.clock_timestamp() AND (EXTRACT(EPOCH FROM m.last_run_at) * 1000000)::bigint = $2::bigint
     RETURNING ${TOKEN} AS token`,
    [scaleOutSlotName(p.worker, ctx.names.outboxTable, p.slot.slot), p.slot.token, p.leaseMs],
  );
  return rows[0] === undefined ? undefined : { slot: p.slot.slot, token: rows[0].token };
}

/** Deletes the slot's row when it still holds `token`. */
export async function scaleOutRelease(ctx: PgContext, p: { worker: ScaleOutWorker; slot: ScaleOutSlot }): Promise<boolean> {
  const { rowCount } = await pgQuery(
    ctx.pool,
    `DELETE FROM ${ctx.names.maintenance} AS m WHERE m.name = $1 AND (EXTRACT(EPOCH FROM m.last_run_at) * 1000000)::bigint = $2::bigint`,
    [scaleOutSlotName(p.worker, ctx.names.outboxTable, p.slot.slot), p.slot.token],
  );
  return rowCount === 1;
}
