/**
 * Per-state counts and the oldest due pending row's age of one table (status, metrics, alarms).
 */
import type { StatsScope, TableStats } from '../driver.ts';
import { runStatement, type MssqlRunner, type MssqlStatement } from './mssql-pool.ts';

/**
 * Per-state counts and the age in ms of the oldest due pending row of `table` among those counted:
 * every pending row (`queuebox status`: the inbox's push and pull rows alike). With `pendingOnly`
 * (the backlog gauge of a pass), only the pending rows `backlogFilter` keeps (the relay's push
 * rows) are counted and aged (one row, state `pending`).
 */
export function buildStats(table: string, backlogFilter = '', scope: StatsScope = {}): MssqlStatement {
  if (scope.pendingOnly === true) {
    return {
      text: `SELECT N'pending' AS state, COUNT_BIG(*) AS n,
       DATEDIFF_BIG(millisecond, MIN(CASE WHEN scheduled_at <= SYSUTCDATETIME() THEN scheduled_at END), SYSUTCDATETIME()) AS oldest_ms
  FROM ${table} WHERE state = N'pending'${backlogFilter};`,
      params: [],
    };
  }
  return {
    text: `SELECT state, COUNT_BIG(*) AS n,
       DATEDIFF_BIG(millisecond, MIN(CASE WHEN state = N'pending' AND scheduled_at <= SYSUTCDATETIME() THEN scheduled_at END), SYSUTCDATETIME()) AS oldest_ms
  FROM ${table} GROUP BY state;`,
    params: [],
  };
}

/** Runs a stats statement; `states` are the table's states, reported as 0 when absent. */
export async function runStats(runner: MssqlRunner, statement: MssqlStatement, states: readonly string[]): Promise<TableStats> {
  const { recordset } = await runStatement<{ state: string; n: string | number; oldest_ms: string | number | null }>(runner, statement);
  const counts: Record<string, number> = Object.fromEntries(states.map((s) => [s, 0]));
  let oldest = 0;
  for (const r of recordset) {
    counts[r.state] = Number(r.n);
    if (r.oldest_ms !== null) oldest = Math.max(oldest, Number(r.oldest_ms) / 1000);
  }
  return { counts, oldestPendingAgeSeconds: oldest };
}

