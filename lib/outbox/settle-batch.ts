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
 *
 * A failed row's `last_error` names its destination and queue or bus
 * (`destination orders (SQS queue orders.fifo): SQS SendMessageBatch failed: …`), and the rows
 * each write retried or dead-lettered are logged and counted per destination (`failure-report.ts`).
 */
import { backoffDelayMs, OUTBOX_BACKOFF_CAP_MS } from '../claims/backoff.ts';
import { claimKey } from '../claims/claim-key.ts';
import { redactError } from '../claims/redact.ts';
import type { ClaimRef, DeadItem, OutboxRow, RetryItem } from '../db/driver.ts';
import type { Destination, EntryOutcome } from '../destinations/destination.ts';
import { InvocationEndedError, withStatementBudget } from '../db/statement-budget.ts';
import { FencedLockTimeoutError } from '../errors.ts';
import { destinationLabel, reportFailures, type FailureNote } from './failure-report.ts';
import type { PassContext } from './pass-context.ts';

/** Jitter of outbox retries: up to +25 % (spec §4). */
export const OUTBOX_RETRY_JITTER = 0.25;

/** The writes one batch needs, collected while its destination calls answer. */
export class SettlePlan {
  readonly sent: ClaimRef[] = [];
  readonly retry: RetryItem[] = [];
  readonly dead: DeadItem[] = [];
  /** Where and why each retried or dead row failed, by row id: for the failure log line and metric. */
  readonly notes: Map<string, FailureNote>;

  constructor(
    private readonly retryBaseDelayMs: number,
    private readonly random: () => number,
    notes?: Map<string, FailureNote>,
  ) {
    this.notes = notes ?? new Map();
  }

  /**
   * A row that can never be delivered: dead now, attempt unchanged. `failure` names the
   * destination (or `(no route)`) and the error class.
   */
  deadNow(row: OutboxRow, reason: string, failure: { destinationName: string; destination?: Destination; errorClass: string }): void {
    const error = redactError(reason);
    this.dead.push({ id: row.id, token: row.claimToken, error });
    this.notes.set(row.id, { row, ...failure, error });
  }

  /** Maps one answer of `destination` to the row's next state; a failure's error is prefixed with the destination. */
  add(row: OutboxRow, outcome: EntryOutcome, destination: Destination): void {
    const claim = { id: row.id, token: row.claimToken };
    if (outcome.status === 'sent') {
      this.sent.push(claim);
      return;
    }
    const reason = `${destinationLabel(destination)}: ${outcome.error}`;
    const failure = { destinationName: destination.name, destination, errorClass: outcome.errorClass ?? 'Unknown' };
    if (outcome.status === 'permanent' && outcome.deadNow === true) {
      this.deadNow(row, `permanent failure, not retried: ${reason}`, failure);
    } else if (row.attempt + 1 < row.maxAttempts) {
      const delayMs = backoffDelayMs(row.attempt, { baseMs: this.retryBaseDelayMs, capMs: OUTBOX_BACKOFF_CAP_MS, jitter: OUTBOX_RETRY_JITTER }, this.random);
      const error = redactError(reason);
      this.retry.push({ ...claim, delayMs, error });
      this.notes.set(row.id, { row, ...failure, error });
    } else {
      const error = redactError(`gave up after ${row.attempt + 1} of ${row.maxAttempts} attempts: ${reason}`);
      this.dead.push({ ...claim, error });
      this.notes.set(row.id, { row, ...failure, error });
    }
  }

