/**
 * `queuebox/drizzle`: `enqueue` (and pull `complete`) inside a Drizzle transaction on PostgreSQL,
 * node-postgres or postgres.js driver — `db.transaction(async (tx) => enqueue(tx, message))`; a
 * nested `tx.transaction(…)` (a savepoint) works the same. On node-postgres the statement runs on
 * the transaction's own connection, every value bound; on postgres.js as `tx.execute(sql)` with
 * each value a bound `sql.param`. The database object (`drizzle(…)`, not a transaction: it has no
 * `rollback`) is refused. `drizzle-orm` is imported only when the first statement on postgres.js
 * runs, for its `sql` builder. Drizzle 0.45 has no SQL Server dialect.
 */
import type { TablesRelationalConfig } from 'drizzle-orm';
import type { PgQueryResultHKT, PgTransaction } from 'drizzle-orm/pg-core';
import { checkedPgQuery, isPgPool } from '../db/caller-transaction.ts';
import type { EnqueueMessage, OutboxMessageInput } from '../db/driver.ts';
import { UsageError } from '../errors.ts';
import { callerExecutor, enqueueThrough, requireObject, rowsOf, type CallerExecutor, type EnqueueOptions } from './caller-executor.ts';

const HINT = 'db.transaction(async (tx) => …)';

/** A Drizzle PostgreSQL transaction, whatever its driver (`TQueryResult`) and schema. */
export type DrizzleTransaction<TQueryResult extends PgQueryResultHKT = PgQueryResultHKT, TFullSchema extends Record<string, unknown> = Record<string, never>, TSchema extends TablesRelationalConfig = Record<string, never>> = PgTransaction<
  TQueryResult,
  TFullSchema,
  TSchema
>;

type DrizzleSql = typeof import('drizzle-orm').sql;

/** drizzle-orm's `sql` builder once the first statement loaded it (afterwards used without a wait). */
let drizzleSql: DrizzleSql | undefined;

async function loadDrizzleSql(): Promise<DrizzleSql> {
  return (drizzleSql ??= (await import('drizzle-orm')).sql);
}

/** Text with `$n` placeholders as a Drizzle `sql` object whose values are bound parameters. */
function toDrizzleSql(sql: DrizzleSql, text: string, values: unknown[]) {
  const parts = text.split(/\$(\d+)/);
  const chunks = parts.map((part, i) => (i % 2 === 0 ? sql.raw(part) : sql.param(values[Number(part) - 1])));
  return sql.join(chunks);
}

/** The node-postgres client under a Drizzle node-postgres transaction (undefined on postgres.js). */
interface PgClientLike {
  /** `pg` 8.21 and later; an older `pg` of the application's own reports nothing. */
  getTransactionStatus?(): string | null;
  query(text: string, values: unknown[]): Promise<unknown>;
}

function pgClientOf(tx: object): PgClientLike | undefined {
  const client = (tx as { session?: { client?: Partial<PgClientLike> } }).session?.client;
  // A pool (the database object's session) runs each query on any connection: never written to directly.
  return typeof client?.query === 'function' && !isPgPool(client) ? (client as PgClientLike) : undefined;
}

/**
 * Whether the transaction is open. Drizzle keeps no state of its transactions (only a `rollback`
 * method, which an ended one has too), so on node-postgres the connection under it is asked what
 * the server last reported (`getTransactionStatus()`: in a block, or not); a `pg` older than 8.21
 * reports nothing, and then it cannot be told (`undefined`: the server is asked, in the same
 * round trip as the statement — see `runChecked`). On postgres.js, which reports nothing either
 * and has no such round trip, a transaction object counts as open.
 */
function drizzleInTransaction(tx: object): boolean | undefined {
  const client = pgClientOf(tx);
  const status = client?.getTransactionStatus?.();
  if (status === 'T' || status === 'E') return true;
  if (status === 'I') return false;
  if (typeof (tx as { rollback?: unknown }).rollback !== 'function') return false;
  return client !== undefined && typeof client.getTransactionStatus !== 'function' ? undefined : true;
}

/**
 * Wraps a Drizzle transaction for `enqueue` from `queuebox` and for the pull client's `complete`.
 * On node-postgres the statement goes to the transaction's own connection at once, as on a `pg`
 * client, so statements reach it in the order they were called: an enqueue not awaited before the
 * transaction's end goes ahead of the `COMMIT` or `ROLLBACK`. On postgres.js it runs as
 * `tx.execute` of drizzle-orm's `sql` builder.
 */
export function queueboxTransaction<Q extends PgQueryResultHKT, F extends Record<string, unknown>, S extends TablesRelationalConfig>(tx: DrizzleTransaction<Q, F, S>): CallerExecutor {
  requireObject(tx, 'Drizzle', HINT);
  if (typeof tx.execute !== 'function') throw new UsageError(`expected a Drizzle transaction (${HINT})`);
  const run = async (sql: DrizzleSql, text: string, values: unknown[]) => rowsOf(await tx.execute(toDrizzleSql(sql, text, values)));
  // A `pg` client that cannot report its transaction sends the check with the statement.
  const client = pgClientOf(tx);
  const checked = client !== undefined && typeof client.getTransactionStatus !== 'function' ? checkedPgQuery(client) : undefined;
  return callerExecutor({
    library: 'Drizzle',
    hint: HINT,
    dialect: 'postgres',
    style: 'dollar',
    inTransaction: () => drizzleInTransaction(tx),
    run: (text, values) => {
      const client = pgClientOf(tx);
      if (client !== undefined) return client.query(text, values).then(rowsOf);
      return drizzleSql !== undefined ? run(drizzleSql, text, values) : loadDrizzleSql().then((sql) => run(sql, text, values));
    },
    ...(checked !== undefined ? { runChecked: (text: string, values: unknown[]) => checked(text, values).then(rowsOf) } : {}),
  });
}

/**
 * Inserts one outbox message inside the Drizzle transaction `tx`; same validation, errors and
 * sequence as `enqueue`. On postgres.js the first call loads drizzle-orm's `sql` builder before it
 * looks at the transaction, so the check and the statement follow each other without a wait.
 */
export async function enqueue<Q extends PgQueryResultHKT, F extends Record<string, unknown>, S extends TablesRelationalConfig>(tx: DrizzleTransaction<Q, F, S>, message: EnqueueMessage, options?: EnqueueOptions): Promise<string> {
  // What is not a Drizzle transaction is refused first, loading nothing.
  const executor = queueboxTransaction(tx);
  if (drizzleSql === undefined && pgClientOf(tx) === undefined) await loadDrizzleSql();
  return enqueueThrough(executor, message, options);
}

export type { CallerExecutor, EnqueueMessage, EnqueueOptions, OutboxMessageInput };
