/**
 * The SQL Server claim batch: one explicit transaction that owns the claim's application lock.
 *
 * The batch starts with `SESSION_SETTINGS` (READ COMMITTED, `XACT_ABORT ON`, a `LOCK_TIMEOUT`),
 * refuses to run inside an open transaction (`@@TRANCOUNT` > 0: a nested `BEGIN`/`COMMIT` would
 * commit nothing and keep the lock), then `BEGIN TRANSACTION`, the exclusive lock owned by that
 * transaction, the claim, and `COMMIT`. The lock ends with the transaction whatever the client
 * does: an error rolls back (`XACT_ABORT`), and so does a client-side timeout or cancel (an
 * attention with `XACT_ABORT ON` rolls the open transaction back); a lost connection ends it too.
 * No lock can stay with a pooled connection.
 *
 * Every lock waits at most `APPLOCK_WAIT_MS`; a return code < 0 (timeout, cancel, deadlock)
 * raises `APPLOCK_NOT_GRANTED`, which the error map turns into a `TransientDatabaseError`.
 *
 * The lock serializes a whole table's claims, so nothing under it may wait for an application:
 * the outbox and relay picks wait for no row lock (a key whose lower row another transaction
 * holds is skipped, see `claim-order.ts`), and only their `UPDATE` can wait: its re-check for
 * QueueBox's own finishing write of a lower row, and its insert into the unique index of in-flight
 * rows for the finishing write of the key's in-flight row (a replayed row below it).
 */
import { APPLOCK_NOT_GRANTED, CLAIM_IN_OPEN_TRANSACTION } from './error-map.ts';
import { APPLOCK_WAIT_MS } from './mssql-pool.ts';

/** A lock name as a T-SQL literal; names are built from validated identifiers only. */
export function lockNameLiteral(resource: string): string {
  if (!/^[a-z0-9_:.]+$/.test(resource) || resource.length > 191) throw new Error(`unexpected lock name ${resource}`);
  return `N'${resource}'`;
}

/** The pull lock of the exact source `@p_source`: the prefix plus the SHA-256 of the name in hex (64 characters). */
export function pullLockExpression(prefix: string): string {
  return `CONCAT(${lockNameLiteral(prefix)}, CONVERT(NVARCHAR(64), HASHBYTES('SHA2_256', @p_source), 2))`;
}

/**
 * Wraps `claimSql` (statements that write the claimed rows into table variables) in the claim
 * transaction holding the exclusive lock named by the T-SQL expression `resource`; `@v_claim_start`
 * is the database clock when the batch began (the claims' leases start there); `resultSql`
 * runs after the COMMIT and returns the claimed rows, so a row reaches the client only once its
 * claim is committed.
 */
export function inClaimTransaction(resource: string, claimSql: string, resultSql: string): string {
  return `IF @@TRANCOUNT > 0
  THROW ${CLAIM_IN_OPEN_TRANSACTION}, N'queuebox: a claim must not run inside an open transaction', 1;
DECLARE @v_claim_start DATETIME2(7) = SYSUTCDATETIME();
DECLARE @v_lock_resource NVARCHAR(255) = ${resource};
DECLARE @v_lock_result INT;
BEGIN TRANSACTION;
EXEC @v_lock_result = sp_getapplock @Resource = @v_lock_resource, @LockMode = N'Exclusive', @LockOwner = N'Transaction', @LockTimeout = ${APPLOCK_WAIT_MS};
IF @v_lock_result < 0
BEGIN
  ROLLBACK TRANSACTION;
  THROW ${APPLOCK_NOT_GRANTED}, N'queuebox: claim lock not granted within the lock wait; back off and claim again', 1;
END;
${claimSql}
COMMIT TRANSACTION;
${resultSql}`;
}
