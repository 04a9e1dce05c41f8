/**
 * PostgreSQL outbox operations (driver methods `outbox*`).
 *
 * Every finishing write is fenced on id + `processing` + token + `lease_expires_at >
 * clock_timestamp()` and settles a whole batch in one statement via `unnest` of parallel arrays.
 */
import type { DeadItem, DeadRowSummary, DeleteFinishedParams, ClaimRef, OutboxMessageInput, OutboxRow, ReclaimResult, ReplayFilter, RetryItem, StatsScope, TableStats } from '../driver.ts';
import { UsageError } from '../../errors.ts';
import { msInterval, type PgContext } from './context.ts';
import { leaseWithinBudget } from '../statement-budget.ts';
import { pgClaimQuery, pgQuery, type PgQueryable } from './pg-pool.ts';
import { claimRetryingInFlight, oncePerNamesAndLimit, OLDEST_WINDOW, windowLeftRoom } from './claim-text.ts';
import { runClaimStatement, type ClaimStatement } from './claim-functions.ts';
import { claimFollowers } from './outbox-claim-followers.ts';
import { claimSet, FENCE, fencedDeadMany, fencedQuery, fencedReleaseMany, fencedRenewMany, fencedRetryMany, reclaimExpired } from './fenced-writes.ts';
import type { PgNames } from './names.ts';
import { deadList, tableStats } from './table-reads.ts';
import { withLazyPayload } from '../lazy-payload.ts';
import { binder, replayMove, replayWhere } from './replay-preview.ts';
import { pgOutboxInsertStatement } from './caller-statements.ts';
import { parseStoredTraceContext } from '../../observability/trace-context.ts';


interface OutboxDbRow {
  id: string;
  topic: string;
  key: string | null;
  /** `payload::text`: the stored JSON text, not parsed (a jsonb column would be parsed, and large numbers rounded). */
  payload_text: string;
  headers: Record<string, string>;
  attempt: number;
  max_attempts: number;
  sequence: string;
  replay_count: number;
  /** Epoch milliseconds (a float8 parses faster than a timestamptz, twice per claimed row). */
  created_ms: number;
  claim_token: string;
  lease_expires_ms: number;
  trace_context: unknown;
}

function toOutboxRow(r: OutboxDbRow): OutboxRow {
  return withLazyPayload({
    id: r.id,
    topic: r.topic,
    key: r.key,
    payloadText: r.payload_text,
    headers: r.headers,
    attempt: r.attempt,
    maxAttempts: r.max_attempts,
    sequence: r.sequence,
    replayCount: r.replay_count,
    createdAt: new Date(r.created_ms),
    claimToken: r.claim_token,
    leaseExpiresAt: new Date(r.lease_expires_ms),
    trace: parseStoredTraceContext(r.trace_context),
  });
}

/** Inserts one outbox row through `db` (the caller's transaction or a relay transaction). */
export async function outboxInsert(names: PgNames, db: PgQueryable, m: OutboxMessageInput, defaults: { maxAttempts: number }): Promise<string> {
  const { text, values } = pgOutboxInsertStatement(names, m, defaults);
  const { rows } = await pgQuery<{ id: string }>(db, text, values);
  return rows[0]!.id;
}

/** Keyless: no key, or the empty key. */
const KEYLESS = `(c.key IS NULL OR c.key = '')`;

/** `c` is the head of a key with no row in flight (bind nothing; `c` is the candidate). */
const FREE_HEAD = `NOT EXISTS (
                  SELECT 1 FROM %T h
                   WHERE h.key = c.key
                     AND h.state IN ('pending', 'processing')
                     AND h.sequence < c.sequence)
                -- a later row of the key already in flight (this row committed after it was claimed)
                AND NOT EXISTS (
                  SELECT 1 FROM %T b
                   WHERE b.key = c.key AND b.key <> '' AND b.state = 'processing')`;

