/**
 * `queuebox/postgres-js`: `enqueue` (and pull `complete`) inside a postgres.js transaction —
 * `sql.begin(async (tx) => enqueue(tx, message))`, or a `tx.savepoint(…)` inside it. The statement
 * runs as `tx.unsafe(text, values)`: placeholders `$1…`, every value bound. The top-level `sql`
 * (a pool: each query on any connection) is refused; a reserved connection (`sql.reserve()`) is
 * accepted when the server confirms it is inside `BEGIN`. Only types are imported from `postgres`.
 */
import type postgres from 'postgres';
import type { EnqueueMessage, OutboxMessageInput } from '../db/driver.ts';
import { UsageError } from '../errors.ts';
import { callerExecutor, enqueueThrough, requireObject, rowsOf, type CallerExecutor, type EnqueueOptions } from './caller-executor.ts';

const HINT = 'sql.begin(async (tx) => …)';

/** A postgres.js transaction (`sql.begin`, `tx.savepoint`) or a reserved connection inside `BEGIN`. */
export type PostgresJsTransaction<T extends Record<string, unknown> = Record<string, never>> = postgres.TransactionSql<T> | postgres.ReservedSql<T>;

/** What postgres.js tells of the handle: a transaction has `savepoint`; a reserved connection cannot tell; the pool is outside. */
function inTransaction(tx: object): boolean | undefined {
  if (typeof (tx as { savepoint?: unknown }).savepoint === 'function') return true;
  if (typeof (tx as { release?: unknown }).release === 'function') return undefined;
  return false;
}

/** Wraps a postgres.js transaction for `enqueue` from `queuebox` and for the pull client's `complete`. */
export function queueboxTransaction<T extends Record<string, unknown>>(tx: PostgresJsTransaction<T>): CallerExecutor {
  requireObject(tx, 'postgres.js', HINT);
  if (typeof tx.unsafe !== 'function') throw new UsageError(`expected a postgres.js transaction (${HINT})`);
  return callerExecutor({
    library: 'postgres.js',
    hint: HINT,
    dialect: 'postgres',
    style: 'dollar',
    inTransaction: () => inTransaction(tx),
    run: async (text, values) => rowsOf(await tx.unsafe(text, values as postgres.ParameterOrJSON<T[keyof T]>[])),
  });
}

/** Inserts one outbox message inside the postgres.js transaction `tx`; same validation, errors and sequence as `enqueue`. */
export async function enqueue<T extends Record<string, unknown>>(tx: PostgresJsTransaction<T>, message: EnqueueMessage, options?: EnqueueOptions): Promise<string> {
  return enqueueThrough(queueboxTransaction(tx), message, options);
}

export type { CallerExecutor, EnqueueMessage, EnqueueOptions, OutboxMessageInput };
