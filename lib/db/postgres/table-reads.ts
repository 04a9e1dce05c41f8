/**
 * Read-only queries the outbox and inbox tables share: counts per state with the oldest due
 * pending age, and the latest dead rows.
 *
 * `table` is a quoted, qualified name from `PgNames`; `label` is an unquoted column of it.
 */
import type { DeadRowSummary, StatsScope, TableStats } from '../driver.ts';
import { pgQuery, pgSimpleQuery, type PgQueryable } from './pg-pool.ts';

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
    const rows = (Array.isArray(result) ? result[result.length - 1]! : result).rows as Array<{ n: string; oldest: number | null }>;
    return { counts: { pending: Number(rows[0]!.n) }, oldestPendingAgeSeconds: Math.max(0, rows[0]!.oldest ?? 0) };
  }
  const { rows } = await pgQuery<{ state: string; n: string; oldest: number | null }>(
    db,
    `SELECT state, count(*) AS n,
            EXTRACT(EPOCH FROM clock_timestamp() - min(scheduled_at)
              FILTER (WHERE state = 'pending' AND scheduled_at <= clock_timestamp()))::float8 AS oldest
       FROM ${table} GROUP BY state`,
  );
  const counts: Record<string, number> = Object.fromEntries(states.map((s) => [s, 0]));
  let oldest = 0;
  for (const r of rows) {
    counts[r.state] = Number(r.n);
    if (r.oldest !== null) oldest = Math.max(oldest, r.oldest);
  }
  return { counts, oldestPendingAgeSeconds: oldest };
}

/**
 * The pending count and the oldest pending age (`tableStats` with `pendingOnly`), as one simple
 * query of two statements (no bind values, `pgSimpleQuery`), so one round trip.
 *
 * The count reads no column (no clock call per row: a per-row `FILTER` on `clock_timestamp()`
 * made the count of 1,000,000 pending rows 1.5x slower), and the oldest is the first entry of the
 * pending index. The earliest pending row is due exactly when any is: an age below zero (nothing
 * due yet) is 0, as no due row is.
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
            date_part('epoch', clock_timestamp() - (SELECT min(scheduled_at) FROM ${table} WHERE state = 'pending' AND (${pendingCondition}))) AS oldest`;
}

/** The latest `limit` dead rows, newest first; `label` (topic or source) becomes `topicOrSource`. */
export async function deadList(db: PgQueryable, table: string, label: 'topic' | 'source', limit: number): Promise<DeadRowSummary[]> {
  const { rows } = await pgQuery<{ id: string; label: string; last_error: string | null; updated_at: Date }>(
    db,
    `SELECT id, ${label} AS label, last_error, updated_at FROM ${table} WHERE state = 'dead' ORDER BY updated_at DESC LIMIT $1`,
    [limit],
  );
  return rows.map((r) => ({ id: r.id, topicOrSource: r.label, lastError: r.last_error, updatedAt: r.updated_at }));
}
