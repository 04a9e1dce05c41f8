/**
 * `queuebox/kysely`: `enqueue` (and pull `complete`) inside a Kysely transaction —
 * `db.transaction().execute(async (trx) => enqueue(trx, message))`, or a controlled transaction
 * from `db.startTransaction().execute()`. The statement runs as `trx.executeQuery` of a raw
 * compiled query with every value bound. A `Kysely` instance that is not a transaction is refused.
 * Only types are imported from `kysely`.
 */
import type { ControlledTransaction, Transaction } from 'kysely';
import type { EnqueueMessage, OutboxMessageInput } from '../db/driver.ts';
import { UsageError } from '../errors.ts';
import { callerExecutor, enqueueThrough, requireObject, type CallerExecutor, type EnqueueOptions } from './caller-executor.ts';
import { kyselyExecutor, type KyselyRunner } from './kysely-query.ts';

const HINT = 'db.transaction().execute(async (trx) => …)';

/**
 * Wraps a Kysely transaction for `enqueue` from `queuebox` and for the pull client's `complete`:
 * `db.transaction()`'s, or a controlled one (`db.startTransaction().execute()`, a savepoint of
 * one). The controlled form comes first: against `Transaction<DB>` alone, TypeScript inferred `DB`
 * wrongly from a `ControlledTransaction<DB, S>` of a typed database and refused it.
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- any savepoint names
export function queueboxTransaction<DB>(trx: ControlledTransaction<DB, any>): CallerExecutor;
export function queueboxTransaction<DB>(trx: Transaction<DB>): CallerExecutor;
export function queueboxTransaction<DB>(trx: Transaction<DB>): CallerExecutor {
  requireObject(trx, 'Kysely', HINT);
  const k = trx;
  if (typeof k.executeQuery !== 'function') throw new UsageError(`expected a Kysely Transaction (${HINT})`);
  // A controlled transaction also knows when it has ended.
  const ended = () => (trx as { isCommitted?: boolean }).isCommitted === true || (trx as { isRolledBack?: boolean }).isRolledBack === true;
  return callerExecutor({ library: 'Kysely', hint: HINT, ...kyselyExecutor(k as unknown as KyselyRunner, () => k.isTransaction === true && !ended()) });
}

/** Inserts one outbox message inside the Kysely transaction `trx`; same validation, errors and sequence as `enqueue`. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- any savepoint names
export async function enqueue<DB>(trx: ControlledTransaction<DB, any>, message: EnqueueMessage, options?: EnqueueOptions): Promise<string>;
export async function enqueue<DB>(trx: Transaction<DB>, message: EnqueueMessage, options?: EnqueueOptions): Promise<string>;
export async function enqueue<DB>(trx: Transaction<DB>, message: EnqueueMessage, options?: EnqueueOptions): Promise<string> {
  return enqueueThrough(queueboxTransaction(trx), message, options);
}

export type { CallerExecutor, EnqueueMessage, EnqueueOptions, OutboxMessageInput };
