/**
 * Runs the handler on one claimed message and settles the claim exactly once.
 *
 * - The handler's `transaction(fn)` opens a transaction, runs `fn(tx)`, then completes the claim
 *   in the same transaction before COMMIT. A completion that changes no row throws
 *   `OwnershipLostError` inside it, so the transaction — with the handler's writes — rolls back.
 * - A handler that never calls `transaction` is completed in a transaction of its own after it
 *   returns.
 * - A handler that throws is retried (`attempt + 1`, backoff) while `attempt + 1 < maxAttempts`,
 *   else dead-lettered: `maxAttempts` counts handler runs.
 * - A handler run whose lease expired counts too (the claim of the expired row spent it): a
 *   message claimed with `attempt >= maxAttempts` is dead-lettered without running the handler.
 * - Once the claim is lost (renewal fenced or failed, completion fenced) or the run gave up on the
 *   handler (the shutdown timeout, or `handlerTimeoutMs`), nothing more is written to the row.
 * The row leaves the lease keeper before every finishing write, so a renewal cannot race it.
 */
import { backoffDelayMs } from '../claims/backoff.ts';
import { redactError } from '../claims/redact.ts';
import type { LeaseKeeper } from '../claims/lease-keeper.ts';
import type { CallerTransaction } from '../db/driver.ts';
import { FencedLockTimeoutError, UsageError } from '../errors.ts';
import { OwnershipLostError } from './ownership-lost-error.ts';
import type { PullClient, PullMessage } from './pull-client.ts';
import type { TransactionRunner } from './transaction-runner.ts';

/** What a handler receives besides the message. */
export interface PullHandlerContext<Tx> {
  /** Fires when the claim is lost or a shutdown timed out: stop work, commit nothing. */
  signal: AbortSignal;
  /**
   * Runs `fn(tx)` in a transaction the worker opens and completes the claim in it before COMMIT.
   * Call it at most once. Rejects with `OwnershipLostError` (after ROLLBACK) when the claim is gone.
   */
  transaction<T>(fn: (tx: Tx) => Promise<T>): Promise<T>;
}

/** Application code for one message; throw to have it retried (or dead-lettered). */
export type PullHandler<Tx> = (message: PullMessage, context: PullHandlerContext<Tx>) => Promise<void>;

/** Retry policy of a pull worker (config `pull.retry`). */
export interface PullRetryPolicy {
  /** Handler runs per message, the first included; the last failure dead-letters the row. */
  maxAttempts: number;
  /** Delay after the first failure; doubles per failure. */
  baseDelayMs: number;
  maxDelayMs: number;
  /** Fraction of the delay added at random (0.2 = up to +20 %). */
  jitter: number;
}

/** Minimal structured logger (Powertools `Logger` fits). */
export interface PullLogger {
  warn(message: string, attributes?: Record<string, unknown>): void;
  error(message: string, attributes?: Record<string, unknown>): void;
}

export interface HandleContext<Tx> {
  client: PullClient;
  handler: PullHandler<Tx>;
  transactions: TransactionRunner<Tx>;
  retry: PullRetryPolicy;
  keeper: LeaseKeeper;
  /** Fires when the lease keeper loses the claim. */
  leaseSignal: AbortSignal;
  /**
   * Fires when the run gave up waiting for the handler — a shutdown that timed out, or the
   * handler's `handlerTimeoutMs` — complete nothing, spend no attempt (the lease that ends does).
   */
  forceSignal: AbortSignal;
  logger: PullLogger;
}

/**
 * How one message ended. `abandoned`: the run gave up on its handler (shutdown forced, or its time
 * ran out), row left to its lease. `lost`: the claim was lost (at a renewal, or a fenced write
 * changed no row), also when the run gave up on the handler afterwards or before it learnt it.
 */
export type HandleResult = 'completed' | 'retried' | 'dead' | 'lost' | 'abandoned';

