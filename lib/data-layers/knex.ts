/**
 * `queuebox/knex`: `enqueue` (and pull `complete`) inside a Knex transaction —
 * `knex.transaction(async (trx) => enqueue(trx, message))` or `const trx = await knex.transaction()`.
 * The statement runs as `trx.raw(text, bindings)` with Knex's `?` placeholders, every value bound.
 * The `knex` instance itself (not a transaction: `isTransaction` unset) is refused, and so is a
 * transaction Knex reports completed. PostgreSQL (`pg`) and SQL Server (`mssql`) clients. Only
 * types are imported from `knex`.
 */
import type { Knex } from 'knex';
import type { EnqueueMessage, OutboxMessageInput } from '../db/driver.ts';
import { UsageError } from '../errors.ts';
import { callerExecutor, enqueueThrough, requireObject, rowsOf, type CallerExecutor, type EnqueueOptions } from './caller-executor.ts';

const HINT = 'knex.transaction(async (trx) => …)';

/** True when the Knex client is SQL Server (`client: 'mssql'`). */
function onSqlServer(trx: Knex): boolean {
  const client = (trx as { client?: { dialect?: unknown; config?: { client?: unknown } } }).client;
  return client?.dialect === 'mssql' || client?.config?.client === 'mssql';
}

/** Wraps a `Knex.Transaction` for `enqueue` from `queuebox` and for the pull client's `complete`. */
export function queueboxTransaction(trx: Knex.Transaction): CallerExecutor {
  requireObject(trx, 'Knex', HINT);
  if (typeof trx.raw !== 'function') throw new UsageError(`expected a Knex transaction (${HINT})`);
  const sqlServer = onSqlServer(trx);
  return callerExecutor({
    library: 'Knex',
    hint: HINT,
    dialect: sqlServer ? 'sqlserver' : 'postgres',
    style: 'question',
    inTransaction: () => trx.isTransaction === true && !(typeof trx.isCompleted === 'function' && trx.isCompleted()),
    run: async (text, values) => rowsOf(await trx.raw(text, values as Knex.RawBinding[])),
  });
}

/** Inserts one outbox message inside the Knex transaction `trx`; same validation, errors and sequence as `enqueue`. */
export async function enqueue(trx: Knex.Transaction, message: EnqueueMessage, options?: EnqueueOptions): Promise<string> {
  return enqueueThrough(queueboxTransaction(trx), message, options);
}

export type { CallerExecutor, EnqueueMessage, EnqueueOptions, OutboxMessageInput };
