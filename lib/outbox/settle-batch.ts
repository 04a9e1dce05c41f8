/**
 * Turning destination outcomes into row states, and writing them: one fenced statement per
 * outcome kind (sent, retry, dead) per claimed batch.
 *
 * Attempts: `attempt` is 0-based and counts the failed deliveries so far (a lease that expired
 * during a delivery counts too: the reclaim step adds it). `max_attempts` is the number of
 * deliveries: one that fails with `attempt + 1 < max_attempts` goes back to `pending` with
 * `attempt + 1`; otherwise the row is `dead` (its `attempt` then is `max_attempts - 1`, the
 * 0-based number of its last delivery). The default of 5 gives five deliveries.
 * A permanent failure marked `deadNow` (no retry can succeed) is `dead` at once; other permanent
 * failures are retried like retryable ones, as spec §4 asks.
 */
import { backoffDelayMs, OUTBOX_BACKOFF_CAP_MS } from '../claims/backoff.ts';
import { claimKey } from '../claims/claim-key.ts';
import { redactError } from '../claims/redact.ts';
import type { ClaimRef, DeadItem, OutboxRow, RetryItem } from '../db/driver.ts';
import type { EntryOutcome } from '../destinations/destination.ts';
import { FencedLockTimeoutError } from '../errors.ts';
import type { PassContext } from './pass-context.ts';

/** Jitter of outbox retries: up to +25 % (spec §4). */
export const OUTBOX_RETRY_JITTER = 0.25;

/** The writes one batch needs, collected while its destination calls answer. */
export class SettlePlan {
  readonly sent: ClaimRef[] = [];
  readonly retry: RetryItem[] = [];
  readonly dead: DeadItem[] = [];

  constructor(
    private readonly retryBaseDelayMs: number,
    private readonly random: () => number,
  ) {}

  /** A row that can never be delivered: dead now, attempt unchanged. */
  deadNow(row: OutboxRow, reason: string): void {
    this.dead.push({ id: row.id, token: row.claimToken, error: redactError(reason) });
  }

  /** Maps one destination answer to the row's next state. */
  add(row: OutboxRow, outcome: EntryOutcome): void {
    const claim = { id: row.id, token: row.claimToken };
    if (outcome.status === 'sent') {
      this.sent.push(claim);
    } else if (outcome.status === 'permanent' && outcome.deadNow === true) {
      this.deadNow(row, `permanent failure, not retried: ${outcome.error}`);
    } else if (row.attempt + 1 < row.maxAttempts) {
      const delayMs = backoffDelayMs(row.attempt, { baseMs: this.retryBaseDelayMs, capMs: OUTBOX_BACKOFF_CAP_MS, jitter: OUTBOX_RETRY_JITTER }, this.random);
      this.retry.push({ ...claim, delayMs, error: redactError(outcome.error) });
    } else {
      this.dead.push({ ...claim, error: redactError(`gave up after ${row.attempt + 1} of ${row.maxAttempts} attempts: ${outcome.error}`) });
    }
  }

  /** Drops the claims already known to be lost (`lost` holds `claimKey`s: id and token). */
  without(lost: ReadonlySet<string>): SettlePlan {
    if (lost.size === 0) return this;
    const plan = new SettlePlan(this.retryBaseDelayMs, this.random);
    plan.sent.push(...this.sent.filter((c) => !lost.has(claimKey(c))));
    plan.retry.push(...this.retry.filter((c) => !lost.has(claimKey(c))));
    plan.dead.push(...this.dead.filter((c) => !lost.has(claimKey(c))));
    return plan;
  }

  /** Rows the plan writes. */
  get size(): number {
    return this.sent.length + this.retry.length + this.dead.length;
  }
}

/**
 * Writes a batch's outcomes: at most three statements, run together; rejects with the first error
 * after counting every write that answered. A row a fenced write did not
 * change lost its claim (and so did every row of a write whose lock wait reached the lease's end,
 * `FencedLockTimeoutError`): a lost `sent` is logged as an error (the destination holds the message
 * and the new owner will publish it again), a lost retry or dead as a warning; each counts in
 * `queuebox_claims_lost_total{component="outbox"}` and the row is left to its new owner.
 */
export async function settleBatch(ctx: PassContext, plan: SettlePlan): Promise<void> {
  // allSettled, not all: when one statement fails (a dropped connection), the others may have
  // written; each write that answered is counted (its lost claims too) before the error is thrown.
  const [sent, retried, dead] = await Promise.allSettled([
    ctx.driver.outboxMarkSentMany({ claims: plan.sent }),
    ctx.driver.outboxRetryMany({ items: plan.retry }),
    ctx.driver.outboxMarkDeadMany({ items: plan.dead }),
  ]);
  record(ctx, 'sent', plan.sent, sent);
  record(ctx, 'retried', plan.retry, retried);
  record(ctx, 'dead', plan.dead, dead);
  for (const result of [sent, retried, dead]) if (result.status === 'rejected' && !(result.reason instanceof FencedLockTimeoutError)) throw result.reason;
}

/**
 * Counts one write's answer. A write that waited on another transaction's row lock until the
 * lease ended (`FencedLockTimeoutError`) changed nothing: all its claims are lost, like rows a
 * fenced write did not change, and the pass goes on (the rows are left to the reclaim).
 */
function record(ctx: PassContext, status: 'sent' | 'retried' | 'dead', asked: ClaimRef[], result: PromiseSettledResult<string[]>): void {
  if (result.status === 'fulfilled') recordChanged(ctx, status, asked, result.value);
  else if (result.reason instanceof FencedLockTimeoutError) recordChanged(ctx, status, asked, [], String(result.reason));
}

function recordChanged(ctx: PassContext, status: 'sent' | 'retried' | 'dead', asked: ClaimRef[], changed: string[], error?: string): void {
  ctx.tally[status] += changed.length;
  ctx.metrics.count('outboxMessages', changed.length, { status });
  if (changed.length === asked.length) return;
  const done = new Set(changed);
  const lostIds = asked.filter((c) => !done.has(c.id)).map((c) => c.id);
  ctx.tally.claimsLost += lostIds.length;
  ctx.metrics.count('claimsLost', lostIds.length, { component: 'outbox' });
  ctx.flushMetrics();
  const detail = error === undefined ? { ids: lostIds } : { ids: lostIds, error };
  if (status === 'sent') {
    ctx.logger.error('outbox claim lost before marking sent: the destination already holds these messages and the new owner will publish them again', detail);
  } else {
    ctx.logger.warn(`outbox claim lost before marking ${status === 'dead' ? 'dead' : 'for retry'}: the row is left to its new owner`, detail);
  }
}
