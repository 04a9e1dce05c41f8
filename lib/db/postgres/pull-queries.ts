/**
 * PostgreSQL pull operations (driver methods `pull*`, spec §6, seed: pull worker).
 *
 * The claim is one statement with `FOR UPDATE SKIP LOCKED`, after a per-source claim lock. It
 * returns at most one row per (source, aggregate), because only the aggregate's *head* can be a
 * candidate: the open (`pending`/`processing`) row with the lowest `sequence` (receive order),
 * and only while no other row of the aggregate is under a live lease. A later row of the
 * aggregate is never a candidate while an earlier one is open — also not while the earlier row
 * waits for a retry (`pending`, not due), which is what keeps per-aggregate handling in receive
 * order. The claim lock makes claims of one source see each other's committed claims (a row that
 * commits late cannot go in flight beside a later row of its aggregate claimed meanwhile).
 *
 * Every other write is fenced on id + `processing` + token + `lease_expires_at >
 * clock_timestamp()` and reports true only when exactly one row changed.
 */
import type { ClaimRef, DeadItem, InboxRow, RetryItem } from '../driver.ts';
import { msInterval, type PgContext } from './context.ts';
import { oncePerNames, OLDEST_WINDOW, windowLeftRoom } from './claim-text.ts';
import { PINNED_CLAIM_PLAN } from './claim-functions.ts';
import { claimSet, fencedQuery, fencedWriteCount, LEASE_START, lockWithinLease } from './fenced-writes.ts';
import { toInboxRow, type InboxDbRow } from './inbox-queries.ts';
import { epochMs } from './epoch-time.ts';
import { leaseWithinBudget } from '../statement-budget.ts';
import { pgClaimQuery, pgQuery, pgTransaction, type PgQueryable } from './pg-pool.ts';

/** The pull fence on `$1` (id) and `$2` (token), with `bound` bounding the lock wait by the lease. */
const pullFence = (bound: string) => `id = $1 AND consumption = 'pull' AND state = 'processing' AND claim_token = $2 AND lease_expires_at > pg_catalog.clock_timestamp() AND ${bound}`;
const FENCE = pullFence(lockWithinLease(''));

/**
 * Claims up to `limit` rows of one pull source: due `pending` rows and `processing` rows whose
 * lease expired (no separate reclaim; the lost lease counts as a failed attempt, `LOST_LEASE_SET`), at most one per aggregate (its head), none of an aggregate
 * with a row under a live lease; rows without aggregate (NULL or `''`) freely; due retries
 * (`attempt > 0`) first, then first attempts in `scheduled_at, created_at, id` order — the oldest
 * open rows, and when their aggregates are busy, the heads of the aggregates that can move (a
 * loose scan of the source's head index, one probe per open aggregate) and rows without
 * aggregate, merged in that one order (so neither waits for younger rows of the other: the
 * bound of docs/pull-workers.md). Claims of one source run one at a time (`pg_advisory_xact_lock` on table and source,
 * taken in an earlier statement), so each claim's snapshot includes every claim committed before
 * it: a row that commits late, behind a later row of its aggregate already claimed, waits. The
 * claim commits before it returns, so it is durable before any handler runs.
 */
export async function pullClaimMany(ctx: PgContext, p: { source: string; limit: number; leaseMs: number }): Promise<InboxRow[]> {
  const rows = await pgTransaction(ctx.pool, async (client) => {
    // Waits while another claim holds it, as long as the statement may run (the time left in a pass):
    // `pgTransaction` sets no `lock_timeout` for it, whatever the role's.
    await pgQuery(client, `SELECT pg_advisory_xact_lock(hashtext($1), hashtext($2))`, [`queuebox_pull_claim_${ctx.names.inbox}`, p.source]);
    return (await pgClaimQuery<InboxDbRow>(client, pullClaimText(ctx.names), () => [p.source, p.limit, leaseWithinBudget(p.leaseMs)], ctx.prepared, PINNED_CLAIM_PLAN)).rows;
  });
  return rows.map(toInboxRow);
}

/** Claimable by state: due pending, or processing with an expired lease. */
const CLAIMABLE = (a: string) => `((${a}.state = 'pending' AND ${a}.scheduled_at <= pg_catalog.clock_timestamp())
            OR (${a}.state = 'processing' AND ${a}.lease_expires_at <= pg_catalog.clock_timestamp()))`;

/**
 * What the claim of an expired row counts (the SET sees the row before the claim): its lost lease
 * is a failed attempt, `attempt + 1`, and `last_error` says so. The worker dead-letters a row
 * whose `attempt` reached its `maxAttempts` before running a handler (`handlePullMessage`).
 */
