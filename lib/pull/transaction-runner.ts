/**
 * How a pull worker opens the business transaction it gives a handler.
 *
 * A runner calls `work(tx)` inside a new transaction, commits when `work` resolves and rolls back
 * when it throws (then rethrows). The worker completes the claim inside `work`, so the handler's
 * writes and the completion commit or roll back together. PostgreSQL gets one from the driver's
 * pool; another dialect (SQL Server: an `mssql` `Transaction`) plugs in through the same shape.
 */
import type pg from 'pg';
import type { Driver } from '../db/driver.ts';
import { PostgresDriver } from '../db/postgres/postgres-driver.ts';
import { isPgIsolationLevel, PG_ISOLATION_LEVELS, pgTransaction, type PgIsolationLevel } from '../db/postgres/pg-pool.ts';
import { UsageError } from '../errors.ts';
import { importOptional } from '../optional-package.ts';

/** What the SQL Server runner needs of its driver: the driver's `mssql` pool (typed loosely, so these declarations need no `mssql` types). */
export interface MssqlPoolSource {
  pool(): Promise<unknown>;
}

/**
 * Runs `work(tx)` in a transaction: commit on resolve, rollback (and rethrow) on throw. The worker
 * passes `signal`, which fires when it stops waiting for the handler (a forced shutdown, the
 * deadline of `runOnce`, `handlerTimeoutMs`): a runner may then end the transaction at once (the
 * worker writes nothing more to the row, and its completion would be refused); one that ignores
 * it leaves the transaction to the handler.
 *
 * A runner that ends the transaction tells the worker when it is over: it calls `onForcedEnd`,
 * from the signal's abort event, with a promise that settles once the transaction is ended on the
 * server (rolled back, its locks freed). The worker's `runOnce` and `stop()` return only after
 * those promises settled (bounded: see `PullRun`), so no transaction of a handler they gave up on
 * outlives them (a Lambda container is frozen as soon as the invocation returns). The option is
 * optional on both sides: a runner may ignore it (the worker then does not wait), and a runner
 * called without it must work as before.
 */
export type TransactionRunner<Tx> = <T>(
  work: (tx: Tx) => Promise<T>,
  options?: { signal?: AbortSignal; onForcedEnd?: (ended: PromiseLike<unknown>) => void },
) => Promise<T>;

/** Options of `pgTransactionRunner`. */
export interface PullTransactionOptions {
  /**
   * The isolation level of each handler's transaction, set by its `BEGIN` (a handler cannot set it
   * itself: the transaction has run a statement by the time the handler gets it). Default: the
   * role's and database's (`default_transaction_isolation`).
   */
  isolationLevel?: PgIsolationLevel;
}

/**
 * A runner on a `pg` pool: one pooled client per transaction, released afterwards, at
 * `options.isolationLevel` when given. When `signal` fires while the transaction is open, its
 * connection is terminated (`pg_terminate_backend`), so the server rolls it back and frees its
 * locks, whatever the handler is doing; `onForcedEnd` gets the promise of that termination
 * (settled once the server process is gone).
 */
export function pgTransactionRunner(pool: pg.Pool, options: PullTransactionOptions = {}): TransactionRunner<pg.PoolClient> {
  const isolationLevel = checkedIsolationLevel(options);
  const runner: TransactionRunner<pg.PoolClient> = (work, runOptions) => pgTransaction(pool, work, { ...runOptions, handler: true, ...(isolationLevel === undefined ? {} : { isolationLevel }) });
  runnerPools.set(runner, pool);
  return runner;
}

/** The pool of each runner `pgTransactionRunner` made: a pull worker checks its size when it is the worker's own (`poolOfRunner`). */
const runnerPools = new WeakMap<object, pg.Pool>();

/** The pool a runner of `pgTransactionRunner` opens its transactions on; undefined for any other runner. */
export function poolOfRunner(runner: unknown): pg.Pool | undefined {
  return typeof runner === 'function' ? runnerPools.get(runner) : undefined;
}

/** `options.isolationLevel`, checked: a name not among PostgreSQL's levels, or an unknown option (a typo), is refused by name. */
function checkedIsolationLevel(options: PullTransactionOptions): PullTransactionOptions['isolationLevel'] {
  if (typeof options !== 'object' || options === null) throw new UsageError('pgTransactionRunner: options must be an object, e.g. { isolationLevel: \'serializable\' }');
  for (const name of Object.keys(options)) {
    if (name !== 'isolationLevel') throw new UsageError(`pgTransactionRunner: unknown option ${JSON.stringify(name)} (the one option is isolationLevel)`);
  }
  const level = options.isolationLevel;
  if (level === undefined) return undefined;
  if (!isPgIsolationLevel(level)) {
    throw new UsageError(`pgTransactionRunner: isolationLevel ${typeof level === 'string' ? `'${level}'` : JSON.stringify(level)} is not one of ${Object.keys(PG_ISOLATION_LEVELS).map((l) => `'${l}'`).join(', ')}`);
  }
  return level;
}

/**
 * A runner on the SQL Server driver's pool: one `mssql` Transaction (READ COMMITTED) per call.
 * `mssql` is loaded only when a SQL Server worker runs.
 */
export function mssqlTransactionRunner(driver: MssqlPoolSource): TransactionRunner<unknown> {
  return async (work) => {
    const { mssqlTransaction } = await importOptional('mssql', 'a SQL Server pull worker', () => import('../db/sqlserver/mssql-pool.ts'));
    return mssqlTransaction((await driver.pool()) as Parameters<typeof mssqlTransaction>[0], work);
  };
}

/** The runner of a QueueBox driver: its own pool, on either dialect; other drivers must pass one. */
export function defaultTransactionRunner(driver: Driver): TransactionRunner<unknown> {
  if (driver instanceof PostgresDriver) return pgTransactionRunner(driver.pool) as TransactionRunner<unknown>;
  if (driver.dialect === 'sqlserver' && typeof (driver as Partial<MssqlPoolSource>).pool === 'function') return mssqlTransactionRunner(driver as unknown as MssqlPoolSource);
  throw new UsageError(`a pull worker on this ${driver.dialect} driver needs the \`transactions\` option (a TransactionRunner)`);
}