/** The retried and oldest CTEs both claim statements start with (see `outboxClaimMany`). */
function retriedAndOldest(t: string, limit: number): string {
  const freeHead = FREE_HEAD.replaceAll('%T', t);
  return `retried AS (
       SELECT c.id FROM ${t} c
        WHERE c.state = 'pending' AND c.attempt > 0 AND c.scheduled_at <= statement_timestamp()
          AND (${KEYLESS} OR (${freeHead}))
        ORDER BY c.scheduled_at, c.sequence
        LIMIT ${limit}
        FOR UPDATE SKIP LOCKED
     ),
     -- the oldest due rows: in a table where most keys can move, the batch is found here. The
     -- window is read in index order and joined back by ctid (one heap visit, no sort); a row
     -- updated meanwhile fails the ctid recheck of its lock and is skipped like a locked one.
     oldest AS (
       SELECT c.id FROM (
           SELECT w.ctid, w.scheduled_at, w.sequence FROM ${t} w
            WHERE w.state = 'pending' AND w.scheduled_at <= statement_timestamp()
            ORDER BY w.scheduled_at, w.sequence
            LIMIT ${limit * OLDEST_WINDOW}) w
         JOIN ${t} c ON c.ctid = w.ctid
        WHERE c.state = 'pending' AND c.attempt = 0
          AND (${KEYLESS} OR (${freeHead}))
        ORDER BY w.scheduled_at, w.sequence
        LIMIT ${limit}
        FOR UPDATE OF c SKIP LOCKED
     )`;
}

/** The result columns of both claim statements (`OutboxDbRow` and `window_rows`), for their functions. */
const CLAIM_RESULT = `id uuid, topic varchar, key varchar, payload_text text, headers jsonb, attempt integer,
    max_attempts integer, sequence bigint, replay_count integer, claim_token uuid, created_ms double precision,
    lease_expires_ms double precision, trace_context jsonb, window_rows integer`;

/** Returned with every claimed row: how many rows the claim's window gave (see `outboxClaimMany`). */
const WINDOW_ROWS = `,
            (SELECT count(*) FROM oldest)::int AS window_rows`;

/**
 * What both claim statements set and return. With `rowsPerKey` above 1 the claim also takes the
 * followers (`followerCtes`); `key_first` is true on the first row of each key in the claim (the
 * candidate) and false on its followers — the unique index `…_key_holder_in_flight_idx` holds
 * one first row per key in flight, so one claim per key.
 */
function claimUpdate(t: string, limit: number, rowsPerKey: number): string {
  const followers = claimFollowers(t, limit, rowsPerKey);
  // By id from the array of candidates, not a join: a join's order follows the row estimates, and
  // a plan kept from a nearly empty table would scan the whole table once per candidate.
  return `${followers.ctes}UPDATE ${t} o
        SET ${followers.set(claimSet('$1'))}
      WHERE o.id = ANY (ARRAY(${followers.claimed}))
  RETURNING o.id, o.topic, o.key, o.payload::text AS payload_text, o.headers, o.attempt, o.max_attempts, o.sequence,
            o.replay_count, o.claim_token,
            date_part('epoch', o.created_at) * 1000 AS created_ms,
            date_part('epoch', o.lease_expires_at) * 1000 AS lease_expires_ms, o.trace_context${WINDOW_ROWS}`;
}

/**
 * The full claim statement of `names` for batches of `limit` rows (bind parameter `$1`: the lease
 * in ms): retries, the window, and — when the window filled less than half the batch — the heads
 * of the keys that can move, then keyless rows. Each row also returns `window_rows`, how many
 * rows the window gave, so that the next claim knows whether the window alone would do.
 */
