/**
 * `queuebox/prisma`: `enqueue` (and pull `complete`) inside a Prisma interactive transaction —
 * `prisma.$transaction(async (tx) => enqueue(tx, message))`. The statement runs as
 * `tx.$queryRawUnsafe(text, ...values)` (placeholders `$1…` on PostgreSQL, `@P1…` on SQL Server),
 * every value bound; a nested `tx.$transaction(…)` (a savepoint, Prisma 7) works the same. The
 * `PrismaClient` itself (it has `$connect`; Prisma leaves it off the transaction client) is
 * refused, by type and at run time.
 *
 * Typed structurally: a Prisma client's type is generated per application, so there is no
 * library type to import; nothing is imported from Prisma at all.
 */
import type { EnqueueMessage, OutboxMessageInput } from '../db/driver.ts';
import { UsageError } from '../errors.ts';
import { callerExecutor, enqueueThrough, requireObject, rowsOf, type CallerExecutor, type EnqueueOptions } from './caller-executor.ts';

const HINT = 'prisma.$transaction(async (tx) => …)';

/** The client Prisma passes to an interactive transaction's callback (`Prisma.TransactionClient`). */
export interface PrismaTransactionClient {
  $queryRawUnsafe(query: string, ...values: unknown[]): PromiseLike<unknown>;
  /** Only the full `PrismaClient` has it (Prisma denies it to a transaction client): its queries would run outside the transaction. */
  readonly $connect?: never;
}

/** The database provider of the client (`sqlserver` or `postgresql`), as Prisma records it. */
function provider(tx: object): string | undefined {
  const active = (tx as { _activeProvider?: unknown })._activeProvider;
  return typeof active === 'string' ? active : undefined;
}

/** Wraps a Prisma interactive transaction client for `enqueue` from `queuebox` and for the pull client's `complete`. */
export function queueboxTransaction(tx: PrismaTransactionClient): CallerExecutor {
  requireObject(tx, 'Prisma', HINT);
  if (typeof tx.$queryRawUnsafe !== 'function') throw new UsageError(`expected a Prisma transaction client (${HINT})`);
  const sqlServer = provider(tx) === 'sqlserver';
  return callerExecutor({
    library: 'Prisma',
    hint: HINT,
    dialect: sqlServer ? 'sqlserver' : 'postgres',
    style: sqlServer ? 'at-p' : 'dollar',
    inTransaction: () => typeof (tx as { $connect?: unknown }).$connect !== 'function',
    run: async (text, values) => rowsOf(await tx.$queryRawUnsafe(text, ...values)),
  });
}

/** Inserts one outbox message inside the Prisma interactive transaction `tx`; same validation, errors and sequence as `enqueue`. */
export async function enqueue(tx: PrismaTransactionClient, message: EnqueueMessage, options?: EnqueueOptions): Promise<string> {
  return enqueueThrough(queueboxTransaction(tx), message, options);
}

export type { CallerExecutor, EnqueueMessage, EnqueueOptions, OutboxMessageInput };
