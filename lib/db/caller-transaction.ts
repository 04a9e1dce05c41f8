/**
 * The caller's transaction handle: what `enqueue`, `inboxInsert` with a transaction and pull
 * completion write through, so QueueBox's row commits or rolls back with the caller's change.
 *
 * Typed structurally (no `pg` or `mssql` types here), so applications type-check against the
 * published declarations without installing the SQL Server driver or its types.
 */
import { UsageError } from '../errors.ts';
import { SQLSERVER_TRANCOUNT } from './sqlserver/caller-statements.ts';

/**
 * A `pg` client on which the caller ran `BEGIN`: a `pg.PoolClient` from `pool.connect()` or a
 * `pg.Client`. Never a `pg.Pool`: a pool runs each query on whichever connection is free, outside
 * the caller's transaction (refused by type through `totalCount`, and at run time).
 */
export interface PgTransactionClient {
  query(text: string, values?: unknown[]): Promise<unknown>;
  /** Only a `pg.Pool` has it; a client inside a transaction must not. */
  readonly totalCount?: never;
}

/** An `mssql` `Transaction` after `await transaction.begin()`. */
export interface MssqlTransactionHandle {
  request(): unknown;
}

/** Rows and affected-row count of one statement run through a `CallerExecutor`. */
export interface CallerExecutorResult {
  rows: Array<Record<string, unknown>>;
  rowCount: number;
}

/**
 * A data-layer library's transaction, seen through one small interface (made by
 * `queuebox/<library>`'s `queueboxTransaction(tx)`): every QueueBox write in a caller transaction
 * goes through `query`, and `inTransaction` says what the library knows of the transaction.
 */
export interface CallerExecutor {
  /** Marks an adapter-made executor (a `pg` client has no such property). */
  readonly queueboxExecutor: true;
  /** The library, for error messages (`Kysely`, `Knex`, …). */
  readonly library: string;
  /** The database behind the library's connection. */
  readonly dialect: 'postgres' | 'sqlserver';
  /** How to get that library's transaction object, quoted in the `UsageError` that refuses one. */
  readonly hint: string;
  /** Runs `text` (placeholders `$1`…`$n`, converted by the adapter) with every value bound. */
  query(text: string, values: unknown[]): Promise<CallerExecutorResult>;
  /** `true`/`false` when the library knows whether its transaction is open; `undefined` when it cannot tell (the server is asked). */
  inTransaction(): boolean | undefined;
}

/** A transaction handle that belongs to the caller, on either dialect. */
export type CallerTransaction = PgTransactionClient | MssqlTransactionHandle | CallerExecutor;

/** True for an executor made by a `queuebox/<library>` adapter. */
export function isCallerExecutor(tx: unknown): tx is CallerExecutor {
  return typeof tx === 'object' && tx !== null && (tx as { queueboxExecutor?: unknown }).queueboxExecutor === true;
}

/** True for a `pg.Pool` (it counts its connections; a client does not). */
function isPgPool(tx: unknown): boolean {
  return typeof tx === 'object' && tx !== null && typeof (tx as { totalCount?: unknown }).totalCount === 'number' && typeof (tx as { connect?: unknown }).connect === 'function';
}

/** Throws `UsageError` when `tx` is a `pg.Pool` instead of a client inside the caller's transaction. */
export function refusePool(tx: unknown, operation: string): void {
  if (isPgPool(tx)) {
    throw new UsageError(
      `${operation} needs a client inside your transaction, not a pg.Pool (a pool runs each query on any free connection, outside the transaction): ` +
        "const client = await pool.connect(); await client.query('BEGIN'); … pass client …; COMMIT; client.release()",
    );
  }
}

/** The savepoint that proves a `pg` client is inside a transaction block (see `insidePgTransaction`). */
const CHECK_SAVEPOINT = 'queuebox_inside_transaction';

/**
 * Runs `work` (writes through the caller's `pg` client) only if the client is inside a
 * transaction block; otherwise throws `UsageError` and writes nothing. Without `BEGIN`, each
 * statement commits on its own: the row would be published whether or not the business change
 * commits, which is what the outbox exists to prevent.
 *
 * `pg` reports the state the server announced after the client's last statement
 * (`getTransactionStatus()`: `T` in a block, `E` in a failed block, `I` outside one, `null` before
 * the connection is ready). `T` and `E` need no check (in `E` the write fails with the server's
 * own error), and `work` is sent at once, so it reaches the server in the order the caller called.
 * `I` or `null` may still be a block: a `BEGIN` sent without waiting for it is queued ahead of
 * this write. So then a savepoint is set and released in one query first — refused by the server
 * outside a block (SQLSTATE 25P01); set and released together, it never spans the caller's own
 * statements or savepoints — one extra round trip, only on a client that has not yet reported a
 * transaction. After `work`, a client that reports `I` wrote outside a block after all (its
 * caller ended the transaction without waiting for this write): that is a `UsageError` too,
 * naming what was written.
 */