function outboxClaimText(names: PgNames, limit: number, rowsPerKey: number): string {
  const t = names.outbox;
  return `WITH RECURSIVE
     -- every key with an open row, one index probe each (a loose scan of the key-head index)
     open_keys AS (
       (SELECT k.key FROM ${t} k
         WHERE k.state IN ('pending', 'processing') AND k.key > ''
         ORDER BY k.key LIMIT 1)
       UNION ALL
       SELECT (SELECT k.key FROM ${t} k
                WHERE k.state IN ('pending', 'processing') AND k.key > open_keys.key
                ORDER BY k.key LIMIT 1)
         FROM open_keys WHERE open_keys.key IS NOT NULL
     ),
     -- the head of each key that can move: due, first attempt, nothing of its key in flight
     heads AS (
       SELECT h.id, h.scheduled_at, h.sequence
         FROM open_keys
         CROSS JOIN LATERAL (
           SELECT o.id, o.state, o.attempt, o.scheduled_at, o.sequence FROM ${t} o
            WHERE o.key = open_keys.key AND o.state IN ('pending', 'processing')
            ORDER BY o.sequence LIMIT 1) h
        WHERE h.state = 'pending' AND h.attempt = 0 AND h.scheduled_at <= statement_timestamp()
          AND NOT EXISTS (
            SELECT 1 FROM ${t} b WHERE b.key = open_keys.key AND b.key <> '' AND b.state = 'processing')
     ),
     ${retriedAndOldest(t, limit)},
     candidates AS (
       SELECT id FROM retried
       UNION ALL
       SELECT id FROM oldest
       UNION ALL
       -- only when the oldest rows filled less than half the batch: the heads of the keys that can
       -- move, oldest first, each then locked by its id in a lateral probe — the heads drive the
       -- lookup whatever the row estimates (a plan kept from a small table never scans the table
       -- per head), and the probes stop once the batch is full (heads a concurrent claim holds are
       -- skipped) …
       SELECT id FROM (
         SELECT c.id
           FROM (SELECT heads.id FROM heads
                  WHERE heads.id NOT IN (SELECT id FROM oldest) AND ${windowLeftRoom(String(limit))}
                  ORDER BY heads.scheduled_at, heads.sequence) f
           CROSS JOIN LATERAL (
             -- the state written so that no partial index's predicate matches it: a plan made on
             -- an empty table would otherwise scan the pending rows' index for the id
             SELECT c.id FROM ${t} c
              WHERE c.id = f.id AND (c.state || '') = 'pending'
                FOR UPDATE SKIP LOCKED) c
          LIMIT ${limit}) AS free_heads
       UNION ALL
       -- … then keyless rows
       SELECT id FROM (
         SELECT c.id FROM ${t} c
          WHERE c.state = 'pending' AND c.attempt = 0 AND ${KEYLESS}
            AND c.scheduled_at <= statement_timestamp()
            AND c.id NOT IN (SELECT id FROM oldest) AND ${windowLeftRoom(String(limit))}
          ORDER BY c.scheduled_at, c.sequence
          LIMIT ${limit}
          FOR UPDATE SKIP LOCKED) AS keyless
       LIMIT ${limit}
     )
     ${claimUpdate(t, limit, rowsPerKey)}`;
}

/**
 * The window claim: retries and the window of the oldest rows only — the same rows the full claim
 * takes whenever the window fills at least half the batch, for a fraction of its planning (no
 * recursive scan, no head or keyless branch to plan: 0.5 ms instead of 1.4 ms per claim). Each
 * row also returns `window_rows`.
 */
function outboxWindowClaimText(names: PgNames, limit: number, rowsPerKey: number): string {
  const t = names.outbox;
  return `WITH ${retriedAndOldest(t, limit)},
     candidates AS (
       SELECT id FROM retried
       UNION ALL
       SELECT id FROM oldest
       LIMIT ${limit}
     )
     ${claimUpdate(t, limit, rowsPerKey)}`;
}

/** A claim text of the outbox as a statement that may run as a function (`$1`: the lease in ms). */
function outboxStatement(names: PgNames, text: string): ClaimStatement {
  return { table: names.outboxTable, text, params: ['double precision'], returns: CLAIM_RESULT };
}

/** The claim statements of `names` at batch size `limit`, by rows per key. */
const claimStatementsByDepth = oncePerNamesAndLimit(() => new Map<number, { window: ClaimStatement; full: ClaimStatement }>());

/**
 * The window claim and the full claim of `names` at batch size `limit`, taking up to
 * `rowsPerKey` rows of a key (`outbox.rowsPerKey`; 1: the head only). Built once each.
 */
