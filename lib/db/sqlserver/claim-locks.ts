/**
 * The SQL Server claim locks of the seed, as batch text around a claim statement.
 *
 * - Outbox and relay claims: an exclusive application lock owned by the *session*, taken right
 *   before the claim and released right after it, in TRY/CATCH so an error releases it too. The
 *   claim UPDATE autocommits before the release, so the next holder's statement sees the claim
 *   committed, with or without READ_COMMITTED_SNAPSHOT.
 * - Pull claims: an exclusive application lock on the source name owned by the claim
 *   *transaction*, released by its COMMIT or ROLLBACK.
 *
 * Every lock waits at most `APPLOCK_WAIT_MS`; a return code < 0 (timeout, cancel, deadlock) raises
 * `APPLOCK_NOT_GRANTED`, which the error map turns into a `TransientDatabaseError` to back off from.
 */
import { APPLOCK_NOT_GRANTED } from './error-map.ts';
import { APPLOCK_WAIT_MS } from './mssql-pool.ts';

function nameLiteral(resource: string): string {
  if (!/^[a-z0-9_:]+$/.test(resource)) throw new Error(`unexpected lock name ${resource}`);
  return `N'${resource}'`;
}

/**
 * Wraps `claimSql` in the session lock `resource` (built from validated identifiers only).
 * A lock this session still holds from a batch the client aborted (request timeout) is released
 * first: claims on one connection run one after another, so such a lock is always stale.
 */
export function withSessionClaimLock(resource: string, claimSql: string): string {
  return `DECLARE @v_lock_resource NVARCHAR(255) = ${nameLiteral(resource)};
DECLARE @v_lock_result INT;
WHILE APPLOCK_MODE(N'public', @v_lock_resource, N'Session') <> N'NoLock'
  EXEC sp_releaseapplock @Resource = @v_lock_resource, @LockOwner = N'Session';
EXEC @v_lock_result = sp_getapplock @Resource = @v_lock_resource, @LockMode = N'Exclusive', @LockOwner = N'Session', @LockTimeout = ${APPLOCK_WAIT_MS};
IF @v_lock_result < 0
  THROW ${APPLOCK_NOT_GRANTED}, N'queuebox: claim lock not granted within the lock wait; back off and claim again', 1;
BEGIN TRY
${claimSql}
END TRY
BEGIN CATCH
  EXEC sp_releaseapplock @Resource = @v_lock_resource, @LockOwner = N'Session';
  THROW;
END CATCH;
EXEC sp_releaseapplock @Resource = @v_lock_resource, @LockOwner = N'Session';`;
}

/**
 * Prefix of a pull claim batch run inside a transaction: the exclusive lock on
 * `prefix + @p_source`, owned by the transaction.
 */
export function transactionPullLock(prefix: string): string {
  return `DECLARE @v_lock_resource NVARCHAR(255) = CONCAT(${nameLiteral(prefix)}, @p_source);
DECLARE @v_lock_result INT;
EXEC @v_lock_result = sp_getapplock @Resource = @v_lock_resource, @LockMode = N'Exclusive', @LockOwner = N'Transaction', @LockTimeout = ${APPLOCK_WAIT_MS};
IF @v_lock_result < 0
  THROW ${APPLOCK_NOT_GRANTED}, N'queuebox: pull claim lock of the source not granted within the lock wait; back off and claim again', 1;`;
}
