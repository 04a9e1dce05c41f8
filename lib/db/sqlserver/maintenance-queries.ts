/**
 * The maintenance table: the shared throttle, and the workers' last finished passes (a row per
 * worker, `pass-row-name.ts`, stamped at the end of each pass); also retention's chunked deletes.
 *
 * The shared throttle: a row per gate, advanced by a conditional update.
 *
 * "Reclaim at most once per claimTimeoutMs / 5" must hold across overlapping Lambda invocations,
 * so the last run time lives in the database, compared with the database clock. A missing gate row
 * is inserted under UPDLOCK/HOLDLOCK (a key-range lock, so two first callers cannot both insert);
 * an existing one is advanced by an UPDATE whose condition is re-checked under the row's update
 * lock, so of two concurrent callers only one opens the gate.
 */
import { mssql } from './mssql-module.ts';
import type { PassFinished, PassWorker, ReclaimResult } from '../driver.ts';
import { DEADLOCK_ATTEMPTS } from '../deadlock-victim.ts';
import { readInTurn } from '../gated-read.ts';
import { passRowName, passRowNames } from '../pass-row-name.ts';
import { dbNowPlusMs, msValue, param, runStatement, type MssqlRunner, type MssqlStatement } from './mssql-pool.ts';
import type { MssqlNames } from './names.ts';

/**
 * One batch: open the gate `gateName` (always when `throttleMs` is undefined; a forced run still
 * records its time), then, only when it opened, run `reclaimSql` (updates of expired rows that
 * add their counts to `@v_reclaimed` and `@v_dead`). `params` are the reclaim's own bind
 * parameters. Returns `ran`, `reclaimed` and `dead` as the single result row.
 *
 * A reclaim that fails (a deadlock, a lock timeout) gives its turn back before the error is
 * reported: the gate goes back to the time it held (or its new row is deleted), unless another
 * caller has moved it since, so the next pass reclaims instead of waiting a whole throttle
 * interval. A request cancelled by the client (a timeout) ends the batch without its CATCH: that
 * turn stays taken.
 */
export function buildGatedReclaim(names: MssqlNames, gateName: string, throttleMs: number | undefined, reclaimSql: string, params: MssqlStatement['params'] = []): MssqlStatement {
  const m = names.maintenance;
  return {
    text: `DECLARE @v_gate_rows INT = 0;
DECLARE @v_reclaimed INT = 0;
DECLARE @v_dead INT = 0;
DECLARE @v_taken DATETIME2(7) = SYSUTCDATETIME();
DECLARE @v_previous DATETIME2(7) = NULL;
INSERT INTO ${m} (name, last_run_at)
SELECT @p_gate_name, @v_taken
 WHERE NOT EXISTS (SELECT 1 FROM ${m} WITH (UPDLOCK, HOLDLOCK) WHERE name = @p_gate_name);
SET @v_gate_rows = @@ROWCOUNT;
IF @v_gate_rows = 0
BEGIN
  UPDATE ${m} WITH (UPDLOCK, HOLDLOCK)
     SET @v_previous = last_run_at, last_run_at = @v_taken
   WHERE name = @p_gate_name
     AND (@p_throttle_ms IS NULL OR last_run_at <= ${dbNowPlusMs('-@p_throttle_ms')});
  SET @v_gate_rows = @@ROWCOUNT;
END;
IF @v_gate_rows > 0
BEGIN
  BEGIN TRY
  ${reclaimSql}
  END TRY
  BEGIN CATCH
    IF XACT_STATE() <> 0 ROLLBACK TRANSACTION;
    IF @v_previous IS NULL
      DELETE FROM ${m} WHERE name = @p_gate_name AND last_run_at = @v_taken;
    ELSE
      UPDATE ${m} SET last_run_at = @v_previous WHERE name = @p_gate_name AND last_run_at = @v_taken;
    THROW;
  END CATCH;
END;
SELECT CAST(CASE WHEN @v_gate_rows > 0 THEN 1 ELSE 0 END AS BIT) AS ran, @v_reclaimed AS reclaimed, @v_dead AS dead;`,
    params: [
      param('p_gate_name', mssql().NVarChar(255), gateName),
      param('p_throttle_ms', mssql().BigInt, throttleMs === undefined ? null : msValue('throttleMs', throttleMs)),
      ...params,
    ],
  };
}

