/**
 * `enqueue`: the application's side of the transactional outbox.
 *
 * The row is written through the caller's own transaction handle, so it commits or rolls back
 * with the business change. Nothing here opens a connection.
 */
import { IDENTIFIER_PATTERN } from '../config/identifier.ts';
import { isCallerExecutor, refusePool, writeInsidePgTransaction, type CallerExecutor, type PgTransactionClient } from '../db/caller-transaction.ts';
import type { CallerTransaction, EnqueueMessage, OutboxMessageInput } from '../db/driver.ts';
import { importOptional } from '../optional-package.ts';
import { pgNames } from '../db/postgres/names.ts';
import { pgOutboxInsertStatement } from '../db/postgres/caller-statements.ts';
import { outboxInsert } from '../db/postgres/outbox-queries.ts';
import { mssqlNames } from '../db/sqlserver/names.ts';
import { sqlServerCallerOutboxInsert } from '../db/sqlserver/caller-statements.ts';
import type { PgQueryable } from '../db/postgres/pg-pool.ts';
import { mapOutboxIdConflict } from '../db/postgres/error-map.ts';
import { QueueBoxError, UsageError, ValidationError } from '../errors.ts';
import { checkFiniteNumbers, checkMaxAttempts, validateOutboxMessage } from './validate-message.ts';
import { captureTraceContext } from '../observability/trace-context.ts';

export interface EnqueueOptions {
  /** Schema of the outbox table; default `public` (PostgreSQL) or `dbo` (SQL Server). */
  schema?: string;
  /** Outbox table name; default `outbox`. */
  table?: string;
  /** `max_attempts` (deliveries, the first included) when the message does not set it: an integer from 1 to 1000; default 5. */
  maxAttempts?: number;
}

/** The keys of `EnqueueOptions`; any other is refused (a misspelt `schema` would write to the default schema). */
const OPTION_KEYS: ReadonlySet<string> = new Set(['schema', 'table', 'maxAttempts'] satisfies Array<keyof EnqueueOptions>);

/** Throws `UsageError` naming the first key of `options` that is not an option of `enqueue`. */
function checkOptionKeys(options: unknown): void {
  if (typeof options !== 'object' || options === null || Array.isArray(options)) {
    throw new UsageError(`enqueue options must be an object ({ schema, table, maxAttempts }), got ${Array.isArray(options) ? 'an array' : options === null ? 'null' : typeof options}`);
  }
  for (const key of Object.keys(options)) {
    if (!OPTION_KEYS.has(key)) throw new UsageError(`enqueue options.${key} is not an option of enqueue: the options are schema, table and maxAttempts`);
  }
}

/** True for an `mssql` Transaction (it makes requests; a pg client has `query`). */
function isMssqlTransaction(tx: unknown): boolean {
  return typeof tx === 'object' && tx !== null && typeof (tx as { request?: unknown }).request === 'function' && typeof (tx as { query?: unknown }).query !== 'function';
}

/** The same INSERT through a data-layer library's transaction (`queuebox/<library>`), after the same checks. */
async function enqueueThrough(tx: CallerExecutor, m: OutboxMessageInput, where: { schema: string | undefined; table: string }, defaults: { maxAttempts: number }): Promise<string> {
  const tables = { outbox: where.table, inbox: 'inbox', maintenance: 'queuebox_maintenance' };
  const insert = async (db: Pick<CallerExecutor, 'query'>): Promise<string> => {
    if (tx.dialect === 'sqlserver') {
      const { id, statement } = sqlServerCallerOutboxInsert(mssqlNames(where.schema ?? 'dbo', tables), m, defaults);
      await db.query(statement.text, statement.values);
      return id;
    }
    const { text, values } = pgOutboxInsertStatement(pgNames(where.schema ?? 'public', tables), m, defaults);
    const { rows } = await db.query(text, values);
    return String(rows[0]!.id);
  };
  return writeInsidePgTransaction(tx, 'enqueue', (db) => insert(db).catch(idConflict(m)), (id) => `outbox row ${id}`);
}

