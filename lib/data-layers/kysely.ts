/**
 * `queuebox/kysely`: `enqueue` (and pull `complete`) inside a Kysely transaction —
 * `db.transaction().execute(async (trx) => enqueue(trx, message))`, or a controlled transaction
 * from `db.startTransaction().execute()`. The statement runs as `trx.executeQuery` of a raw
 * compiled query with every value bound. A `Kysely` instance that is not a transaction is refused.
 * Only types are imported from `kysely`.
 */
import type { Transaction } from 'kysely';
import type { OutboxMessageInput } from '../db/driver.ts';
import { UsageError } from '../errors.ts';
import { callerExecutor, enqueueThrough, requireObject, type CallerExecutor, type EnqueueOptions } from './caller-executor.ts';
import { kyselyExecutor, type KyselyRunner } from './kysely-query.ts';

const HINT = 'db.transaction().execute(async (trx) => …)';

/** Wraps a Kysely `Transaction` for `enqueue` from `queuebox` and for the pull client's `complete`. */
export function queueboxTransaction<DB>(trx: Transaction<DB>): CallerExecutor {
  requireObject(trx, 'Kysely', HINT);
  const k = trx;
  if (typeof k.executeQuery !== 'function') throw new UsageError(`expected a Kysely Transaction (${HINT})`);
  // A controlled transaction also knows when it has ended.
  const ended = () => (trx as { isCommitted?: boolean }).isCommitted === true || (trx as { isRolledBack?: boolean }).isRolledBack === true;
  return callerExecutor({ library: 'Kysely', hint: HINT, ...kyselyExecutor(k as unknown as KyselyRunner, () => k.isTransaction === true && !ended()) });
}

/** Inserts one outbox message inside the Kysely transaction `trx`; same validation, errors and sequence as `enqueue`. */
export async function enqueue<DB>(trx: Transaction<DB>, message: OutboxMessageInput, options?: EnqueueOptions): Promise<string> {
  return enqueueThrough(queueboxTransaction(trx), message, options);
}

export type { CallerExecutor, EnqueueOptions, OutboxMessageInput };
