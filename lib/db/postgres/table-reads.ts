/**
 * Read-only queries the outbox and inbox tables share: counts per state with the oldest due
 * pending age, and the latest dead rows.
 *
 * `table` is a quoted, qualified name from `PgNames`; `label` is an unquoted column of it.
 *
 * `scheduled_at` may be `-infinity` or `infinity` (timestamptz takes both, and plain SQL is a way
 * to write rows), and subtracting either from a time is an error (22008), so no age here is taken
 * from an infinite `scheduled_at`: a row at `infinity` is never due and has no age; a row at
 * `-infinity` is due since forever and is aged from when it was written (`INFINITE_PAST_DUE_FROM`).
 */
import { PULL_AGE_SOURCE_LIMIT, type DeadRowSummary, type StatsScope, type TableStats } from '../driver.ts';
import { pgQuery, pgSimpleQuery, type PgQueryable } from './pg-pool.ts';
import { epochMs, epochTime, spanSeconds, type EpochMs } from './epoch-time.ts';

/** The earliest time a timestamptz holds: how long a row waited when no time of it is finite. */
const EARLIEST_TIME = `'4714-11-24 00:00:00+00 BC'::timestamptz`;

/**
 * SQL: when a row scheduled at `-infinity` counts as due from, for the backlog age: when it was
 * written (`created_at`). It could not be delivered before it existed, so its age is the time it
 * has waited — it breaches the backlog alarm when it waits too long, as any row does, and not the
 * moment it is written. A `created_at` that is not finite either (plain SQL again) is the
 * earliest time a timestamptz holds: how long the row waited is unknown, so it is aged as the
 * longest wait there can be, a finite one.
 */
const infinitePastDueFrom = (createdAt: string) => `CASE WHEN isfinite(${createdAt}) THEN ${createdAt} ELSE ${EARLIEST_TIME} END`;
const INFINITE_PAST_DUE_FROM = infinitePastDueFrom('created_at');

/**
 * SQL: when a pending row counts as due from, for its age (`scheduled_at`, or
 * `INFINITE_PAST_DUE_FROM` at `-infinity`), for a read that visits every row (`queuebox status`):
 * of the rows at `-infinity` it takes the earliest `created_at`, where the index probes of
 * `oldestDueFromSql` take the earliest written by `sequence` (the same row unless plain SQL wrote
 * `created_at` too).
 */
const DUE_FROM = `CASE WHEN scheduled_at = '-infinity' THEN ${INFINITE_PAST_DUE_FROM} ELSE scheduled_at END`;

/**
 * SQL: a timestamptz, when the oldest pending row of `table` matching `condition` counts as due
 * from — later than now when none is due yet, NULL when none is pending or all are at `infinity`
 * (never due). Two probes of a pending index on `(scheduled_at, sequence)` (the outbox's, the
 * relay's push index for the inbox's push rows): its first finite entry, and its first
 * `-infinity` entry (the earliest written of them, by `sequence`: one row read however many sit
 * at `-infinity`), of which `LEAST` takes the earlier (it skips a NULL).
 */
export function oldestDueFromSql(table: string, condition = 'TRUE'): string {
  return `LEAST(
              (SELECT min(scheduled_at) FROM ${table} WHERE state = 'pending' AND (${condition}) AND scheduled_at > '-infinity' AND scheduled_at < 'infinity'),
              (SELECT ${INFINITE_PAST_DUE_FROM} FROM ${table} WHERE state = 'pending' AND (${condition}) AND scheduled_at = '-infinity' ORDER BY sequence LIMIT 1))`;
}

/**
 * SQL: as `oldestDueFromSql`, for the inbox's pull rows, whose open rows are indexed per source
 * (`…_pull_open_idx`: source, scheduled_at, created_at, id): a loose scan of the sources with open
 * pull rows (one probe per source, not a read of every row; at most `PULL_AGE_SOURCE_LIMIT`), then
 * per source its first finite pending `scheduled_at` and, at `-infinity`, its earliest written row
 * (by `created_at`; one written at an infinite `created_at` counts as `INFINITE_PAST_DUE_FROM`
 * makes it: written at the earliest time), of which the earliest counts. The rows in flight of a
 * source sit in the same index: its probe steps over them, as many as the source has in handlers
 * (the pull claim steps over them too). NULL when no pull row is pending.
 */