const LOST_LEASE_SET = `attempt = CASE WHEN i.state = 'processing' THEN i.attempt + 1 ELSE i.attempt END,
            last_error = CASE WHEN i.state = 'processing'
              THEN 'lease expired during attempt ' || (i.attempt + 1) || ' (the handler did not finish within its lease)'
              ELSE i.last_error END`;

/** The pull claim statement of `names`. */
export const pullClaimText = oncePerNames((names) => {
  const t = names.inbox;
  // an open pull row of source $1 (the predicate of the pull indexes, for alias `a`)
  const open = (a: string) => `${a}.source = $1 AND ${a}.consumption = 'pull' AND ${a}.state IN ('pending', 'processing')`;
  const noAggregate = `(c.aggregate_id IS NULL OR c.aggregate_id = '')`;
  const free = (c: string, aggregate: string) => `NOT EXISTS (
                SELECT 1 FROM ${t} b
                 WHERE b.source = $1 AND b.consumption = 'pull' AND b.aggregate_id = ${aggregate}
                   AND b.state = 'processing' AND b.lease_expires_at > pg_catalog.clock_timestamp() AND b.id <> ${c}.id)`;
  const freeHead = `-- only the head: no open row of the aggregate received earlier
                NOT EXISTS (
                  SELECT 1 FROM ${t} h
                   WHERE ${open('h')} AND h.aggregate_id = c.aggregate_id AND h.sequence < c.sequence)
                -- and no row of the aggregate under a live lease
                AND ${free('c', 'c.aggregate_id')}`;
  return `WITH RECURSIVE
     -- every aggregate of the source with an open row, one index probe each
     open_aggregates AS (
       (SELECT k.aggregate_id FROM ${t} k
         WHERE ${open('k')} AND k.aggregate_id > ''
         ORDER BY k.aggregate_id LIMIT 1)
       UNION ALL
       SELECT n.aggregate_id
         FROM open_aggregates a
         CROSS JOIN LATERAL (
           SELECT k.aggregate_id FROM ${t} k
            WHERE ${open('k')} AND k.aggregate_id > a.aggregate_id
            ORDER BY k.aggregate_id LIMIT 1) n
     ),
     heads AS (
       SELECT h.id, h.ctid, h.scheduled_at, h.created_at
         FROM open_aggregates a
         CROSS JOIN LATERAL (
           SELECT i.id, i.ctid, i.state, i.attempt, i.scheduled_at, i.created_at, i.lease_expires_at FROM ${t} i
            WHERE ${open('i')} AND i.aggregate_id = a.aggregate_id
            ORDER BY i.sequence LIMIT 1) h
        WHERE h.attempt = 0 AND ${CLAIMABLE('h')}
          AND ${free('h', 'a.aggregate_id')}
     ),
     retried AS (
       SELECT c.id FROM ${t} c
        WHERE ${open('c')} AND c.attempt > 0 AND ${CLAIMABLE('c')}
          AND (${noAggregate} OR (${freeHead}))
        ORDER BY c.scheduled_at, c.created_at, c.id
        LIMIT $2
        FOR UPDATE SKIP LOCKED
     ),
     -- the oldest rows in index order, joined back by ctid (see the outbox claim)
     oldest AS (
       SELECT c.id FROM (
           SELECT w.ctid, w.scheduled_at, w.created_at, w.id FROM ${t} w
            WHERE ${open('w')}
            ORDER BY w.scheduled_at, w.created_at, w.id
            LIMIT $2 * ${OLDEST_WINDOW}) w
         JOIN ${t} c ON c.ctid = w.ctid
        WHERE ${open('c')} AND c.attempt = 0 AND ${CLAIMABLE('c')}
          AND (${noAggregate} OR (${freeHead}))
        ORDER BY w.scheduled_at, w.created_at, w.id
        LIMIT $2
        FOR UPDATE OF c SKIP LOCKED
     ),
     candidates AS (
       SELECT id FROM retried
       UNION ALL
       SELECT id FROM oldest
       UNION ALL
       -- past the window: the heads that can move and the rows without aggregate, in one claim
       -- order (a row without aggregate never waits for younger heads, nor a head for younger
       -- keyless rows: the wait of a row that can move is bounded, see docs/pull-workers.md), joined
       -- back by ctid as the window is: joined by id, a plan kept from a few rows drove the join
       -- from a scan of the source's index and read the heads again for every row
       SELECT id FROM (
         SELECT c.id FROM (
             (SELECT heads.id, heads.ctid, heads.scheduled_at, heads.created_at FROM heads
               WHERE heads.id NOT IN (SELECT id FROM oldest) AND ${windowLeftRoom('$2')}
               ORDER BY heads.scheduled_at, heads.created_at, heads.id
               LIMIT $2)
             UNION ALL
             (SELECT k.id, k.ctid, k.scheduled_at, k.created_at FROM ${t} k
               WHERE ${open('k')} AND k.attempt = 0 AND (k.aggregate_id IS NULL OR k.aggregate_id = '') AND ${CLAIMABLE('k')}
                 AND k.id NOT IN (SELECT id FROM oldest) AND ${windowLeftRoom('$2')}
               ORDER BY k.scheduled_at, k.created_at, k.id
               LIMIT $2)) m
           JOIN ${t} c ON c.ctid = m.ctid
          -- still claimable, tested in an OR no index serves (the source and the consumption,
          -- which never change, are not tested again): the ctid is the way in
          WHERE ${CLAIMABLE('c')}
          ORDER BY m.scheduled_at, m.created_at, m.id
          LIMIT $2
          FOR UPDATE OF c SKIP LOCKED) AS beyond_window
       LIMIT $2
     ),
     -- by id from the array of candidates, not a join (see the outbox claim)
     claimed AS (
     UPDATE ${t} i
        SET ${claimSet('$3')},
            ${LOST_LEASE_SET}
      WHERE i.id = ANY (ARRAY(SELECT id FROM candidates))
  RETURNING i.id, i.source, i.idempotency_key, i.aggregate_id, i.event_type, i.payload::text AS payload_text, i.headers,
            i.correlation_id, i.attempt, i.created_at, i.scheduled_at, i.claim_token,
            i.lease_expires_at, i.trace_context)
     -- UPDATE ... RETURNING does not keep the candidates' order; restore the claim order here,
     -- in the database, where timestamps keep their microseconds. Times are read as ms since
     -- the epoch: pg parses timestamps in no other DateStyle than ISO (epoch-time.ts).
     SELECT id, source, idempotency_key, aggregate_id, event_type, payload_text, headers, correlation_id, attempt,
            ${epochMs('created_at')} AS created_ms, claim_token, ${epochMs('lease_expires_at')} AS lease_expires_ms, trace_context
       FROM claimed ORDER BY attempt = 0, scheduled_at, created_at, id`;
});

