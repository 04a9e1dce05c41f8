/**
 * Per-state counts and the oldest due pending row's age of one table (status, metrics, alarms).
 */
import type { StatsScope, TableStats } from '../driver.ts';
import { runStatement, type MssqlRunner, type MssqlStatement } from './mssql-pool.ts';

/**
 * Per-state counts and the age in ms of the oldest due pending row of `table`; `pendingFilter`
 * narrows "pending". With `pendingOnly`, only pending rows are read (one row, state `pending`).
 */
export function buildStats(table: string, pendingFilter = '', scope: StatsScope = {}): MssqlStatement {
  if (scope.pendingOnly === true) {
    return {
      text: `SELECT N'pending' AS state, COUNT_BIG(*) AS n,
       DATEDIFF_BIG(millisecond, MIN(CASE WHEN scheduled_at <= SYSUTCDATETIME() THEN scheduled_at END), SYSUTCDATETIME()) AS oldest_ms
  FROM ${table} WHERE state = N'pending'${pendingFilter};`,
      params: [],
    };
  }
  return {
    text: `SELECT state, COUNT_BIG(*) AS n,
       DATEDIFF_BIG(millisecond, MIN(CASE WHEN state = N'pending'${pendingFilter} AND scheduled_at <= SYSUTCDATETIME() THEN scheduled_at END), SYSUTCDATETIME()) AS oldest_ms
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

