/**
 * `queuebox/mikro-orm`: `enqueue` (and pull `complete`) inside a MikroORM 7 transaction — the
 * `EntityManager` of `em.transactional(async (em) => enqueue(em, message))`, or a fork after
 * `em.begin()`; a nested `transactional` (a savepoint) works the same. The statement runs on the
 * transaction's own connection (`em.getTransactionContext()`, a Kysely transaction in MikroORM 7)
 * with every value bound — not through `em.execute`, which writes the values into the SQL text.
 * Refused: an entity manager that `isInTransaction()` reports outside a transaction. PostgreSQL and
 * SQL Server (`@mikro-orm/mssql`). Only types are imported from `@mikro-orm/core`.
 */
import type { EntityManager } from '@mikro-orm/core';
import type { EnqueueMessage, OutboxMessageInput } from '../db/driver.ts';
import { UsageError } from '../errors.ts';
import { callerExecutor, enqueueThrough, requireObject, type CallerExecutor, type EnqueueOptions } from './caller-executor.ts';
import { kyselyExecutor, type KyselyRunner } from './kysely-query.ts';

const HINT = 'em.transactional(async (em) => …)';

/** Wraps a MikroORM `EntityManager` inside a transaction for `enqueue` from `queuebox` and for the pull client's `complete`. */
export function queueboxTransaction(em: EntityManager): CallerExecutor {
  requireObject(em, 'MikroORM', HINT);
  if (typeof em.isInTransaction !== 'function' || typeof em.getTransactionContext !== 'function') throw new UsageError(`expected a MikroORM EntityManager (${HINT})`);
  const context = em.getTransactionContext<KyselyRunner>();
  const inTransaction = () => em.isInTransaction() && em.getTransactionContext() === context;
  if (context === undefined || typeof context.executeQuery !== 'function') {
    const refuse = () => Promise.reject(new UsageError(`MikroORM EntityManager outside a transaction (${HINT})`));
    return callerExecutor({ library: 'MikroORM', hint: HINT, dialect: 'postgres', style: 'dollar', inTransaction: () => false, run: refuse });
  }
  return callerExecutor({ library: 'MikroORM', hint: HINT, ...kyselyExecutor(context, inTransaction) });
}

/** Inserts one outbox message inside the MikroORM transaction of `em`; same validation, errors and sequence as `enqueue`. */
export async function enqueue(em: EntityManager, message: EnqueueMessage, options?: EnqueueOptions): Promise<string> {
  return enqueueThrough(queueboxTransaction(em), message, options);
}

export type { CallerExecutor, EnqueueMessage, EnqueueOptions, OutboxMessageInput };