export function outboxClaimStatements(names: PgNames, limit: number, rowsPerKey = 1): { window: ClaimStatement; full: ClaimStatement } {
  if (!Number.isSafeInteger(rowsPerKey) || rowsPerKey < 1) throw new RangeError(`rows per key must be a positive integer, not ${rowsPerKey}`);
  const byDepth = claimStatementsByDepth(names, limit);
  let statements = byDepth.get(rowsPerKey);
  if (statements === undefined) {
    statements = {
      window: outboxStatement(names, outboxWindowClaimText(names, limit, rowsPerKey)),
      full: outboxStatement(names, outboxClaimText(names, limit, rowsPerKey)),
    };
    byDepth.set(rowsPerKey, statements);
  }
  return statements;
}

/**
 * Which claim a driver sends first: the window claim while the window has been filling batches
 * (keyless tables, many keys), the full claim while it has not (few keys holding a backlog).
 */
const windowFirst = new WeakMap<PgNames, boolean>();

/**
 * Claims due rows: keyless rows (no key or `''`) freely, keyed rows only when they are the head
 * of their key (no `pending`/`processing` row of the key with a lower `sequence`) and no row of
 * the key is in flight. `SKIP LOCKED` keeps concurrent claims off each other's rows; the head
 * check and the unique index on the key of `processing` rows keep one row per key in flight.
 *
 * Order: due retries (`attempt > 0`) first, then first attempts by `scheduled_at, sequence`: the
 * oldest rows first; when they fill less than half the batch (their keys are in flight), the
 * heads of the keys that can move, found by a loose scan of the key-head index, then keyless
 * rows. A claim thus reads a bounded window plus one head per open key, never the rows waiting
 * behind a key in flight; a window a few rows short (held by a concurrent claim) skips the scan.
 *
 * Two statements: while the window has been filling batches, the window claim (cheaper to plan);
 * it reports how many rows its window gave, and when that was less than half the batch — due
 * retries do not count: they say nothing of the heads past the window — the driver switches to
 * the full claim, at once when the window claim took nothing, else from the next claim on (the
 * rows it took are this claim's). The full claim reports the same count, and the driver switches
 * back when the window alone would have done. Every statement carries the whole batch size, so
 * there are two statement texts per batch size (one prepared statement each).
 */
export async function outboxClaimMany(ctx: PgContext, p: { limit: number; leaseMs: number; rowsPerKey?: number }): Promise<OutboxRow[]> {
  const statements = outboxClaimStatements(ctx.names, p.limit, p.rowsPerKey ?? 1);
  const claim = async (statement: ClaimStatement) =>
    (
      await claimRetryingInFlight(() =>
        runClaimStatement(ctx.names, ctx.claimFunctions, statement, (text) =>
          pgClaimQuery<OutboxDbRow & { window_rows: number }>(ctx.pool, text, () => [leaseWithinBudget(p.leaseMs)], ctx.prepared),
        ),
      )
    ).rows;
  const windowFilled = (rows: Array<{ window_rows: number }>) => rows.length > 0 && rows[0]!.window_rows * 2 >= p.limit;
  if (windowFirst.get(ctx.names) !== false) {
    const rows = await claim(statements.window);
    if (!windowFilled(rows)) windowFirst.set(ctx.names, false);
    if (rows.length > 0) return rows.map(toOutboxRow).sort(bySequence);
  }
  const rows = await claim(statements.full);
  if (windowFilled(rows)) windowFirst.set(ctx.names, true);
  return rows.map(toOutboxRow).sort(bySequence);
}

/** Claim order within a batch: `sequence` (a non-negative bigint as text) without BigInt allocations. */
function bySequence(a: OutboxRow, b: OutboxRow): number {
  return a.sequence.length - b.sequence.length || (a.sequence < b.sequence ? -1 : a.sequence > b.sequence ? 1 : 0);
}

function claimArrays(claims: ClaimRef[]): [string[], string[]] {
  return [claims.map((c) => c.id), claims.map((c) => c.token)];
}

export async function outboxRenewMany(ctx: PgContext, p: { claims: ClaimRef[]; leaseMs: number }): Promise<string[]> {
  return fencedRenewMany(ctx.pool, ctx.names.outbox, p.claims, p.leaseMs);
}