export async function insidePgTransaction<T>(tx: unknown, operation: string, work: () => Promise<T>, written: (result: T) => string = (r) => JSON.stringify(r)): Promise<T> {
  if (isCallerExecutor(tx)) return insideExecutorTransaction(tx, operation, work, written);
  const client = tx as { getTransactionStatus?: () => string | null; query(text: string): Promise<unknown> };
  if (typeof client.getTransactionStatus !== 'function') return work();
  const status = client.getTransactionStatus();
  if (status !== 'T' && status !== 'E') {
    // One query of two statements (the simple protocol runs them in order and stops at the first
    // refusal): two queries queued on the caller's client would be a query sent while another
    // runs, which `pg` 8 warns of and `pg` 9 refuses.
    try {
      await client.query(`SAVEPOINT ${CHECK_SAVEPOINT}; RELEASE SAVEPOINT ${CHECK_SAVEPOINT}`);
    } catch (error) {
      if (noTransaction(error)) {
        throw new UsageError(
          `${operation} ran outside a transaction: the client has not run BEGIN, so its write would commit on its own, apart from your change; nothing was written. ` +
            "await client.query('BEGIN'); … pass client …; await client.query('COMMIT')",
        );
      }
      throw error;
    }
  }
  const result = await work();
  if (client.getTransactionStatus() === 'I') {
    throw new UsageError(
      `${operation} wrote ${written(result)} after its transaction had ended (COMMIT or ROLLBACK was sent before ${operation} finished), so it committed on its own, apart from your change. ` +
        `Await ${operation} before ending the transaction.`,
    );
  }
  return result;
}

/**
 * `insidePgTransaction` for a library's transaction (`CallerExecutor`): refused when the library
 * says its transaction is not open; when it cannot tell, the server is asked (PostgreSQL: a
 * savepoint set and released, refused outside a block; SQL Server: `@@TRANCOUNT`). After `work`,
 * a library that now reports its transaction ended gets the same `UsageError` as a `pg` client.
 */
async function insideExecutorTransaction<T>(tx: CallerExecutor, operation: string, work: () => Promise<T>, written: (result: T) => string): Promise<T> {
  const outside = () =>
    new UsageError(`${operation} ran outside a transaction: pass ${tx.library}'s transaction object (${tx.hint}), not the connection or client it came from; nothing was written.`);
  const state = tx.inTransaction();
  if (state === false) throw outside();
  if (state === undefined) {
    if (tx.dialect === 'sqlserver') {
      const { rows } = await tx.query(SQLSERVER_TRANCOUNT, []);
      if (Number(rows[0]?.depth ?? 0) === 0) throw outside();
    } else {
      try {
        await tx.query(`SAVEPOINT ${CHECK_SAVEPOINT}`, []);
        await tx.query(`RELEASE SAVEPOINT ${CHECK_SAVEPOINT}`, []);
      } catch (error) {
        if (noTransaction(error)) throw outside();
        throw error;
      }
    }
  }
  const result = await work();
  if (tx.inTransaction() === false) {
    // The library reports its transaction ended once its COMMIT or ROLLBACK has been sent, so a
    // write sent just before it (an enqueue not awaited) ended with it: which of the two cannot be
    // told from here.
    throw new UsageError(
      `${operation} wrote ${written(result)} while ${tx.library}'s transaction was ending or after it had ended: the row either ended with the transaction (committed with your change, or rolled back with it) or committed on its own, apart from your change. Await ${operation} before ending the transaction.`,
    );
  }
  return result;
}

/** SQLSTATE 25P01: no_active_sql_transaction. */
function noTransaction(error: unknown): boolean {
  return sqlState(error) === '25P01';
}

/**
 * The SQLSTATE of a driver error, also when a library wraps it: `cause` (Drizzle), `original`
 * (Sequelize), `driverError` (TypeORM), `originalCode`, Prisma's `meta.code` and Prisma 7's
 * driver adapter error (`meta.driverAdapterError.cause`). Prisma's own codes (`P1000`–`P6999`,
 * e.g. `P2010` for any failed raw query) are not SQLSTATEs and are passed over; PL/pgSQL's
 * `P0001`… are.
 */
export function sqlState(error: unknown, depth = 0): string | undefined {
  if (typeof error !== 'object' || error === null || depth > 4) return undefined;
  const e = error as { code?: unknown; meta?: { code?: unknown; driverAdapterError?: unknown }; cause?: unknown; original?: unknown; driverError?: unknown; originalCode?: unknown };
  for (const code of [e.code, e.originalCode, e.meta?.code]) if (typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) && !/^P[1-9]\d{3}$/.test(code)) return code;
  for (const inner of [e.cause, e.original, e.driverError, e.meta?.driverAdapterError]) {
    const code = sqlState(inner, depth + 1);
    if (code !== undefined) return code;
  }
  return undefined;
}