export function oldestPullDueFromSql(table: string): string {
  const open = (alias: string) => `${alias}.state IN ('pending', 'processing') AND ${alias}.consumption = 'pull'`;
  const pending = `p.source = s.source AND ${open('p')} AND p.state = 'pending'`;
  return `(WITH RECURSIVE pull_sources AS (
              (SELECT f.source, 1 AS n FROM ${table} f WHERE ${open('f')} ORDER BY f.source LIMIT 1)
              UNION ALL
              SELECT (SELECT n.source FROM ${table} n WHERE ${open('n')} AND n.source > s.source ORDER BY n.source LIMIT 1), s.n + 1
                FROM pull_sources s WHERE s.source IS NOT NULL AND s.n < ${PULL_AGE_SOURCE_LIMIT})
            SELECT min(LEAST(
                     (SELECT min(p.scheduled_at) FROM ${table} p WHERE ${pending} AND p.scheduled_at > '-infinity' AND p.scheduled_at < 'infinity'),
                     (SELECT ${infinitePastDueFrom('p.created_at')} FROM ${table} p
                       WHERE ${pending} AND p.scheduled_at = '-infinity' ORDER BY p.created_at, p.id LIMIT 1),
                     (SELECT ${EARLIEST_TIME} FROM ${table} p
                       WHERE ${pending} AND p.scheduled_at = '-infinity' AND p.created_at = 'infinity' LIMIT 1)))
              FROM pull_sources s WHERE s.source IS NOT NULL)`;
}

/**
 * Rows per state (every state in `states` present, 0 when empty) and the age in seconds of the
 * oldest due `pending` row among those counted: every pending row (`queuebox status`: the inbox's
 * push and pull rows alike, as its pending count). With `pendingOnly` (the backlog gauge of a
 * pass), only the pending rows matching `backlogCondition` (SQL on the table's columns: the
 * relay's push rows) are counted and aged, through the partial pending index: the cost follows
 * the backlog, not the table with its finished rows.
 */
export async function tableStats(db: PgQueryable, table: string, states: readonly string[], backlogCondition = 'TRUE', scope: StatsScope = {}): Promise<TableStats> {
  if (scope.pendingOnly === true) {
    const result = await pgSimpleQuery(db, pendingStatsSql(table, backlogCondition));
    const rows = (Array.isArray(result) ? result[result.length - 1]! : result).rows as Array<{ n: string; oldest: string | null }>;
    return { counts: { pending: Number(rows[0]!.n) }, oldestPendingAgeSeconds: Math.max(0, Number(rows[0]!.oldest ?? 0)) };
  }
  // The age as an exact numeric (`spanSeconds`): a float8's text follows `extra_float_digits`.
  const { rows } = await pgQuery<{ state: string; n: string; oldest: string | null }>(
    db,
    `SELECT state, count(*) AS n,
            ${spanSeconds(`clock_timestamp() - min(${DUE_FROM}) FILTER (WHERE state = 'pending' AND scheduled_at <= clock_timestamp())`)} AS oldest
       FROM ${table} GROUP BY state`,
  );
  const counts: Record<string, number> = Object.fromEntries(states.map((s) => [s, 0]));
  let oldest = 0;
  for (const r of rows) {
    counts[r.state] = Number(r.n);
    if (r.oldest !== null) oldest = Math.max(oldest, Number(r.oldest));
  }
  return { counts, oldestPendingAgeSeconds: oldest };
}

/**
 * The pending count and the oldest pending age (`tableStats` with `pendingOnly`), as one simple
 * query of two statements (no bind values, `pgSimpleQuery`), so one round trip.
 *
 * The count reads no column (no clock call per row: a per-row `FILTER` on `clock_timestamp()`
 * made the count of 1,000,000 pending rows 1.5x slower), and the oldest is two probes of the
 * pending index (`oldestDueFromSql`). The earliest pending row is due exactly when any is: an age
 * below zero (nothing due yet) is 0, as no due row is.
 *
 * The count runs in the backend alone (`max_parallel_workers_per_gather = 0` for this statement's
 * transaction only: the statements of one query string share an implicit transaction). On a large
 * backlog the planner picks a parallel index-only scan, whose workers are processes started for
 * the read: they take cores from the claims running beside it, for a metric, and where processes
 * start slowly they cost more than the count itself. Measured on 2 cores (PostgreSQL 15, 950,000
 * pending rows): 140–240 ms with two workers, 44 ms alone.
 */
export function pendingStatsSql(table: string, pendingCondition = 'TRUE'): string {
  return `SET LOCAL max_parallel_workers_per_gather = 0;
     SELECT (SELECT count(*) FROM ${table} WHERE state = 'pending' AND (${pendingCondition})) AS n,
            ${spanSeconds(`clock_timestamp() - ${oldestDueFromSql(table, pendingCondition)}`)} AS oldest`;
}

/** The latest `limit` dead rows, newest first; `label` (topic or source) becomes `topicOrSource`. */
export async function deadList(db: PgQueryable, table: string, label: 'topic' | 'source', limit: number): Promise<DeadRowSummary[]> {
  const { rows } = await pgQuery<{ id: string; label: string; last_error: string | null; updated_ms: EpochMs }>(
    db,
    `SELECT id, ${label} AS label, last_error, ${epochMs('updated_at')} AS updated_ms FROM ${table} WHERE state = 'dead' ORDER BY updated_at DESC LIMIT $1`,
    [limit],
  );
  return rows.map((r) => ({ id: r.id, topicOrSource: r.label, lastError: r.last_error, updatedAt: epochTime(r.updated_ms) }));
}