/**
 * Expired `processing` rows of `table` (qualified) back to `pending` with `attempt + 1` (the lost
 * lease is a failed attempt), counted into `@v_reclaimed`; or `dead` when that attempt was the
 * row's last (`attempt + 1 >= maxAttempts`, attempt unchanged), counted into `@v_dead`; either way
 * `last_error` says the lease expired during the `call`. `maxAttempts` is a T-SQL expression (the
 * outbox column, or the relay's bound parameter); `extraCondition` narrows the rows.
 * Autocommitted chunks of `DELETE_CHUNK` rows: after an outage thousands of leases expire at once,
 * and one UPDATE of them all would escalate to a table lock that blocks every enqueue.
 *
 * A chunk chosen as a deadlock victim (1205) is run again inside the batch, up to
 * `DEADLOCK_ATTEMPTS` times in all after a short random pause (the remainder taken before `ABS`,
 * which overflows on the lowest INT): the chunks committed before it stay committed, and their
 * rows stay counted (a retry from the caller would start a new batch and
 * count only what is left). Any other error, or a chunk's last deadlock, goes to the caller: the
 * rows of the chunks committed before it are reclaimed but not in the counts.
 */
export function reclaimUpdateSql(table: string, rule: { maxAttempts: string; call: string }, extraCondition = ''): string {
  const last = `attempt + 1 >= ${rule.maxAttempts}`;
  return `DECLARE @v_chunk INT = 1;
  DECLARE @v_victim INT = 0;
  DECLARE @v_pause DATETIME;
  DECLARE @v_moved TABLE (state NVARCHAR(50) NOT NULL);
  WHILE @v_chunk > 0
  BEGIN
    BEGIN TRY
    UPDATE TOP (${DELETE_CHUNK}) ${table} WITH (ROWLOCK)
       SET state = CASE WHEN ${last} THEN N'dead' ELSE N'pending' END,
           attempt = CASE WHEN ${last} THEN attempt ELSE attempt + 1 END,
           last_error = CASE WHEN ${last}
             THEN CONCAT(N'gave up after ', attempt + 1, N' of ', ${rule.maxAttempts}, N' attempts: the lease of the last one expired during the ${rule.call} (the call did not finish within its lease)')
             ELSE CONCAT(N'lease expired during ${rule.call} attempt ', attempt + 1, N' of ', ${rule.maxAttempts}, N' (the call did not finish within its lease)') END,
           claim_token = NULL, lease_expires_at = NULL, claimed_at = NULL, updated_at = SYSUTCDATETIME()
    OUTPUT inserted.state INTO @v_moved (state)
     WHERE state = N'processing' AND lease_expires_at <= SYSUTCDATETIME()${extraCondition};
    SET @v_chunk = @@ROWCOUNT;
    SET @v_victim = 0;
    END TRY
    BEGIN CATCH
      IF XACT_STATE() <> 0 ROLLBACK TRANSACTION;
      SET @v_victim = @v_victim + 1;
      IF ERROR_NUMBER() <> 1205 OR @v_victim >= ${DEADLOCK_ATTEMPTS}
      BEGIN
        THROW;
      END;
      SET @v_pause = DATEADD(MILLISECOND, 5 + ABS(CHECKSUM(NEWID()) % (20 * @v_victim)), CAST(0 AS DATETIME));
      WAITFOR DELAY @v_pause;
    END CATCH;
  END;
  SELECT @v_reclaimed = COUNT(CASE WHEN state = N'pending' THEN 1 END), @v_dead = COUNT(CASE WHEN state = N'dead' THEN 1 END) FROM @v_moved;`;
}

/**
 * Opens the gate `gateName` when it was last opened `everyMs` or more ago (database clock), or
 * never, as the reclaim's gate opens (`buildGatedReclaim`): one short batch on its own, answering
 * `opened` (true for one caller of those that ask at once), with the time it set (`taken`) and the
 * time the gate held before (`previous`, NULL for a new row) as text of every digit (style 121), so
 * that a read that fails can give the turn back (`buildGateGiveBack`).
 */
