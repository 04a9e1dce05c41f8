/**
 * Scale-out on SQL Server: the due backlog counted up to a limit, and the slots of the passes a
 * pass starts (`lib/runtime/scale-out.ts`), one maintenance row per slot
 * (`scale-out-slot-name.ts`) whose `last_run_at` is the slot's lease expiry on the database clock.
 * The same statements as PostgreSQL's (`postgres/scale-out-queries.ts`), under the same names.
 *
 * A slot's token is its expiry in microseconds since 1970 (text). A missing slot row is inserted
 * under UPDLOCK/HOLDLOCK (a key-range lock: two callers cannot both insert it); an existing one is
 * taken by an UPDATE whose expiry condition is re-checked under the row's update lock.
 */
import { mssql } from './mssql-module.ts';
import type { ScaleOutSlot, ScaleOutWorker } from '../driver.ts';
import { scaleOutSlotName, scaleOutSlotNumber, scaleOutSlotPrefix } from '../scale-out-slot-name.ts';
import { dbNowPlusMs, leaseParam, msValue, param, runStatement, type MssqlRunner, type MssqlStatement } from './mssql-pool.ts';
import type { MssqlNames } from './names.ts';

/** The token of `column`: microseconds since 1970, as text. */
const token = (column: string) => `CAST(DATEDIFF_BIG(microsecond, CAST('1970-01-01' AS DATETIME2(7)), ${column}) AS NVARCHAR(20))`;

/** Due pending rows of `table` (`filter` narrows them), counted up to `@p_limit`. */
export function buildCountDue(table: string, limit: number, filter = ''): MssqlStatement {
  return {
    text: `SELECT COUNT_BIG(*) AS n FROM (
  SELECT TOP (@p_limit) 1 AS one FROM ${table} WHERE state = N'pending'${filter} AND scheduled_at <= SYSUTCDATETIME()
) due;`,
    params: [param('p_limit', mssql().Int, limit)],
  };
}

/** Runs a count statement of `buildCountDue`. */
export async function runCountDue(runner: MssqlRunner, statement: MssqlStatement): Promise<number> {
  const { recordset } = await runStatement<{ n: string | number }>(runner, statement);
  return Number(recordset[0]?.n ?? 0);
}

/**
 * One batch: counts the slots held (prefix match, any number), then walks slots `1..@p_slots`
 * taking free ones until `@p_want` minus the held ones are taken; returns each taken slot's name
 * and token.
 */
export function buildScaleOutAcquire(names: MssqlNames, p: { worker: ScaleOutWorker; slots: number; want: number; leaseMs: number }): MssqlStatement {
  const m = names.maintenance;
  const expiry = dbNowPlusMs('@p_lease_ms');
  return {
    text: `DECLARE @v_taken TABLE (name NVARCHAR(255) NOT NULL, last_run_at DATETIME2(7) NOT NULL);
DECLARE @v_need INT = @p_want - (SELECT COUNT(*) FROM ${m} WHERE LEFT(name, LEN(@p_prefix)) = @p_prefix AND last_run_at > SYSUTCDATETIME());
DECLARE @v_n INT = 1;
DECLARE @v_name NVARCHAR(255);
WHILE @v_n <= @p_slots AND (SELECT COUNT(*) FROM @v_taken) < @v_need
BEGIN
  SET @v_name = CONCAT(@p_prefix, @v_n);
  INSERT INTO ${m} (name, last_run_at)
  OUTPUT inserted.name, inserted.last_run_at INTO @v_taken (name, last_run_at)
  SELECT @v_name, ${expiry}
   WHERE NOT EXISTS (SELECT 1 FROM ${m} WITH (UPDLOCK, HOLDLOCK) WHERE name = @v_name);
  IF @@ROWCOUNT = 0
    UPDATE ${m} WITH (UPDLOCK, HOLDLOCK)
       SET last_run_at = ${expiry}
    OUTPUT inserted.name, inserted.last_run_at INTO @v_taken (name, last_run_at)
     WHERE name = @v_name AND last_run_at <= SYSUTCDATETIME();
  SET @v_n = @v_n + 1;
END;
SELECT name, ${token('last_run_at')} AS token FROM @v_taken;`,
    params: [
      param('p_prefix', mssql().NVarChar(255), scaleOutSlotPrefix(p.worker, names.outboxTable)),
      param('p_slots', mssql().Int, p.slots),
      param('p_want', mssql().Int, p.want),
      param('p_lease_ms', mssql().BigInt, msValue('leaseMs', p.leaseMs)),
    ],
  };
}

