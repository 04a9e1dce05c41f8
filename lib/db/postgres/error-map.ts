/**
 * The one place that maps PostgreSQL error codes to QueueBox errors.
 */
import { QueueBoxError, TransientDatabaseError, UniqueViolationError } from '../../errors.ts';

/** SQLSTATEs that are expected to pass when retried later. */
const TRANSIENT = new Set([
  '40001', // serialization_failure
  '40P01', // deadlock_detected
  '55P03', // lock_not_available
  '57014', // query_canceled (statement_timeout)
  '57P01', // admin_shutdown (pg_terminate_backend, restart)
  '57P02', // crash_shutdown
  '57P03', // cannot_connect_now
  '08000', '08003', '08006', '08001', '08004', // connection exceptions
  '53300', // too_many_connections
  '25P03', // idle_in_transaction_session_timeout
]);

const NETWORK = new Set(['ECONNRESET', 'ECONNREFUSED', 'EPIPE', 'ETIMEDOUT', 'ENOTFOUND']);

/** Converts a `pg` error into the matching QueueBox error; other errors pass through. */
export function mapPgError(error: unknown): unknown {
  if (error instanceof QueueBoxError || typeof error !== 'object' || error === null) return error;
  const code = (error as { code?: unknown }).code;
  const message = (error as { message?: unknown }).message;
  if (code === '23505') {
    return new UniqueViolationError((error as { constraint?: string }).constraint, { cause: error });
  }
  if (typeof code === 'string' && (TRANSIENT.has(code) || NETWORK.has(code))) {
    return new TransientDatabaseError(`database: ${String(message)}`, code, { cause: error });
  }
  if (typeof message === 'string' && /Connection terminated|connection timeout|Client has encountered a connection error/i.test(message)) {
    return new TransientDatabaseError(`database: ${message}`, undefined, { cause: error });
  }
  return error;
}