export function buildGateOpens(names: MssqlNames, gateName: string, everyMs: number): MssqlStatement {
  const m = names.maintenance;
  return {
    text: `DECLARE @v_gate_rows INT = 0;
DECLARE @v_taken DATETIME2(7) = SYSUTCDATETIME();
DECLARE @v_previous DATETIME2(7) = NULL;
INSERT INTO ${m} (name, last_run_at)
SELECT @p_gate_name, @v_taken
 WHERE NOT EXISTS (SELECT 1 FROM ${m} WITH (UPDLOCK, HOLDLOCK) WHERE name = @p_gate_name);
SET @v_gate_rows = @@ROWCOUNT;
IF @v_gate_rows = 0
BEGIN
  UPDATE ${m} WITH (UPDLOCK, HOLDLOCK)
     SET @v_previous = last_run_at, last_run_at = @v_taken
   WHERE name = @p_gate_name
     AND last_run_at <= ${dbNowPlusMs('-@p_every_ms')};
  SET @v_gate_rows = @@ROWCOUNT;
END;
SELECT CAST(CASE WHEN @v_gate_rows > 0 THEN 1 ELSE 0 END AS BIT) AS opened,
       CONVERT(VARCHAR(27), @v_taken, 121) AS taken, CONVERT(VARCHAR(27), @v_previous, 121) AS previous;`,
    params: [param('p_gate_name', mssql().NVarChar(255), gateName), param('p_every_ms', mssql().BigInt, msValue('everyMs', everyMs))],
  };
}

/** A turn of a gate (`gateTurn`): the time it set and the time the gate held before (`null`: its row was new), style-121 text. */
export interface GateTurn {
  taken: string;
  previous: string | null;
}

/**
 * Gives a turn back, as a failed reclaim does in `buildGatedReclaim`: the gate goes back to the
 * time it held before (or its new row is deleted), unless another caller has opened it since.
 */
export function buildGateGiveBack(names: MssqlNames, gateName: string, turn: GateTurn): MssqlStatement {
  const m = names.maintenance;
  return {
    text: `IF @p_previous IS NULL
  DELETE FROM ${m} WHERE name = @p_gate_name AND last_run_at = CONVERT(DATETIME2(7), @p_taken, 121);
ELSE
  UPDATE ${m} SET last_run_at = CONVERT(DATETIME2(7), @p_previous, 121)
   WHERE name = @p_gate_name AND last_run_at = CONVERT(DATETIME2(7), @p_taken, 121);`,
    params: [param('p_gate_name', mssql().NVarChar(255), gateName), param('p_taken', mssql().VarChar(27), turn.taken), param('p_previous', mssql().VarChar(27), turn.previous)],
  };
}

/** Runs `buildGateOpens`: a turn when the gate opened for this caller, else `undefined`. */
export async function gateTurn(runner: MssqlRunner, names: MssqlNames, gateName: string, everyMs: number): Promise<GateTurn | undefined> {
  const { recordset } = await runStatement<{ opened: boolean; taken: string; previous: string | null }>(runner, buildGateOpens(names, gateName, everyMs));
  const row = recordset[0];
  return row?.opened === true ? { taken: row.taken, previous: row.previous ?? null } : undefined;
}

/** `read()` at most once per `everyMs` across every caller, through the gate `gateName` (`readInTurn`). */
export function gatedRead<T>(runner: MssqlRunner, names: MssqlNames, gateName: string, everyMs: number, read: () => Promise<T>): Promise<T | undefined> {
  return readInTurn(() => gateTurn(runner, names, gateName, everyMs), (turn) => runStatement(runner, buildGateGiveBack(names, gateName, turn)), read);
}

/** Runs a gated reclaim statement and reads its result row. */
export async function runGatedReclaim(runner: MssqlRunner, statement: MssqlStatement): Promise<ReclaimResult> {
  const result = await runStatement<{ ran: boolean; reclaimed: number; dead: number }>(runner, statement);
  const row = result.recordset[0];
  return { ran: row?.ran === true, reclaimed: Number(row?.reclaimed ?? 0), dead: Number(row?.dead ?? 0) };
}