export async function handlePullMessage<Tx>(c: HandleContext<Tx>, message: PullMessage): Promise<HandleResult> {
  // One signal for the handler: fires on a lost lease or a forced shutdown.
  const controller = new AbortController();
  const abort = (event: Event) => controller.abort((event.target as AbortSignal).reason);
  for (const source of [c.leaseSignal, c.forceSignal]) {
    if (source.aborted) controller.abort(source.reason);
    else source.addEventListener('abort', abort, { once: true });
  }
  const signal = controller.signal;
  const log = { messageId: message.id, source: message.source, aggregateId: message.aggregateId, attempt: attemptOf(message.attempt, c.retry.maxAttempts) };
  let opened = false;
  let committed = false;
  let fenced = false;
  let transactionError: unknown;

  const completeIn = async (tx: Tx): Promise<void> => {
    if (signal.aborted) throw new OwnershipLostError(message.id, 'the claim was lost or the worker is stopping');
    c.keeper.release(message.claim);
    // The runner's transaction: a pg client or an mssql Transaction (the driver checks which).
    let outcome: { ok: boolean };
    try {
      outcome = await c.client.complete(tx as CallerTransaction, message.claim);
    } catch (error) {
      // The row stayed locked by another transaction until the lease ended: the claim is lost.
      if (!(error instanceof FencedLockTimeoutError)) throw error;
      outcome = { ok: false };
    }
    if (!outcome.ok) {
      fenced = true;
      throw new OwnershipLostError(message.id, 'the completion changed no row');
    }
  };
  const transaction = async <T>(fn: (tx: Tx) => Promise<T>): Promise<T> => {
    if (opened) throw new UsageError('transaction() may be called once per pull message');
    opened = true;
    if (signal.aborted) throw new OwnershipLostError(message.id, 'the claim was lost or the worker is stopping');
    try {
      // A forced shutdown ends the transaction at once (the default runners), not when the handler returns.
      const value = await c.transactions(
        async (tx) => {
          const result = await fn(tx);
          await completeIn(tx);
          return result;
        },
        { signal: c.forceSignal },
      );
      committed = true;
      return value;
    } catch (error) {
      transactionError = error;
      throw error;
    }
  };
  // A claim lost (fenced, or at a renewal: `leaseSignal`) is lost, whether or not the run gave up
  // on the handler too (`PullRun` counts each claim once, at the first of these it learns).
  const ended = (): HandleResult => (c.forceSignal.aborted && !fenced && !c.leaseSignal.aborted ? 'abandoned' : 'lost');

  try {
    if (signal.aborted) return ended();
    if (message.attempt >= c.retry.maxAttempts) return await spent(c, message, log);
    try {
      await c.handler(message, { signal, transaction });
      if (committed) return 'completed';
      if (fenced || signal.aborted) return ended();
      if (opened) throw transactionError ?? new Error('the handler returned after its transaction failed');
      await c.transactions(completeIn, { signal: c.forceSignal });
      return 'completed';
    } catch (error) {
      if (committed) {
        c.logger.error('pull handler threw after its transaction committed; the message stays processed', { ...log, error: redactError(error) });
        return 'completed';
      }
      if (fenced || error instanceof OwnershipLostError || signal.aborted) return ended();
      return await fail(c, message, error, log);
    }
  } finally {
    c.leaseSignal.removeEventListener('abort', abort);
    c.forceSignal.removeEventListener('abort', abort);
    c.keeper.release(message.claim);
    if (fenced) c.logger.warn('pull claim lost at completion; the business transaction was rolled back', log);
  }
}

/** How logs and errors name a handler run: `attempt 3 of 5` (`attempt` is the 0-based count of runs before it). */
export function attemptOf(attempt: number, maxAttempts: number): string {
  return `${attempt + 1} of ${maxAttempts}`;
}

/** A fenced write that waited on a row lock until the lease ended changed nothing: a lost claim. */
function lostOnLockWait(writeError: unknown): { ok: boolean } {
  if (writeError instanceof FencedLockTimeoutError) return { ok: false };
  throw writeError;
}

/**
 * Every attempt is spent, the last by a lease that expired while its handler ran (the claim of the
 * expired row counted it): dead now, the handler not run again. The row releases its aggregate.
 */
async function spent<Tx>(c: HandleContext<Tx>, message: PullMessage, log: Record<string, unknown>): Promise<HandleResult> {
  c.keeper.release(message.claim);
  const reason = `gave up after ${message.attempt} of ${c.retry.maxAttempts} attempts: the lease of the last one expired during the handler (it did not finish within its lease)`;
  const outcome = await c.client.dead(message.claim, reason).catch(lostOnLockWait);
  if (outcome.ok) {
    c.logger.error('pull message dead-lettered: the lease of its last attempt expired before its handler finished', { ...log, attempt: `${message.attempt} of ${c.retry.maxAttempts}` });
    return 'dead';
  }
  c.logger.warn('pull claim lost at dead-letter', log);
  return 'lost';
}

async function fail<Tx>(c: HandleContext<Tx>, message: PullMessage, error: unknown, log: Record<string, unknown>): Promise<HandleResult> {
  c.keeper.release(message.claim);
  if (c.forceSignal.aborted) return 'abandoned';
  const { maxAttempts, baseDelayMs, maxDelayMs, jitter } = c.retry;
  if (message.attempt + 1 < maxAttempts) {
    const delayMs = backoffDelayMs(message.attempt, { baseMs: baseDelayMs, capMs: maxDelayMs, jitter });
    const outcome = await c.client.retry(message.claim, delayMs, error).catch(lostOnLockWait);
    if (outcome.ok) return 'retried';
    c.logger.warn('pull claim lost at retry', log);
    return 'lost';
  }
  const outcome = await c.client.dead(message.claim, `gave up after ${message.attempt + 1} of ${maxAttempts} attempts: ${redactError(error)}`).catch(lostOnLockWait);
  if (outcome.ok) {
    c.logger.error('pull message dead-lettered after its last attempt', { ...log, error: redactError(error) });
    return 'dead';
  }
  c.logger.warn('pull claim lost at dead-letter', log);
  return 'lost';
}
