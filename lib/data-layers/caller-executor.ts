/**
 * The one core every `queuebox/<library>` adapter is built on: an adapter only says how its
 * library runs a statement (`run`, in the library's placeholder style) and whether the library
 * knows its transaction is open. Validation, the statements, the refusal outside a transaction and
 * the per-key sequence are `enqueue`'s own (see `lib/outbox/enqueue.ts`, `writeInsidePgTransaction`).
 */
import type { CallerExecutor, CallerExecutorResult } from '../db/caller-transaction.ts';
import type { EnqueueMessage, OutboxMessageInput } from '../db/driver.ts';
import { QueueBoxError, UsageError } from '../errors.ts';
import { enqueue as coreEnqueue, type EnqueueOptions } from '../outbox/enqueue.ts';

export type { CallerExecutor, CallerExecutorResult, EnqueueMessage, EnqueueOptions, OutboxMessageInput };

/**
 * How a library writes bind placeholders: `dollar` `$1` (node-postgres, postgres.js, Kysely and
 * Drizzle on PostgreSQL, Sequelize's `bind`), `question` `?` in order (Knex, MikroORM), `at` `@1`
 * (Kysely on SQL Server), `at-zero` `@0` (TypeORM on SQL Server), `at-p` `@P1` (Prisma on SQL Server).
 */
export type PlaceholderStyle = 'dollar' | 'question' | 'at' | 'at-zero' | 'at-p';

/**
 * Rewrites the `$n` placeholders of QueueBox's statement text into `style`, with the values in the
 * order that style binds them (`?` takes one value per occurrence). QueueBox's statements hold no
 * `$` or `?` of their own outside placeholders.
 */
export function renumber(text: string, values: readonly unknown[], style: PlaceholderStyle): { text: string; values: unknown[] } {
  if (style === 'dollar') return { text, values: [...values] };
  const ordered: unknown[] = [];
  const out = text.replace(/\$(\d+)/g, (_, digits: string) => {
    const n = Number(digits);
    if (n < 1 || n > values.length) throw new QueueBoxError(`statement placeholder $${n} has no value`);
    if (style === 'question') {
      ordered.push(values[n - 1]);
      return '?';
    }
    return style === 'at' ? `@${n}` : style === 'at-zero' ? `@${n - 1}` : `@P${n}`;
  });
  return { text: out, values: style === 'question' ? ordered : [...values] };
}

/** What an adapter supplies; `run` receives text and values already in its placeholder style. */
export interface ExecutorParts {
  library: string;
  dialect: 'postgres' | 'sqlserver';
  hint: string;
  style: PlaceholderStyle;
  run(text: string, values: unknown[]): Promise<CallerExecutorResult>;
  inTransaction(): boolean | undefined;
  /** `run` with the transaction check in the same round trip (`CallerExecutor.queryChecked`), where the library's connection offers one. */
  runChecked?: (text: string, values: unknown[]) => Promise<CallerExecutorResult>;
}

/** Builds the `CallerExecutor` QueueBox writes through. */
export function callerExecutor(parts: ExecutorParts): CallerExecutor {
  const { runChecked } = parts;
  return {
    queueboxExecutor: true,
    library: parts.library,
    dialect: parts.dialect,
    hint: parts.hint,
    inTransaction: parts.inTransaction,
    query: (text, values) => {
      const statement = renumber(text, values, parts.style);
      return parts.run(statement.text, statement.values);
    },
    ...(runChecked !== undefined
      ? {
          queryChecked: (text: string, values: unknown[]) => {
            const statement = renumber(text, values, parts.style);
            return runChecked(statement.text, statement.values);
          },
        }
      : {}),
  };
}

/** Throws `UsageError` unless `tx` is an object (a library's transaction), naming what to pass. */
export function requireObject(tx: unknown, library: string, hint: string): asserts tx is object {
  if ((typeof tx !== 'object' && typeof tx !== 'function') || tx === null) {
    throw new UsageError(`expected ${library}'s transaction object (${hint}), got ${tx === null ? 'null' : typeof tx}`);
  }
}

/** `rows`/`rowCount` from a driver result that is either an array of rows (with an optional `count`) or `{ rows, rowCount }`. */
export function rowsOf(result: unknown): CallerExecutorResult {
  if (Array.isArray(result)) {
    const count = (result as { count?: unknown }).count;
    return { rows: result as Array<Record<string, unknown>>, rowCount: typeof count === 'number' ? count : result.length };
  }
  const r = (result ?? {}) as { rows?: Array<Record<string, unknown>>; rowCount?: number | null };
  const rows = r.rows ?? [];
  return { rows, rowCount: typeof r.rowCount === 'number' ? r.rowCount : rows.length };
}

/** `enqueue` through an adapter's executor: the same checks, SQL and errors as `enqueue` on a `pg` client. */
export async function enqueueThrough(executor: CallerExecutor, message: EnqueueMessage, options?: EnqueueOptions): Promise<string> {
  return coreEnqueue(executor, message, options);
}
