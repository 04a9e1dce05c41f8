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
  '25P04', // transaction_timeout (PostgreSQL 17+)
  '57P05', // idle_session_timeout (PostgreSQL 14+): an idle pooled connection the server closed
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
  if (code === '08P01' && typeof message === 'string' && message.startsWith('unsupported startup parameter')) return new QueueBoxError(poolerRefusal(message), { cause: error });
  if (code === '25006') return new QueueBoxError(readOnlyRefusal(String(message)), { cause: error });
  if (typeof code === 'string' && (TRANSIENT.has(code) || NETWORK.has(code))) {
    return new TransientDatabaseError(`database: ${String(message)}`, code, { cause: error });
  }
  if (typeof message === 'string' && /Connection terminated|connection timeout|Client has encountered a connection error/i.test(message)) {
    return new TransientDatabaseError(`database: ${message}`, undefined, { cause: error });
  }
  return error;
}

/**
 * A write refused because the transaction is read-only (SQLSTATE 25006, read_only_sql_transaction):
 * the role's or database's `default_transaction_read_only`, or a connection to a standby. The
 * server's text names the statement only; this says where to look.
 */
function readOnlyRefusal(message: string): string {
  return (
    `database: ${message}: QueueBox writes, and this connection's transactions are read-only. ` +
    "Either the role's or database's default_transaction_read_only is on (SHOW default_transaction_read_only; ALTER ROLE <role> SET default_transaction_read_only = off), " +
    'or database.url names a standby (a read replica): give it the primary'
  );
}

/**
 * PgBouncer refuses a connection that carries startup parameters it does not know (SQLSTATE
 * 08P01), and QueueBox sets its two timeouts that way (`createPgPool`): what to configure, in
 * PgBouncer and on the role (docs/operations.md, "Pool sizing behind RDS Proxy / PgBouncer").
 */
function poolerRefusal(message: string): string {
  return (
    `database: the connection pooler refused QueueBox's connection (${message}). QueueBox sets statement_timeout and idle_in_transaction_session_timeout as startup parameters; ` +
    'behind PgBouncer add `ignore_startup_parameters = statement_timeout, idle_in_transaction_session_timeout` to pgbouncer.ini and give QueueBox\'s role the same timeouts ' +
    '(ALTER ROLE <role> SET statement_timeout = <database.statementTimeoutMs>; ALTER ROLE <role> SET idle_in_transaction_session_timeout = <database.idleInTransactionTimeoutMs>); see docs/operations.md'
  );
}

/** `error` and the errors under it: a QueueBox error's `cause`, and a library's wrapping (Drizzle's `cause`, Sequelize's `original`, TypeORM's `driverError`, Prisma's `meta.driverAdapterError`). */
function* errorChain(error: unknown, depth = 0): Generator<Record<string, unknown>> {
  if (typeof error !== 'object' || error === null || depth > 4) return;
  const e = error as Record<string, unknown> & { meta?: { driverAdapterError?: unknown } };
  yield e;
  for (const inner of [e.cause, e.original, e.driverError, e.meta?.driverAdapterError]) yield* errorChain(inner, depth + 1);
}

/**
 * An outbox INSERT refused for a duplicate key, whatever carried the error — `pg` (mapped to
 * `UniqueViolationError` already), `mssql` (likewise), or a library wrapping either: PostgreSQL's
 * SQLSTATE 23505, SQL Server's error 2627 or 2601. The INSERT writes a `pending` row, and the
 * outbox's only unique constraint a pending row can break is its primary key, so the duplicate is
 * the caller's `message.id`: returned as a `UniqueViolationError` that says so (`constraint` the
 * one the database named, when it did), with the error as it came — the library's, or under a
 * QueueBox error the driver's — as `cause`. Any other error, and any error of a message without
 * an id, is returned as it is.
 */
export function mapOutboxIdConflict(error: unknown, id: string | undefined): unknown {
  if (id === undefined) return error;
  for (const e of errorChain(error)) {
    const meta = e.meta as { code?: unknown } | undefined;
    if (![e.code, e.originalCode, meta?.code].includes('23505') && e.number !== 2627 && e.number !== 2601) continue;
    const fromMessage = typeof e.message === 'string' ? /constraint '([^']+)'|constraint "([^"]+)"/.exec(e.message) : null;
    // `pg`'s `constraint`, postgres.js's `constraint_name`, Prisma's `constraint.index`, SQL Server's message.
    const named = [e.constraint, (e.constraint as { index?: unknown } | undefined)?.index, e.constraint_name, (error as { constraint?: unknown }).constraint, fromMessage?.[1], fromMessage?.[2]];
    const constraint = named.find((c): c is string => typeof c === 'string' && c !== '');
    const mapped = new UniqueViolationError(constraint, { cause: error instanceof QueueBoxError ? (error.cause ?? error) : error });
    mapped.message = `message.id ${id} is already the id of an outbox row (unique constraint ${constraint ?? 'on the id'}): each message needs an id of its own; nothing was written.`;
    // The stack's first line is the message as it was when the stack was taken.
    Error.captureStackTrace(mapped, mapOutboxIdConflict);
    return mapped;
  }
  return error;
}
