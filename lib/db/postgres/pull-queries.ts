/**
 * PostgreSQL pull operations (driver methods `pull*`, spec §6, seed: pull worker).
 *
 * The claim is one statement with `FOR UPDATE SKIP LOCKED` and no claim lock. It still returns at
 * most one row per (source, aggregate) under concurrent claims, because only the aggregate's
 * *head* can be a candidate: the open (`pending`/`processing`) row with the lowest `sequence`
 * (receive order). Two concurrent claimers therefore compete for the same row and the row lock
 * decides: the loser skips it (locked) or, when the winner already committed, re-checks the new
 * row version (`processing`, live lease) and drops it. A later row of the aggregate is never a
 * candidate while an earlier one is open — also not while the earlier row waits for a retry
 * (`pending`, not due), which is what keeps per-aggregate handling in receive order.
 *
 * Every other write is fenced on id + `processing` + token + `lease_expires_at >
 * clock_timestamp()` and reports true only when exactly one row changed.
 */
import type { ClaimRef, DeadItem, InboxRow, RetryItem } from '../driver.ts';
import { msInterval, type PgContext } from './context.ts';
import { oncePerNames, retriesFirst } from './claim-text.ts';
import { claimSet, LEASE_START } from './fenced-writes.ts';
import { toInboxRow, type InboxDbRow } from './inbox-queries.ts';
import { leaseWithinBudget } from '../statement-budget.ts';
import { pgClaimQuery, pgQuery, type PgQueryable } from './pg-pool.ts';

const FENCE = `id = $1 AND consumption = 'pull' AND state = 'processing' AND claim_token = $2 AND lease_expires_at > clock_timestamp()`;

/**
 * Claims up to `limit` rows of one pull source: due `pending` rows and `processing` rows whose
 * lease expired (no separate reclaim), at most one per aggregate (its head), none of an aggregate
 * with a row under a live lease; due retries (`attempt > 0`) first, then first attempts, each in
 * `scheduled_at, created_at, id` order. Autocommits, so the claim is durable before any handler runs.
 */
export async function pullClaimMany(ctx: PgContext, p: { source: string; limit: number; leaseMs: number }): Promise<InboxRow[]> {
  const { rows } = await pgClaimQuery<InboxDbRow>(ctx.pool, pullClaimText(ctx.names), () => [p.source, p.limit, leaseWithinBudget(p.leaseMs)], ctx.prepared);
  return rows.map(toInboxRow);
}

/** The pull claim statement of `names`. */
const pullClaimText = oncePerNames((names) => {
  const t = names.inbox;
  const select = (attempts: string) => `SELECT c.id
         FROM ${t} c
        WHERE c.source = $1
          AND c.consumption = 'pull'
          AND ${attempts}
          AND c.state IN ('pending', 'processing')
          AND ((c.state = 'pending' AND c.scheduled_at <= clock_timestamp())
            OR (c.state = 'processing' AND c.lease_expires_at <= clock_timestamp()))
          AND (c.aggregate_id IS NULL OR (
                -- only the head: no open row of the aggregate received earlier
                NOT EXISTS (
                  SELECT 1 FROM ${t} h
                   WHERE h.source = c.source AND h.consumption = 'pull' AND h.aggregate_id = c.aggregate_id
                     AND h.state IN ('pending', 'processing') AND h.sequence < c.sequence)
                -- and no row of the aggregate under a live lease
                AND NOT EXISTS (
                  SELECT 1 FROM ${t} b
                   WHERE b.source = c.source AND b.consumption = 'pull' AND b.aggregate_id = c.aggregate_id
                     AND b.state = 'processing' AND b.lease_expires_at > clock_timestamp())))
        ORDER BY c.scheduled_at, c.created_at, c.id
        LIMIT $2
        FOR UPDATE SKIP LOCKED`;
  return `WITH candidates AS (
       ${retriesFirst(select, '$2')}
     ),
     claimed AS (
     UPDATE ${t} i
        SET ${claimSet('$3')}
       FROM candidates
      WHERE i.id = candidates.id
  RETURNING i.id, i.source, i.idempotency_key, i.aggregate_id, i.event_type, i.payload, i.headers,
            i.correlation_id, i.attempt, i.created_at, i.scheduled_at, i.claim_token,
            i.lease_expires_at)
     -- UPDATE … RETURNING does not keep the candidates' order; restore the claim order here,
     -- in the database, where timestamps keep their microseconds.
     SELECT * FROM claimed ORDER BY attempt = 0, scheduled_at, created_at, id`;
});

/** Fenced lease renewal: the lease becomes the statement's start (`LEASE_START`, db clock) + `leaseMs`. */
export async function pullRenew(ctx: PgContext, p: ClaimRef & { leaseMs: number }): Promise<boolean> {
  const { rowCount } = await pgQuery(
    ctx.pool,
    `UPDATE ${ctx.names.inbox} SET lease_expires_at = ${LEASE_START} + ${msInterval('$3')} WHERE ${FENCE}`,
    () => [p.id, p.token, leaseWithinBudget(p.leaseMs)],
  );
  return rowCount === 1;
}

/** Fenced `processed`, through `db` (the caller's open transaction). */
export async function pullComplete(ctx: PgContext, db: PgQueryable, c: ClaimRef): Promise<boolean> {
  const { rowCount } = await pgQuery(
    db,
    `UPDATE ${ctx.names.inbox}
        SET state = 'processed', processed_at = clock_timestamp(), lease_expires_at = NULL,
            last_error = NULL, updated_at = clock_timestamp()
      WHERE ${FENCE}`,
    [c.id, c.token],
  );
  return rowCount === 1;
}

/** Fenced retry: `pending`, `attempt + 1`, due at db clock + `delayMs`, claim cleared. */
export async function pullRetry(ctx: PgContext, p: RetryItem): Promise<boolean> {
  const { rowCount } = await pgQuery(
    ctx.pool,
    `UPDATE ${ctx.names.inbox}
        SET state = 'pending', attempt = attempt + 1,
            scheduled_at = clock_timestamp() + ${msInterval('$3')},
            last_error = $4, claim_token = NULL, claimed_at = NULL, lease_expires_at = NULL,
            updated_at = clock_timestamp()
      WHERE ${FENCE}`,
    [p.id, p.token, p.delayMs, p.error],
  );
  return rowCount === 1;
}

/** Fenced `dead` with `error` (attempt unchanged). */
export async function pullMarkDead(ctx: PgContext, p: DeadItem): Promise<boolean> {
  const { rowCount } = await pgQuery(
    ctx.pool,
    `UPDATE ${ctx.names.inbox}
        SET state = 'dead', last_error = $3, lease_expires_at = NULL, updated_at = clock_timestamp()
      WHERE ${FENCE}`,
    [p.id, p.token, p.error],
  );
  return rowCount === 1;
}

/**
 * Fenced release of a claimed row that no handler started: back to `pending`, attempt and
 * schedule unchanged, claim cleared, so the next claim can take it at once.
 */
export async function pullRelease(ctx: PgContext, c: ClaimRef): Promise<boolean> {
  const { rowCount } = await pgQuery(
    ctx.pool,
    `UPDATE ${ctx.names.inbox}
        SET state = 'pending', claim_token = NULL, claimed_at = NULL, lease_expires_at = NULL,
            updated_at = clock_timestamp()
      WHERE ${FENCE}`,
    [c.id, c.token],
  );
  return rowCount === 1;
}