/** Rethrows a duplicate `message.id` as the error that names it (`mapOutboxIdConflict`), any other error as it is. */
function idConflict(m: OutboxMessageInput): (error: unknown) => never {
  return (error) => {
    throw mapOutboxIdConflict(error, m.id);
  };
}

/**
 * Inserts one outbox message inside the caller's open transaction and returns its id.
 *
 * `tx` is a `pg` client on which the caller ran `BEGIN` (or an `mssql` Transaction, or a library's
 * transaction wrapped by `queueboxTransaction` of `queuebox/<library>`). The row records the
 * caller's trace context (`captureTraceContext`: OpenTelemetry's active span, else the Lambda
 * invocation's X-Ray trace header), which the poller publishes with the message. Throws
 * `ValidationError` naming the field when the message is invalid (one message per call: an array
 * is refused), `UsageError` for an option `enqueue` does not have, a `pg.Pool` (its queries would
 * run outside the transaction), a TypeORM object (`queuebox/typeorm` takes those) or a client
 * outside a transaction block (no `BEGIN`: the row would commit on its own); nothing is written
 * then. A `message.id` already in the table is refused by the database: `UniqueViolationError`
 * naming `message.id`.
 */
export async function enqueue(tx: CallerTransaction, message: EnqueueMessage, options: EnqueueOptions = {}): Promise<string> {
  // Lengths count as the columns of the database the row goes to (SQL Server: UTF-16 code units).
  const dialect = (isCallerExecutor(tx) ? tx.dialect === 'sqlserver' : isMssqlTransaction(tx)) ? 'sqlserver' : 'postgres';
  const validated = validateOutboxMessage(message, dialect);
  // The relay's payloads come parsed from stored JSON text, which is what it stores; here the
  // text is JSON.stringify's, which writes null for NaN and Infinity.
  checkFiniteNumbers('message.payload', validated.payload, validated.payloadText!);
  checkOptionKeys(options);
  const table = options.table ?? 'outbox';
  if (!IDENTIFIER_PATTERN.test(table)) throw new ValidationError('options.table', 'must be a lower-case SQL identifier');
  if (options.schema !== undefined && !IDENTIFIER_PATTERN.test(options.schema)) throw new ValidationError('options.schema', 'must be a lower-case SQL identifier');
  if (options.maxAttempts !== undefined) checkMaxAttempts('options.maxAttempts', options.maxAttempts);
  const defaults = { maxAttempts: options.maxAttempts ?? 5 };
  const m = { ...validated, trace: captureTraceContext() };
  if (isCallerExecutor(tx)) return enqueueThrough(tx, m, { schema: options.schema, table }, defaults);
  refusePool(tx, 'enqueue');
  if (isMssqlTransaction(tx)) {
    const { sqlServerOutboxInsert } = await importOptional('mssql', 'enqueue on an mssql Transaction', () => import('../db/sqlserver/outbox-queries.ts'));
    return sqlServerOutboxInsert({ schema: options.schema ?? 'dbo', table }, tx, m, defaults).catch(idConflict(m));
  }
  if (typeof tx !== 'object' || tx === null || typeof (tx as PgQueryable).query !== 'function') {
    throw new QueueBoxError('enqueue needs the caller transaction: a pg client inside BEGIN, or an mssql Transaction');
  }
  const names = pgNames(options.schema ?? 'public', { outbox: table, inbox: 'inbox', maintenance: 'queuebox_maintenance' });
  return writeInsidePgTransaction(
    tx as PgTransactionClient,
    'enqueue',
    // `db` is `tx`, or a handle that sends the transaction check with the INSERT (pg < 8.21, an
    // object whose query forwards).
    (db) => outboxInsert(names, db as PgQueryable, m, defaults).catch(idConflict(m)),
    (id) => `outbox row ${id}`,
  );
}
