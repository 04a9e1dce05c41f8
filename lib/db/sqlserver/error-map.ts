/**
 * The one place that maps SQL Server (`mssql`/`tedious`) errors to QueueBox errors.
 */
import { QueueBoxError, TransientDatabaseError, UniqueViolationError } from '../../errors.ts';

/** Error number QueueBox's own batches `THROW` when `sp_getapplock` returns < 0 (timeout, deadlock, cancel). */
export const APPLOCK_NOT_GRANTED = 51000;

/**
 * Error number a claim batch `THROW`s when its connection already has an open transaction
 * (`@@TRANCOUNT` > 0): the claim would nest and commit nothing. Not transient: it names a defect.
 */
export const CLAIM_IN_OPEN_TRANSACTION = 51001;

/**
 * Error number a statement on QueueBox's own connection `THROW`s after rolling back a transaction
 * its pooled connection still held from a previous user (`transactionGuard`): the statement did
 * not run; run again, it goes through. Transient.
 */
export const LEFTOVER_TRANSACTION = 51002;

/**
 * Snapshot isolation update conflict: a transaction running under `SNAPSHOT` updated a row that
 * another transaction changed after the snapshot began (a pull row QueueBox renewed while the
 * handler ran, then `pullComplete` in the handler's transaction).
 */
export const SNAPSHOT_UPDATE_CONFLICT = 3960;

/** A lock waited for past the session's `LOCK_TIMEOUT` (the statement ended, the transaction goes on). */
export const LOCK_TIMEOUT_EXCEEDED = 1222;

/** SQL Server error numbers that are expected to pass when retried later. */
const TRANSIENT_NUMBERS = new Set([
  APPLOCK_NOT_GRANTED,
  LEFTOVER_TRANSACTION,
  1205, // deadlock victim
  1222, // lock request time out period exceeded
  601, // a NOLOCK read lost its place to data movement (the claims' head probes read NOLOCK); the next claim reads again
  -2, // client-side timeout reported as an error number
  233, 10053, 10054, 10060, 64, // transport errors
  40197, 40501, 40613, 49918, 49919, 49920, 10928, 10929, 4221, 40540, 40143, // Azure SQL: service busy, failover
]);

/**
 * Login failures that pass when retried: tedious reports a failed login as `ELOGIN` with the
 * server's message but without its number (it marks the ones it retries itself `isTransient`),
 * so the Azure failover and throttling messages (40613, 40197, 40501, 49918–49920) are recognised by their text.
 */
const TRANSIENT_LOGIN_MESSAGES = [
  /is not currently available/i, // 40613
  /error processing (the|your) request/i, // 40197
  /service is currently busy/i, // 40501
  /cannot process (the )?(create or update )?request/i, // 49918, 49919, 49920
  /too many (create or update )?operations in progress/i, // 49919
];

/** `mssql` error codes for connection loss and timeouts. */
const TRANSIENT_CODES = new Set(['ETIMEOUT', 'ESOCKET', 'ECONNCLOSED', 'ECONNRESET', 'ECONNREFUSED', 'ENOTOPEN', 'ENOCONN', 'ECANCEL', 'EPIPE']);

/** QueueBox's own `THROW` numbers: when one ended the batch, it is the error to report. */
const OWN_NUMBERS = new Set([APPLOCK_NOT_GRANTED, CLAIM_IN_OPEN_TRANSACTION, LEFTOVER_TRANSACTION]);

type MssqlErrorShape = { number?: unknown; code?: unknown; message?: unknown; precedingErrors?: unknown; originalError?: { code?: unknown; message?: unknown; isTransient?: unknown } };

/**
 * The error to classify: `mssql` rejects with the last error of the batch and keeps the earlier
 * ones in `precedingErrors`; a ROLLBACK of an outer transaction inside `sp_executesql` adds error
 * 266 after QueueBox's own `THROW`, which is the one that says what happened.
 */
function primaryError(error: MssqlErrorShape): MssqlErrorShape {
  const preceding = Array.isArray(error.precedingErrors) ? (error.precedingErrors as MssqlErrorShape[]) : [];
  if (typeof error.number === 'number' && OWN_NUMBERS.has(error.number)) return error;
  return preceding.find((p) => typeof p === 'object' && p !== null && typeof p.number === 'number' && OWN_NUMBERS.has(p.number)) ?? error;
}

/** Converts an `mssql` error into the matching QueueBox error; other errors pass through. */
export function mapMssqlError(error: unknown): unknown {
  if (error instanceof QueueBoxError || typeof error !== 'object' || error === null) return error;
  const e = primaryError(error as MssqlErrorShape);
  const message = String(e.message);
  if (e.number === SNAPSHOT_UPDATE_CONFLICT) {
    return new TransientDatabaseError(
      `database: ${message} (error 3960: your transaction runs under SNAPSHOT isolation and a QueueBox row it writes — a pull row renewed while your handler ran, or a row another worker settled — changed after the snapshot began; the transaction was rolled back: run it again, and run the transactions that call pullComplete or enqueue under READ COMMITTED, with or without READ_COMMITTED_SNAPSHOT)`,
      String(SNAPSHOT_UPDATE_CONFLICT),
      { cause: error },
    );
  }
  if (e.number === CLAIM_IN_OPEN_TRANSACTION) return new QueueBoxError(`database: ${message} (the pooled connection still holds a transaction)`, { cause: error });
  if (e.number === 2627 || e.number === 2601) {
    const constraint = /constraint '([^']+)'|index '([^']+)'/.exec(message);
    return new UniqueViolationError(constraint?.[1] ?? constraint?.[2], { cause: error });
  }
  if (typeof e.number === 'number' && TRANSIENT_NUMBERS.has(e.number)) {
    return new TransientDatabaseError(`database: ${message}`, String(e.number), { cause: error });
  }
  if (e.code === 'ELOGIN' || e.originalError?.code === 'ELOGIN') {
    const texts = `${message} ${String(e.originalError?.message ?? '')}`;
    if (e.originalError?.isTransient === true || TRANSIENT_LOGIN_MESSAGES.some((m) => m.test(texts))) {
      return new TransientDatabaseError(`database login: ${message}`, 'ELOGIN', { cause: error });
    }
    return error;
  }
  // mssql wraps driver errors (code EREQUEST/ECONNCLOSED…); the socket's code is on originalError.
  const code = [e.code, e.originalError?.code].find((c): c is string => typeof c === 'string' && TRANSIENT_CODES.has(c));
  if (code !== undefined) return new TransientDatabaseError(`database: ${message}`, code, { cause: error });
  return error;
}
