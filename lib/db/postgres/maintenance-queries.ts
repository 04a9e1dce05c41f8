/**
 * The maintenance table: the shared throttle, and the workers' last finished passes (a row per
 * worker, `pass-row-name.ts`, stamped at the end of each pass).
 *
 * The shared throttle: a row per gate, advanced by a conditional upsert.
 *
 * "Reclaim at most once per claimTimeoutMs / 5" must hold across overlapping Lambda invocations,
 * so the last run time lives in the database, compared with the database clock. `ON CONFLICT DO
 * UPDATE … WHERE` locks the gate row and re-checks the condition on its latest version, so of two
 * concurrent callers only one opens the gate.
 */
import type { PassFinished, PassWorker } from '../driver.ts';
import { passRowName, passRowNames } from '../pass-row-name.ts';
import { msInterval, type PgContext } from './context.ts';
import { pgQuery } from './pg-pool.ts';

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

/**
 * Opens the gate `name` when it was last opened `everyMs` or more ago (database clock), or never:
 * true for one caller of those that ask at once. One short statement on its own, so a caller that
 * then reads for a long time holds no lock another caller would wait on.
 */
export async function gateOpens(ctx: PgContext, name: string, everyMs: number): Promise<boolean> {
  if (!Number.isFinite(everyMs) || everyMs < 0) throw new RangeError(`gate interval must be a non-negative number of ms, not ${everyMs}`);
  const gate = reclaimGate(ctx, name, everyMs, 1);
  const { rows } = await pgQuery<{ opened: number }>(ctx.pool, `WITH ${gate.cte} SELECT count(*)::int AS opened FROM gate`, gate.values);
  return rows[0]!.opened > 0;
}

/** Records a finished pass of `worker`: one upsert of its row, stamped with the database clock. */
export async function passRecordFinished(ctx: PgContext, worker: PassWorker): Promise<void> {
  await pgQuery(
    ctx.pool,
    `INSERT INTO ${ctx.names.maintenance} AS m (name, last_run_at) VALUES ($1, clock_timestamp())
     ON CONFLICT (name) DO UPDATE SET last_run_at = clock_timestamp()`,
    [passRowName(worker, ctx.names.outboxTable)],
  );
}

/** The last finished pass of every worker that has one, with its age on the database clock. */
export async function passListFinished(ctx: PgContext): Promise<PassFinished[]> {
  const byName = passRowNames(ctx.names.outboxTable);
  const { rows } = await pgQuery<{ name: string; last_run_at: Date; age: number }>(
    ctx.pool,
    `SELECT name, last_run_at, EXTRACT(EPOCH FROM clock_timestamp() - last_run_at)::float8 AS age
       FROM ${ctx.names.maintenance} WHERE name = ANY($1::text[])`,
    [[...byName.keys()]],
  );
  return rows.map((r) => ({ worker: byName.get(r.name)!, finishedAt: r.last_run_at, ageSeconds: Math.max(0, r.age) }));
}
