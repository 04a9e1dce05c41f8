/**
 * The caller's transaction handle: what `enqueue`, `inboxInsert` with a transaction and pull
 * completion write through, so QueueBox's row commits or rolls back with the caller's change.
 *
 * Typed structurally (no `pg` or `mssql` types here), so applications type-check against the
 * published declarations without installing the SQL Server driver or its types.
 */
import { UsageError } from '../errors.ts';

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

/** A transaction handle that belongs to the caller, on either dialect. */
export type CallerTransaction = PgTransactionClient | MssqlTransactionHandle;

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