/** Rows one retention DELETE or reclaim UPDATE touches at most: with every index entry they lock, far below the 5,000 locks that escalate to a table lock. */
export const DELETE_CHUNK = 500;

/**
 * Retention: deletes up to `@p_limit` rows of one finished `state` whose `timeColumn` is older
 * than `@p_older_than_ms`, in autocommitted chunks of `DELETE_CHUNK` rows (each releases its
 * locks before the next), and returns the count as `deleted`. The state is a literal, so the
 * filtered index of finished rows matches the statement.
 */
export function buildDeleteFinished(
  table: string,
  state: 'sent' | 'dead' | 'processed',
  timeColumn: 'updated_at' | 'created_at',
  limit: number,
  olderThanMs: number,
  extra: { condition: string; params: MssqlStatement['params'] } = { condition: '', params: [] },
): MssqlStatement {
  return {
    text: `DECLARE @v_cutoff DATETIME2(7) = ${dbNowPlusMs('-@p_older_than_ms')};
DECLARE @v_deleted INT = 0;
DECLARE @v_chunk INT = 1;
WHILE @v_chunk > 0 AND @v_deleted < @p_limit
BEGIN
  DELETE TOP (CASE WHEN @p_limit - @v_deleted < ${DELETE_CHUNK} THEN @p_limit - @v_deleted ELSE ${DELETE_CHUNK} END)
    FROM ${table} WITH (ROWLOCK)
   WHERE state = N'${state}' AND ${timeColumn} < @v_cutoff${extra.condition};
  SET @v_chunk = @@ROWCOUNT;
  SET @v_deleted = @v_deleted + @v_chunk;
END;
SELECT @v_deleted AS deleted;`,
    params: [param('p_limit', mssql().Int, limit), param('p_older_than_ms', mssql().BigInt, msValue('olderThanMs', olderThanMs)), ...extra.params],
  };
}

/** Runs a retention statement; returns the rows deleted. */
export async function runDeleteFinished(runner: MssqlRunner, statement: MssqlStatement): Promise<number> {
  const { recordset } = await runStatement<{ deleted: number }>(runner, statement);
  return Number(recordset[0]?.deleted ?? 0);
}

/**
 * Records a finished pass of `worker`: its row stamped with the database clock, inserted when
 * missing under UPDLOCK/HOLDLOCK (two first passes cannot both insert), else updated.
 */
export function buildPassRecordFinished(names: MssqlNames, worker: PassWorker): MssqlStatement {
  const m = names.maintenance;
  return {
    text: `INSERT INTO ${m} (name, last_run_at)
SELECT @p_pass_name, SYSUTCDATETIME()
 WHERE NOT EXISTS (SELECT 1 FROM ${m} WITH (UPDLOCK, HOLDLOCK) WHERE name = @p_pass_name);
IF @@ROWCOUNT = 0
  UPDATE ${m} SET last_run_at = SYSUTCDATETIME() WHERE name = @p_pass_name;`,
    params: [param('p_pass_name', mssql().NVarChar(255), passRowName(worker, names.outboxTable))],
  };
}

/** Reads every worker's last finished pass with its age in milliseconds on the database clock. */
export function buildPassListFinished(names: MssqlNames): MssqlStatement {
  const rowNames = [...passRowNames(names.outboxTable).keys()];
  return {
    text: `SELECT name, last_run_at, DATEDIFF_BIG(millisecond, last_run_at, SYSUTCDATETIME()) AS age_ms
  FROM ${names.maintenance}
 WHERE name IN (${rowNames.map((_, i) => `@p_pass_name_${i}`).join(', ')});`,
    params: rowNames.map((name, i) => param(`p_pass_name_${i}`, mssql().NVarChar(255), name)),
  };
}

/** Runs `buildPassListFinished`. */
export async function passListFinished(runner: MssqlRunner, names: MssqlNames): Promise<PassFinished[]> {
  const byName = passRowNames(names.outboxTable);
  const { recordset } = await runStatement<{ name: string; last_run_at: Date; age_ms: string | number }>(runner, buildPassListFinished(names));
  return recordset.map((r) => ({ worker: byName.get(r.name)!, finishedAt: r.last_run_at, ageSeconds: Math.max(0, Number(r.age_ms) / 1000) }));
}
