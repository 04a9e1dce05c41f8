/**
 * `queuebox/drizzle`: `enqueue` (and pull `complete`) inside a Drizzle transaction on PostgreSQL,
 * node-postgres or postgres.js driver — `db.transaction(async (tx) => enqueue(tx, message))`; a
 * nested `tx.transaction(…)` (a savepoint) works the same. The statement runs as `tx.execute(sql)`
 * with each value a bound `sql.param`. The database object (`drizzle(…)`, not a transaction: it
 * has no `rollback`) is refused. `drizzle-orm` is imported only when the first statement runs,
 * for its `sql` builder. Drizzle 0.45 has no SQL Server dialect.
 */
import type { TablesRelationalConfig } from 'drizzle-orm';
import type { PgQueryResultHKT, PgTransaction } from 'drizzle-orm/pg-core';
import type { OutboxMessageInput } from '../db/driver.ts';
import { UsageError } from '../errors.ts';
import { callerExecutor, enqueueThrough, requireObject, rowsOf, type CallerExecutor, type EnqueueOptions } from './caller-executor.ts';

const HINT = 'db.transaction(async (tx) => …)';

/** A Drizzle PostgreSQL transaction, whatever its driver (`TQueryResult`) and schema. */
export type DrizzleTransaction<TQueryResult extends PgQueryResultHKT = PgQueryResultHKT, TFullSchema extends Record<string, unknown> = Record<string, never>, TSchema extends TablesRelationalConfig = Record<string, never>> = PgTransaction<
  TQueryResult,
  TFullSchema,
  TSchema
>;

/** Text with `$n` placeholders as a Drizzle `sql` object whose values are bound parameters. */
async function toDrizzleSql(text: string, values: unknown[]) {
  const { sql } = await import('drizzle-orm');
  const parts = text.split(/\$(\d+)/);
  const chunks = parts.map((part, i) => (i % 2 === 0 ? sql.raw(part) : sql.param(values[Number(part) - 1])));
  return sql.join(chunks);
}

/** Wraps a Drizzle transaction for `enqueue` from `queuebox` and for the pull client's `complete`. */
export function queueboxTransaction<Q extends PgQueryResultHKT, F extends Record<string, unknown>, S extends TablesRelationalConfig>(tx: DrizzleTransaction<Q, F, S>): CallerExecutor {
  requireObject(tx, 'Drizzle', HINT);
  if (typeof tx.execute !== 'function') throw new UsageError(`expected a Drizzle transaction (${HINT})`);
  return callerExecutor({
    library: 'Drizzle',
    hint: HINT,
    dialect: 'postgres',
    style: 'dollar',
    inTransaction: () => typeof (tx as { rollback?: unknown }).rollback === 'function',
    run: async (text, values) => rowsOf(await tx.execute(await toDrizzleSql(text, values))),
  });
}

/** Inserts one outbox message inside the Drizzle transaction `tx`; same validation, errors and sequence as `enqueue`. */
export async function enqueue<Q extends PgQueryResultHKT, F extends Record<string, unknown>, S extends TablesRelationalConfig>(tx: DrizzleTransaction<Q, F, S>, message: OutboxMessageInput, options?: EnqueueOptions): Promise<string> {
  return enqueueThrough(queueboxTransaction(tx), message, options);
}

export type { CallerExecutor, EnqueueOptions, OutboxMessageInput };