/** Runs `buildScaleOutAcquire`. */
export async function scaleOutAcquire(runner: MssqlRunner, names: MssqlNames, p: { worker: ScaleOutWorker; slots: number; want: number; leaseMs: number }): Promise<ScaleOutSlot[]> {
  if (p.slots < 1 || p.want < 1) return [];
  const { recordset } = await runStatement<{ name: string; token: string }>(runner, buildScaleOutAcquire(names, p));
  return recordset.map((r) => ({ slot: scaleOutSlotNumber(r.name), token: r.token })).sort((a, b) => a.slot - b.slot);
}

/** Takes over a slot still holding the token under a live lease: a lease `@p_lease_ms` from now; returns the new token. */
export function buildScaleOutStart(names: MssqlNames, p: { worker: ScaleOutWorker; slot: ScaleOutSlot; leaseMs: number }): MssqlStatement {
  return {
    // OUTPUT … INTO a table variable: a bare OUTPUT fails (error 334) on a table with a trigger.
    text: `DECLARE @v_started TABLE (last_run_at DATETIME2(7) NOT NULL);
UPDATE ${names.maintenance} WITH (UPDLOCK)
   SET last_run_at = ${dbNowPlusMs('@p_lease_ms')}
OUTPUT inserted.last_run_at INTO @v_started (last_run_at)
 WHERE name = @p_slot_name AND last_run_at > SYSUTCDATETIME() AND ${token('last_run_at')} = @p_token;
SELECT ${token('last_run_at')} AS token FROM @v_started;`,
    params: [
      param('p_slot_name', mssql().NVarChar(255), scaleOutSlotName(p.worker, names.outboxTable, p.slot.slot)),
      param('p_token', mssql().NVarChar(20), p.slot.token),
      // the started pass's own invocation: its lease ends with it (the acquire's start window does not)
      leaseParam('p_lease_ms', p.leaseMs),
    ],
  };
}

/** Runs `buildScaleOutStart`. */
export async function scaleOutStart(runner: MssqlRunner, names: MssqlNames, p: { worker: ScaleOutWorker; slot: ScaleOutSlot; leaseMs: number }): Promise<ScaleOutSlot | undefined> {
  const { recordset } = await runStatement<{ token: string }>(runner, buildScaleOutStart(names, p));
  return recordset[0] === undefined ? undefined : { slot: p.slot.slot, token: recordset[0].token };
}

/** Deletes the slot's row when it still holds the token; returns `released` (0 or 1). */
export function buildScaleOutRelease(names: MssqlNames, p: { worker: ScaleOutWorker; slot: ScaleOutSlot }): MssqlStatement {
  return {
    text: `DELETE FROM ${names.maintenance} WHERE name = @p_slot_name AND ${token('last_run_at')} = @p_token;
SELECT @@ROWCOUNT AS released;`,
    params: [param('p_slot_name', mssql().NVarChar(255), scaleOutSlotName(p.worker, names.outboxTable, p.slot.slot)), param('p_token', mssql().NVarChar(20), p.slot.token)],
  };
}

/** Runs `buildScaleOutRelease`. */
export async function scaleOutRelease(runner: MssqlRunner, names: MssqlNames, p: { worker: ScaleOutWorker; slot: ScaleOutSlot }): Promise<boolean> {
  const { recordset } = await runStatement<{ released: number }>(runner, buildScaleOutRelease(names, p));
  return Number(recordset[0]?.released ?? 0) === 1;
}
