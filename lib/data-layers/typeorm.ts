/**
 * `queuebox/typeorm`: `enqueue` (and pull `complete`) inside a TypeORM transaction — the
 * `EntityManager` of `dataSource.transaction(async (manager) => enqueue(manager, message))`, or a
 * `QueryRunner` after `startTransaction()`. The statement runs as `queryRunner.query(text,
 * parameters, true)` (placeholders `$1…` on PostgreSQL, `@0…` on SQL Server), every value bound.
 * Refused: `dataSource.manager` (no query runner: each query on any pooled connection) and a
 * query runner whose `isTransactionActive` is false. Only types are imported from `typeorm`.
 */
import type { DataSource, EntityManager, QueryRunner } from 'typeorm';
import type { EnqueueMessage, OutboxMessageInput } from '../db/driver.ts';
import { UsageError } from '../errors.ts';
import { callerExecutor, enqueueThrough, requireObject, type CallerExecutor, type EnqueueOptions } from './caller-executor.ts';

const HINT = 'dataSource.transaction(async (manager) => …), or a QueryRunner after startTransaction()';

/** The transaction's query runner: the runner itself, or the manager's (undefined for `dataSource.manager`). */
function runnerOf(tx: EntityManager | QueryRunner): QueryRunner | undefined {
  if (typeof (tx as QueryRunner).startTransaction === 'function') return tx as QueryRunner;
  return (tx as EntityManager).queryRunner;
}

/** Wraps a TypeORM `EntityManager` or `QueryRunner` for `enqueue` from `queuebox` and for the pull client's `complete`. */
export function queueboxTransaction(tx: EntityManager | QueryRunner): CallerExecutor {
  requireObject(tx, 'TypeORM', HINT);
  const dataSource = (tx as { dataSource?: DataSource }).dataSource;
  if (dataSource === undefined) throw new UsageError(`expected a TypeORM EntityManager or QueryRunner (${HINT})`);
  const sqlServer = dataSource.options.type === 'mssql';
  return callerExecutor({
    library: 'TypeORM',
    hint: HINT,
    dialect: sqlServer ? 'sqlserver' : 'postgres',
    style: sqlServer ? 'at-zero' : 'dollar',
    inTransaction: () => runnerOf(tx)?.isTransactionActive === true,
    run: async (text, values) => {
      const runner = runnerOf(tx);
      if (runner === undefined) throw new UsageError(`TypeORM manager without a query runner: pass the transaction's manager (${HINT})`);
      const result = await runner.query(text, values, true);
      const rows = (result.records ?? []) as Array<Record<string, unknown>>;
      return { rows, rowCount: result.affected ?? rows.length };
    },
  });
}

/** Inserts one outbox message inside the TypeORM transaction `tx`; same validation, errors and sequence as `enqueue`. */
export async function enqueue(tx: EntityManager | QueryRunner, message: EnqueueMessage, options?: EnqueueOptions): Promise<string> {
  return enqueueThrough(queueboxTransaction(tx), message, options);
}

export type { CallerExecutor, EnqueueMessage, EnqueueOptions, OutboxMessageInput };