/** Fenced lease renewal: the lease becomes the statement's start (`LEASE_START`, db clock) + `leaseMs`. */
export async function pullRenew(ctx: PgContext, p: ClaimRef & { leaseMs: number }): Promise<boolean> {
  const { rowCount } = await fencedQuery(
    ctx.pool,
    `UPDATE ${ctx.names.inbox} SET lease_expires_at = ${LEASE_START} + ${msInterval('$3')} WHERE ${FENCE}`,
    () => [p.id, p.token, leaseWithinBudget(p.leaseMs)],
  );
  return rowCount === 1;
}

/**
 * Fenced `processed`, through `db` (the caller's open transaction): one statement, which leaves
 * the transaction's `lock_timeout` as it found it (`fencedWriteCount`).
 */
export async function pullComplete(ctx: PgContext, db: PgQueryable, c: ClaimRef): Promise<boolean> {
  const written = await fencedWriteCount(
    db,
    (bound) => `UPDATE ${ctx.names.inbox}
        SET state = 'processed', processed_at = pg_catalog.clock_timestamp(), lease_expires_at = NULL,
            last_error = NULL, updated_at = pg_catalog.clock_timestamp()
      WHERE ${pullFence(bound)}
      RETURNING id`,
    [c.id, c.token],
  );
  return written === 1;
}

/** Fenced retry: `pending`, `attempt + 1`, due at db clock + `delayMs`, claim cleared. */
export async function pullRetry(ctx: PgContext, p: RetryItem): Promise<boolean> {
  const { rowCount } = await fencedQuery(
    ctx.pool,
    `UPDATE ${ctx.names.inbox}
        SET state = 'pending', attempt = attempt + 1,
            scheduled_at = pg_catalog.clock_timestamp() + ${msInterval('$3')},
            last_error = $4, claim_token = NULL, claimed_at = NULL, lease_expires_at = NULL,
            updated_at = pg_catalog.clock_timestamp()
      WHERE ${FENCE}`,
    [p.id, p.token, p.delayMs, p.error],
  );
  return rowCount === 1;
}

/** Fenced `dead` with `error` (attempt unchanged). */
export async function pullMarkDead(ctx: PgContext, p: DeadItem): Promise<boolean> {
  const { rowCount } = await fencedQuery(
    ctx.pool,
    `UPDATE ${ctx.names.inbox}
        SET state = 'dead', last_error = $3, lease_expires_at = NULL, updated_at = pg_catalog.clock_timestamp()
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
  const { rowCount } = await fencedQuery(
    ctx.pool,
    `UPDATE ${ctx.names.inbox}
        SET state = 'pending', claim_token = NULL, claimed_at = NULL, lease_expires_at = NULL,
            updated_at = pg_catalog.clock_timestamp()
      WHERE ${FENCE}`,
    [c.id, c.token],
  );
  return rowCount === 1;
}
