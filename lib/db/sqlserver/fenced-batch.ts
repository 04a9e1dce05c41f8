/**
 * Fenced batch writes (renew, sent/processed, retry, dead) shared by the outbox and inbox tables.
 *
 * One statement settles a whole batch: the rows come from `OPENJSON(@p_items)`, each matched on
 * all four fence conditions, and `OUTPUT inserted.id INTO @v_changed` collects the rows that
 * kept their claim, which the batch then selects. An `OUTPUT` without `INTO` fails (error 334)
 * once an application adds an enabled trigger for that action to the table: see "Triggers" in
 * "OUTPUT clause (Transact-SQL)", learn.microsoft.com/sql/t-sql/queries/output-clause-transact-sql.
 */
import { mssql } from './mssql-module.ts';
import type { ClaimRef } from '../driver.ts';
import { FencedLockTimeoutError, TransientDatabaseError } from '../../errors.ts';
import { LOCK_TIMEOUT_EXCEEDED } from './error-map.ts';
import { dbNowPlusMs, leaseParam, LOCK_WAIT_MS, lowerUuid, msValue, param, retryDeadlocks, runStatement, type MssqlRunner, type MssqlStatement } from './mssql-pool.ts';

/** The four fence conditions (seed: the claim fence) on alias `r`, with the batch row `s(id, token)`. */
export const FENCE = `r.id = s.id AND r.state = N'processing' AND r.claim_token = s.token AND r.lease_expires_at > SYSUTCDATETIME()`;

/** Which fenced write: its SET list and the extra OPENJSON columns it reads. */
const FENCED = {
  renew: { set: `lease_expires_at = ${dbNowPlusMs('@p_lease_ms')}`, columns: '' },
  sent: { set: "state = N'sent', updated_at = SYSUTCDATETIME(), lease_expires_at = NULL, last_error = NULL", columns: '' },
  processed: { set: "state = N'processed', processed_at = SYSUTCDATETIME(), updated_at = SYSUTCDATETIME(), lease_expires_at = NULL, last_error = NULL", columns: '' },
  retry: {
    // The token stays on the pending row, as on PostgreSQL (where a retry sent again after a lost
    // answer recognises the row by it): a claim sets a new one, a replay clears it.
    set: `state = N'pending', attempt = r.attempt + 1, scheduled_at = ${dbNowPlusMs('s.delay_ms')}, last_error = s.error,
         lease_expires_at = NULL, claimed_at = NULL, updated_at = SYSUTCDATETIME()`,
    columns: ", delay_ms BIGINT '$.delayMs', error NVARCHAR(MAX) '$.error'",
  },
  release: { set: "state = N'pending', claimed_at = NULL, lease_expires_at = NULL, updated_at = SYSUTCDATETIME()", columns: '' },
  dead: { set: "state = N'dead', last_error = s.error, lease_expires_at = NULL, updated_at = SYSUTCDATETIME()", columns: ", error NVARCHAR(MAX) '$.error'" },
} as const;

/** Kinds of fenced batch writes. */
export type FencedKind = keyof typeof FENCED;

/**
 * A fenced batch write on `table` (alias `r`): one statement for the whole batch, rows from
 * `OPENJSON(@p_items)`; `OUTPUT inserted.id INTO @v_changed`, then selected, reports the rows
 * that kept their claim.
 */
export function buildFencedBatch(
  table: string,
  kind: FencedKind,
  items: ReadonlyArray<ClaimRef & { delayMs?: number; error?: string }>,
  options: { leaseMs?: number; extraCondition?: string } = {},
): MssqlStatement {
  const f = FENCED[kind];
  const params = [
    param(
      'p_items',
      mssql().NVarChar(mssql().MAX),
      JSON.stringify(items.map((i) => ({ id: i.id, token: i.token, delayMs: msValue('delayMs', i.delayMs ?? 0, true), error: i.error ?? null }))),
    ),
  ];
  if (kind === 'renew') params.push(leaseParam('p_lease_ms', options.leaseMs ?? 0));
  return {
    text: `DECLARE @v_changed TABLE (id UNIQUEIDENTIFIER NOT NULL);
UPDATE r
   SET ${f.set}
OUTPUT inserted.id INTO @v_changed (id)
  FROM ${table} AS r
 INNER JOIN OPENJSON(@p_items) WITH (id UNIQUEIDENTIFIER '$.id', token UNIQUEIDENTIFIER '$.token'${f.columns}) AS s ON r.id = s.id
 WHERE ${FENCE}${options.extraCondition ?? ''};
SELECT id FROM @v_changed;`,
    params,
  };
}

/**
 * Runs a fenced batch; returns the ids (lower-case) that changed. On the pool, a deadlock victim
 * (1205) runs again: the statement was rolled back whole and the fence decides again, so a
 * deadlock never turns a landed `sent` into a lost claim and a duplicate publish. Inside a
 * transaction the deadlock ended the transaction, and its owner decides.
 *
 * A row lock waited for past `LOCK_TIMEOUT` (1222: another transaction kept a row of the batch
 * locked) ended the statement, which changed nothing: `FencedLockTimeoutError`, as on PostgreSQL
 * (where the wait is bounded by the lease): the workers count the batch's claims as lost and leave
 * the rows to the reclaim, rather than failing their pass.
 */
export async function runFencedBatch(runner: MssqlRunner, statement: MssqlStatement): Promise<string[]> {
  const run = async () => (await runStatement<{ id: string }>(runner, statement)).recordset.map((r) => lowerUuid(r.id));
  try {
    return await (runner instanceof mssql().ConnectionPool ? retryDeadlocks(run) : run());
  } catch (error) {
    if (error instanceof TransientDatabaseError && error.code === String(LOCK_TIMEOUT_EXCEEDED)) {
      throw new FencedLockTimeoutError(`fenced write: a row stayed locked by another transaction for the lock timeout (${LOCK_WAIT_MS} ms); nothing was written`, { cause: error });
    }
    throw error;
  }
}

