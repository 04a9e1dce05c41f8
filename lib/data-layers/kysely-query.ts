/**
 * Raw statements through a Kysely executor: shared by `queuebox/kysely` and `queuebox/mikro-orm`
 * (MikroORM 7 runs its transactions on Kysely; its own `execute` inlines values into the SQL text,
 * this binds them).
 */
import type { CompiledQuery, Kysely, QueryId } from 'kysely';
import type { ExecutorParts } from './caller-executor.ts';

/**
 * The object `CompiledQuery.raw(text, values)` returns, built here so that the subpath loads
 * nothing from `kysely` (MikroORM applications need not have it as their own dependency).
 */
function rawCompiledQuery(text: string, values: unknown[]): CompiledQuery {
  const queryId: QueryId = { queryId: `queuebox-${Math.random().toString(36).slice(2)}` };
  return Object.freeze({ sql: text, parameters: Object.freeze([...values]), query: Object.freeze({ kind: 'RawNode', sqlFragments: Object.freeze([text]), parameters: Object.freeze([]) }), queryId }) as unknown as CompiledQuery;
}

/** True when the Kysely instance runs on SQL Server (its dialect adapter is Kysely's `MssqlAdapter`). */
function onSqlServer<DB>(db: Kysely<DB>): boolean {
  const adapter = (db.getExecutor() as { adapter?: object }).adapter;
  return adapter?.constructor.name === 'MssqlAdapter';
}

/** Dialect, placeholder style and runner of a Kysely instance or transaction. */
export function kyselyExecutor<DB>(db: Kysely<DB>, inTransaction: () => boolean | undefined): Pick<ExecutorParts, 'dialect' | 'style' | 'run' | 'inTransaction'> {
  const sqlServer = onSqlServer(db);
  return {
    dialect: sqlServer ? 'sqlserver' : 'postgres',
    style: sqlServer ? 'at' : 'dollar',
    inTransaction,
    run: async (text, values) => {
      const result = await db.executeQuery<Record<string, unknown>>(rawCompiledQuery(text, values));
      const affected = result.numAffectedRows;
      return { rows: [...result.rows], rowCount: affected === undefined ? result.rows.length : Number(affected) };
    },
  };
}