  /** Drops the claims already known to be lost (`lost` holds `claimKey`s: id and token). */
  without(lost: ReadonlySet<string>): SettlePlan {
    if (lost.size === 0) return this;
    const plan = new SettlePlan(this.retryBaseDelayMs, this.random, this.notes);
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
 *
 * The writes are finishing writes: bounded by the invocation's end (`ctx.finishingBudgetMs`), not
 * the pass's deadline. Rows made dead are counted and written at once (`ctx.flushMetrics`), so the
 * dead-message alarms see them even when a later step of the pass is cut off.
 *
 * A write refused before it was sent because the invocation had no time left
 * (`InvocationEndedError`: the check before sending, or the wait for a connection, found none — a
 * pass frozen or held past the invocation's end) did not run: nothing of it is half-done, and its
 * rows stay `processing` until the reclaim returns them after their lease (the destination's
 * `sent` answers among them are delivered again). It fails nothing: the settle resolves with those
 * rows (`OutOfTime`, the later writes of an ordered settle that stopped there included), and the
 * pass ends with its summary. A write that was sent and failed rejects the settle as before,
 * whatever else was not sent.
 */
export async function settleBatch(ctx: PassContext, plan: SettlePlan, unstarted: ClaimRef[] = [], ordered = false): Promise<OutOfTime> {
  const budget = ctx.finishingBudgetMs;
  try {
    return await (budget === undefined ? settleWrites(ctx, plan, unstarted, ordered) : withStatementBudget(budget, () => settleWrites(ctx, plan, unstarted, ordered)));
  } catch (error) {
    // Refused before any write was asked for.
    if (!(error instanceof InvocationEndedError)) throw error;
    return { rows: plan.size + (ctx.driver.outboxReleaseMany === undefined ? 0 : unstarted.length), delivered: plan.sent.length };
  }
}

/** Rows a settle did not write because the invocation had no time left: `rows`, `delivered` of which the destination had accepted. */
export interface OutOfTime {
  rows: number;
  delivered: number;
}

async function settleWrites(ctx: PassContext, plan: SettlePlan, unstarted: ClaimRef[], ordered: boolean): Promise<OutOfTime> {
  // allSettled, not all: when one statement fails (a dropped connection), the others may have
  // written; each write that answered is counted (its lost claims too) before the error is thrown.
  const releaseMany = ctx.driver.outboxReleaseMany?.bind(ctx.driver);
  const release = () => (unstarted.length === 0 || releaseMany === undefined ? Promise.resolve([]) : releaseMany({ claims: unstarted }));
  const [sent, retried, dead, released] =
    ordered && plan.sent.length < plan.size + unstarted.length ? await inKeyOrder(ctx, plan, release) : await Promise.allSettled([
      ctx.driver.outboxMarkSentMany({ claims: plan.sent }),
      ctx.driver.outboxRetryMany({ items: plan.retry }),
      ctx.driver.outboxMarkDeadMany({ items: plan.dead }),
      release(),
    ]);
  record(ctx, 'sent', plan.sent, sent);
  record(ctx, 'retried', plan.retry, retried);
  record(ctx, 'dead', plan.dead, dead);
  // A release that changed no row: the claim was lost meanwhile, and the row is its new owner's.
  if (released.status === 'fulfilled') ctx.tally.released += released.value.length;
  reportFailures(ctx, plan.notes, retried.status === 'fulfilled' ? retried.value : [], dead.status === 'fulfilled' ? dead.value : []);
  const writes: Array<[Settled, number]> = [
    [sent, plan.sent.length],
    [retried, plan.retry.length],
    [dead, plan.dead.length],
    [released, releaseMany === undefined ? 0 : unstarted.length],
  ];
  const outOfTime = { rows: 0, delivered: 0 };
  for (const [result, rows] of writes) {
    if (result.status === 'fulfilled' || result.reason instanceof FencedLockTimeoutError) continue;
    if (!(result.reason instanceof InvocationEndedError)) throw result.reason;
    outOfTime.rows += rows;
  }
  if (sent.status === 'rejected' && sent.reason instanceof InvocationEndedError) outOfTime.delivered = plan.sent.length;
  return outOfTime;
}

type Settled = PromiseSettledResult<string[]>;

/**
 * The writes of a batch holding several rows of a key, when not all were sent: the releases, then
 * the retries and dead rows, then the sent rows. A key's rows in a claim end as sent rows, then at
 * most one retried or dead row, then released rows, and its first row (`key_first`) is the first
 * of these; so the first row leaves `processing` last, and the in-flight index holds the key
 * until the claim has let go of every row of it. A write that failed stops the later ones (their
 * rows stay `processing` for the reclaim): the key stays held rather than half let go. (A pass
 * that stops waiting writes only what answered and leaves an open call's follower `processing`
 * after its first row was sent; the claim's in-flight test covers every `processing` row, so the
 * key stays held by that follower.)
 */
async function inKeyOrder(ctx: PassContext, plan: SettlePlan, release: () => Promise<string[]>): Promise<[Settled, Settled, Settled, Settled]> {
  // A write that waited until the lease ended changed nothing and lost its claims: so did the
  // other rows of those claims (one lease), and the later writes are fenced like any other.
  const failure = (results: Settled[]): Settled | undefined => results.find((r) => r.status === 'rejected' && !(r.reason instanceof FencedLockTimeoutError));
  const [released] = await Promise.allSettled([release()]);
  let stop = failure([released!]);
  if (stop !== undefined) return [stop, stop, stop, released!];
  const [retried, dead] = await Promise.allSettled([ctx.driver.outboxRetryMany({ items: plan.retry }), ctx.driver.outboxMarkDeadMany({ items: plan.dead })]);
  stop = failure([retried!, dead!]);
  if (stop !== undefined) return [stop, retried!, dead!, released!];
  const [sent] = await Promise.allSettled([ctx.driver.outboxMarkSentMany({ claims: plan.sent })]);
  return [sent!, retried!, dead!, released!];
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
  // Written right after this settle (once per burst, with its failure counts), as lost claims are.
  if (status === 'dead' && changed.length > 0) ctx.flushMetrics();
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
