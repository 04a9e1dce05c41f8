/**
 * The shared throttle: a row per gate in the maintenance table, advanced by a conditional upsert.
 *
 * "Reclaim at most once per claimTimeoutMs / 5" must hold across overlapping Lambda invocations,
 * so the last run time lives in the database, compared with the database clock. `ON CONFLICT DO
 * UPDATE … WHERE` locks the gate row and re-checks the condition on its latest version, so of two
 * concurrent callers only one opens the gate.
 */
import { msInterval, type PgContext } from './context.ts';

/**
 * A CTE named `gate` that yields one row when this caller may run now (and records the run).
 * With `throttleMs` undefined the gate always opens (a forced run still records its time).
 * `firstParam` is the number of the first bind parameter the gate uses (it uses two).
 */
export function reclaimGate(ctx: PgContext, name: string, throttleMs: number | undefined, firstParam: number): { cte: string; values: unknown[] } {
  const nameParam = `$${firstParam}`;
  const throttleParam = `$${firstParam + 1}`;
  return {
    cte: `gate AS (
       INSERT INTO ${ctx.names.maintenance} AS m (name, last_run_at) VALUES (${nameParam}, clock_timestamp())
       ON CONFLICT (name) DO UPDATE SET last_run_at = clock_timestamp()
        WHERE ${throttleParam}::double precision IS NULL
           OR m.last_run_at <= clock_timestamp() - ${msInterval(throttleParam)}
    RETURNING 1)`,
    values: [name, throttleMs ?? null],
  };
}
