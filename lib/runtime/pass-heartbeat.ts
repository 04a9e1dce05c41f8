/**
 * The heartbeat of a scheduled function: when a pass finished (returned, not thrown), count
 * `queuebox_passes_finished_total{function}` — what the heartbeat alarms watch — and stamp the
 * worker's row in the maintenance table with the database clock, which `queuebox status` reads.
 * One upsert per pass, never per message.
 *
 * A failed stamp is logged, not thrown: the pass did finish, and its metric says so. A function
 * that fails at start, throws, or is never invoked records nothing, so its alarm fires.
 *
 * The metric is written (with every count recorded before it) before the stamp is sent: the stamp
 * may wait on the database (a lock on the maintenance table, a stalled network) until its bound,
 * and what the alarms watch must not wait with it. The stamp is a closing step: its bound is the
 * caller's `remainingMs`, the deadline or a short slice past it (`closingBudgetMs`), never the
 * invocation's end. A stamp cut off there (or not sent: no time left) only leaves `queuebox
 * status` showing an earlier pass; the heartbeat alarms read the metric, which was written.
 */
import { MIN_TIME_TO_CLAIM_MS } from '../claims/lease.ts';
import { redactError } from '../claims/redact.ts';
import type { Driver, PassWorker } from '../db/driver.ts';
import { withStatementBudget } from '../db/statement-budget.ts';
import type { QueueBoxMetrics } from '../observability/metrics.ts';
import type { PassLogger } from '../outbox/pass-context.ts';

export interface PassHeartbeatOptions {
  driver: Pick<Driver, 'passRecordFinished'>;
  metrics: QueueBoxMetrics;
  logger: Pick<PassLogger, 'warn'>;
  worker: PassWorker;
  /** Time left for the stamp's statement (ms): the pass's closing window (`closingBudgetMs`). */
  remainingMs: () => number;
}

/** Counts the finished pass, writes the metrics recorded so far, then stamps its time in the database. */
export async function recordPassFinished(options: PassHeartbeatOptions): Promise<void> {
  const { driver, metrics, logger, worker } = options;
  metrics.count('passesFinished', 1, { function: worker });
  metrics.flush();
  try {
    await withStatementBudget(options.remainingMs, () => driver.passRecordFinished({ worker }));
  } catch (error) {
    logger.warn('the finished pass was not recorded in the database: queuebox status shows an earlier one', { worker, error: redactError(error) });
  }
}

/**
 * Whether an invocation that starts now leaves its pass time to claim: `deadlineMs` (the time to
 * the pass's deadline, the invocation's less `lambda.deadlineMarginMs`) at least
 * `MIN_TIME_TO_CLAIM_MS` of its worker. When not, it logs an error naming the settings: every such invocation
 * would run a pass that claims nothing, and must not count as a finished pass (the heartbeat
 * alarm is what tells the operator that nothing moves).
 */
export function hasTimeToClaim(options: { deadlineMs: number; invocationMs: number; marginMs: number; worker: keyof typeof MIN_TIME_TO_CLAIM_MS; logger: Pick<PassLogger, 'error'> }): boolean {
  const leastMs = MIN_TIME_TO_CLAIM_MS[options.worker];
  if (options.deadlineMs >= leastMs) return true;
  options.logger.error(
    `the invocation leaves its pass no time to claim: ${options.invocationMs} ms left at its start, lambda.deadlineMarginMs ${options.marginMs}; raise the function's timeout above the margin + ${leastMs} ms, or lower lambda.deadlineMarginMs (no heartbeat is recorded)`,
    { worker: options.worker },
  );
  return false;
}
