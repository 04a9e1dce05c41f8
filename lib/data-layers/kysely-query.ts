/**
 * Raw statements through a Kysely executor: shared by `queuebox/kysely` and `queuebox/mikro-orm`
 * (MikroORM 7 runs its transactions on Kysely; its own `execute` writes the values into the SQL
 * text, this binds them). Typed structurally, so `queuebox/mikro-orm` needs no `kysely` types.
 */
import type { ExecutorParts } from './caller-executor.ts';

/** A compiled raw query, as Kysely's `CompiledQuery.raw(text, values)` makes it. */
interface RawCompiledQuery {
  readonly sql: string;
  readonly parameters: readonly unknown[];
  readonly query: { readonly kind: 'RawNode'; readonly sqlFragments: readonly string[]; readonly parameters: readonly unknown[] };
  readonly queryId: { readonly queryId: string };
}

/** What QueueBox uses of a Kysely instance or transaction. */
export interface KyselyRunner {
  executeQuery(query: never): Promise<{ readonly rows: readonly unknown[]; readonly numAffectedRows?: bigint }>;
  getExecutor(): object;
}

/**
 * The object `CompiledQuery.raw(text, values)` returns, built here so that the subpath loads
 * nothing from `kysely` (MikroORM applications need not depend on it themselves).
 */
function rawCompiledQuery(text: string, values: unknown[]): RawCompiledQuery {
  const queryId = { queryId: `queuebox-${Math.random().toString(36).slice(2)}` };
  return Object.freeze({ sql: text, parameters: Object.freeze([...values]), query: Object.freeze({ kind: 'RawNode', sqlFragments: Object.freeze([text]), parameters: Object.freeze([]) }), queryId });
}

/** True when the Kysely instance runs on SQL Server: its dialect adapter is Kysely's `MssqlAdapter` or a subclass of it. */
function onSqlServer(db: KyselyRunner): boolean {
  for (let proto = Object.getPrototypeOf((db.getExecutor() as { adapter?: object }).adapter ?? {}); proto !== null; proto = Object.getPrototypeOf(proto)) {
    if ((proto as { constructor?: { name?: string } }).constructor?.name === 'MssqlAdapter') return true;
  }
  return false;
}

/** Dialect, placeholder style and runner of a Kysely instance or transaction. */
export function kyselyExecutor(db: KyselyRunner, inTransaction: () => boolean | undefined): Pick<ExecutorParts, 'dialect' | 'style' | 'run' | 'inTransaction'> {
  const sqlServer = onSqlServer(db);
  return {
    dialect: sqlServer ? 'sqlserver' : 'postgres',
    style: sqlServer ? 'at' : 'dollar',
    inTransaction,
    run: async (text, values) => {
      const result = await db.executeQuery(rawCompiledQuery(text, values) as never);
      const rows = [...result.rows] as Array<Record<string, unknown>>;
      return { rows, rowCount: result.numAffectedRows === undefined ? rows.length : Number(result.numAffectedRows) };
    },
  };
}