export async function outboxMarkSentMany(ctx: PgContext, p: { claims: ClaimRef[] }): Promise<string[]> {
  if (p.claims.length === 0) return [];
  const [ids, tokens] = claimArrays(p.claims);
  const { rows } = await fencedQuery<{ id: string }>(
    ctx.pool,
    `UPDATE ${ctx.names.outbox} t
        SET state = 'sent', updated_at = clock_timestamp(), lease_expires_at = NULL, last_error = NULL
       FROM unnest($1::uuid[], $2::uuid[]) AS s(id, token)
      WHERE t.id = s.id AND ${FENCE}
  RETURNING t.id`,
    [ids, tokens],
  );
  return rows.map((r) => r.id);
}

export async function outboxRetryMany(ctx: PgContext, p: { items: RetryItem[] }): Promise<string[]> {
  return fencedRetryMany(ctx.pool, ctx.names.outbox, p.items);
}

/** Fenced: claimed rows no call was offered back to `pending`, attempt unchanged. */
export async function outboxReleaseMany(ctx: PgContext, p: { claims: ClaimRef[] }): Promise<string[]> {
  return fencedReleaseMany(ctx.pool, ctx.names.outbox, p.claims);
}

export async function outboxMarkDeadMany(ctx: PgContext, p: { items: DeadItem[] }): Promise<string[]> {
  return fencedDeadMany(ctx.pool, ctx.names.outbox, p.items);
}

/**
 * Expired `processing` rows back to `pending` with `attempt + 1`, or `dead` when the lost
 * delivery was the row's last (`max_attempts`); gated by the shared throttle.
 */
export async function outboxReclaimExpired(ctx: PgContext, p: { throttleMs?: number }): Promise<ReclaimResult> {
  return reclaimExpired(ctx, ctx.names.outbox, `reclaim:${ctx.names.outboxTable}`, p.throttleMs, { maxAttempts: 't.max_attempts', call: 'delivery' });
}

export async function outboxStats(ctx: PgContext, scope: StatsScope = {}): Promise<TableStats> {
  return tableStats(ctx.pool, ctx.names.outbox, ['pending', 'processing', 'sent', 'dead'], 'TRUE', scope);
}

export async function outboxDeadList(ctx: PgContext, p: { limit: number }): Promise<DeadRowSummary[]> {
  return deadList(ctx.pool, ctx.names.outbox, 'topic', p.limit);
}

const REPLAY_SET = `SET state = 'pending', attempt = 0, scheduled_at = clock_timestamp(), last_error = NULL,
            claim_token = NULL, claimed_at = NULL, lease_expires_at = NULL,
            replay_count = replay_count + 1, updated_at = clock_timestamp()`;

/**
 * Moves the matching rows back to `pending`; returns how many moved. With `maxRows`, one
 * statement locks at most `maxRows + 1` matching rows and moves them only when there are no more
 * than `maxRows` (the UPDATE re-checks the filter on each locked row), else throws `ReplayLimitError`.
 */
export async function outboxReplay(ctx: PgContext, f: ReplayFilter): Promise<number> {
  const { values, bind } = binder();
  const where = replayWhere(f, bind);
  return replayMove(ctx, { table: ctx.names.outbox, set: REPLAY_SET, where, values, bind, maxRows: f.maxRows });
}

export async function outboxDeleteFinished(ctx: PgContext, p: DeleteFinishedParams): Promise<number> {
  if (p.state !== 'sent' && p.state !== 'dead') throw new UsageError(`outbox retention deletes only sent or dead rows, not ${p.state}`);
  const { rowCount } = await pgQuery(
    ctx.pool,
    `DELETE FROM ${ctx.names.outbox} WHERE id IN (
       SELECT id FROM ${ctx.names.outbox}
        WHERE state = $1 AND updated_at < clock_timestamp() - ${msInterval('$2')}
        LIMIT $3)`,
    [p.state, p.olderThanMs, p.limit],
  );
  return rowCount ?? 0;
}
