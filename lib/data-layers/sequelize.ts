/**
 * `queuebox/sequelize`: `enqueue` (and pull `complete`) inside a Sequelize transaction —
 * `sequelize.transaction(async (t) => enqueue(t, message))`, an unmanaged `await
 * sequelize.transaction()`, or a savepoint `sequelize.transaction({ transaction: t }, …)`. The
 * statement runs as `t.sequelize.query(text, { bind, transaction: t })`: Sequelize's `$1…` bind
 * parameters (it renames them for SQL Server itself), every value bound. Refused: anything that
 * is not a Sequelize `Transaction`, and a transaction Sequelize reports finished (committed or
 * rolled back). PostgreSQL and SQL Server (`mssql` dialect). Only types are imported from `sequelize`.
 */
import type { QueryOptions, Sequelize, Transaction } from 'sequelize';
import type { EnqueueMessage, OutboxMessageInput } from '../db/driver.ts';
import { UsageError } from '../errors.ts';
import { callerExecutor, enqueueThrough, requireObject, rowsOf, type CallerExecutor, type EnqueueOptions } from './caller-executor.ts';

const HINT = 'sequelize.transaction(async (t) => …)';

/** What a Sequelize `Transaction` holds at run time besides its declared methods. */
interface TransactionInternals {
  sequelize?: Sequelize;
  /** `'commit'` or `'rollback'` once the transaction has ended. */
  finished?: string;
}

/** Wraps a Sequelize `Transaction` for `enqueue` from `queuebox` and for the pull client's `complete`. */
export function queueboxTransaction(t: Transaction): CallerExecutor {
  requireObject(t, 'Sequelize', HINT);
  const { sequelize } = t as TransactionInternals;
  if (sequelize === undefined || typeof t.commit !== 'function' || typeof t.rollback !== 'function') {
    throw new UsageError(`expected a Sequelize Transaction (${HINT}), not the Sequelize instance or a model`);
  }
  const sqlServer = sequelize.getDialect() === 'mssql';
  return callerExecutor({
    library: 'Sequelize',
    hint: HINT,
    dialect: sqlServer ? 'sqlserver' : 'postgres',
    style: 'dollar',
    inTransaction: () => (t as TransactionInternals).finished === undefined,
    run: async (text, values) => {
      const options: QueryOptions = { bind: values, transaction: t, raw: true };
      const [rows, meta] = (await sequelize.query(text, options)) as [unknown, unknown];
      const affected = (meta as { rowCount?: unknown } | null)?.rowCount;
      const result = rowsOf(rows);
      return typeof affected === 'number' ? { rows: result.rows, rowCount: affected } : result;
    },
  });
}

/** Inserts one outbox message inside the Sequelize transaction `t`; same validation, errors and sequence as `enqueue`. */
export async function enqueue(t: Transaction, message: EnqueueMessage, options?: EnqueueOptions): Promise<string> {
  return enqueueThrough(queueboxTransaction(t), message, options);
}

export type { CallerExecutor, EnqueueMessage, EnqueueOptions, OutboxMessageInput };
