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
import { pgTransaction } from '../db/postgres/pg-pool.ts';
import { UsageError } from '../errors.ts';

/** Runs `work(tx)` in a transaction: commit on resolve, rollback (and rethrow) on throw. */
export type TransactionRunner<Tx> = <T>(work: (tx: Tx) => Promise<T>) => Promise<T>;

/** A runner on a `pg` pool: one pooled client per transaction, released afterwards. */
export function pgTransactionRunner(pool: pg.Pool): TransactionRunner<pg.PoolClient> {
  return (work) => pgTransaction(pool, work);
}

/** The runner of a driver that can open transactions itself (PostgreSQL); others must pass one. */
export function defaultTransactionRunner(driver: Driver): TransactionRunner<pg.PoolClient> {
  if (driver instanceof PostgresDriver) return pgTransactionRunner(driver.pool);
  throw new UsageError(`a pull worker on ${driver.dialect} needs the \`transactions\` option (a TransactionRunner)`);
}
