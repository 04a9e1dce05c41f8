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
import { readInTurn } from '../gated-read.ts';
import { passRowName, passRowNames } from '../pass-row-name.ts';
import { msInterval, type PgContext } from './context.ts';
import { pgQuery } from './pg-pool.ts';
import { epochMs, epochTime, spanSeconds, type EpochMs } from './epoch-time.ts';

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
    RETURNING m.last_run_at)`,
    values: [name, throttleMs ?? null],
  };
}

/** µs since the epoch of a `timestamptz` expression, as a bigint: exact, unlike a JavaScript `Date`. */
const micros = (at: string) => `(extract(epoch FROM ${at}) * 1000000)::bigint`;

/**
 * A turn of a gate (`gateTurn`): when it opened the gate (µs since the epoch, as text), and when
 * the gate had opened before (`null`: its row was new, or held no finite time — the column's
 * default `-infinity` means never; giving the turn back then deletes the row, which means the same).
 */
export interface GateTurn {
  taken: string;
  previous: string | null;
}

/**
 * Opens the gate `name` when it was last opened `everyMs` or more ago (database clock), or never:
 * a turn for one caller of those that ask at once, `undefined` for the others. One short
 * statement on its own, so a caller that then reads for a long time holds no lock another caller
 * would wait on. The time the gate held before is read in the statement's snapshot: the upsert
 * re-checks its condition on the latest version, which another caller could have moved only by
 * opening the gate itself, and then this call does not.
 */
export async function gateTurn(ctx: PgContext, name: string, everyMs: number): Promise<GateTurn | undefined> {
  if (!Number.isFinite(everyMs) || everyMs < 0) throw new RangeError(`gate interval must be a non-negative number of ms, not ${everyMs}`);
  const gate = reclaimGate(ctx, name, everyMs, 1);
  const { rows } = await pgQuery<GateTurn>(
    ctx.pool,
    `WITH before AS (SELECT last_run_at FROM ${ctx.names.maintenance} WHERE name = $1), ${gate.cte}
     SELECT ${micros('gate.last_run_at')}::text AS taken, (SELECT CASE WHEN isfinite(before.last_run_at) THEN ${micros('before.last_run_at')}::text END FROM before) AS previous FROM gate`,
    gate.values,
  );
  return rows[0];
}

/**
 * Gives a turn back: the gate goes back to the time it held before (or its new row is deleted),
 * unless another caller has opened it since — the next caller then opens it at once.
 */
export async function gateGiveBack(ctx: PgContext, name: string, turn: GateTurn): Promise<void> {
  const at = (param: string) => `timestamptz 'epoch' + ${param}::bigint * interval '1 microsecond'`;
  await pgQuery(
    ctx.pool,
    turn.previous === null
      ? `DELETE FROM ${ctx.names.maintenance} WHERE name = $1 AND last_run_at = ${at('$2')}`
      : `UPDATE ${ctx.names.maintenance} SET last_run_at = ${at('$3')} WHERE name = $1 AND last_run_at = ${at('$2')}`,
    turn.previous === null ? [name, turn.taken] : [name, turn.taken, turn.previous],
  );
}

/** `read()` at most once per `everyMs` across every caller, through the gate `name` (`readInTurn`). */
export function gatedRead<T>(ctx: PgContext, name: string, everyMs: number, read: () => Promise<T>): Promise<T | undefined> {
  return readInTurn(() => gateTurn(ctx, name, everyMs), (turn) => gateGiveBack(ctx, name, turn), read);
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
  // The age as an exact numeric (`spanSeconds`), as the time is read (`epochMs`): not a float8,
  // whose text the session's `extra_float_digits` rounds.
  const { rows } = await pgQuery<{ name: string; last_run_ms: EpochMs; age: string }>(
    ctx.pool,
    `SELECT name, ${epochMs('last_run_at')} AS last_run_ms, ${spanSeconds('clock_timestamp() - last_run_at')} AS age
       FROM ${ctx.names.maintenance} WHERE name = ANY($1::text[])`,
    [[...byName.keys()]],
  );
  return rows.map((r) => ({ worker: byName.get(r.name)!, finishedAt: epochTime(r.last_run_ms), ageSeconds: Math.max(0, Number(r.age)) }));
}
