/**
 * The invocation deadline of a scheduled pass (spec §3):
 * `deadline = context.getRemainingTimeInMillis() − margin`.
 */
import { MAX_TIMER_MS } from './timer-limit.ts';

/** What a deadline reads the time left from: a Lambda `Context`, or anything with the same method. */
export interface RemainingTime {
  getRemainingTimeInMillis(): number;
}

/** The end of a pass: `remainingMs()` counts down to the invocation's end minus the margin. */
export interface Deadline {
  /** Milliseconds until the pass must have returned (never negative). */
  remainingMs(): number;
  /** Milliseconds until the invocation itself ends (leases never outlive it). */
  invocationRemainingMs(): number;
  /** True once the deadline has passed. */
  expired(): boolean;
}

/** A deadline `marginMs` before the end that `context` counts down to (a Lambda context: its timeout). */
export function createDeadline(context: RemainingTime, marginMs: number): Deadline {
  return {
    remainingMs: () => Math.max(0, context.getRemainingTimeInMillis() - marginMs),
    invocationRemainingMs: () => Math.max(0, context.getRemainingTimeInMillis()),
    expired: () => context.getRemainingTimeInMillis() - marginMs <= 0,
  };
}

/**
 * The time left for the statements of a one-off operation (retention, reclaim, replay), for
 * `withStatementBudget`: up to the deadline (the invocation's end less `marginMs`), so a statement
 * still running then is cancelled by the database and the handler has the margin to answer; in an
 * invocation shorter than twice the margin, up to its middle.
 */
export function operationBudgetMs(context: RemainingTime, marginMs: number): () => number {
  const total = context.getRemainingTimeInMillis();
  const reserve = total > 2 * marginMs ? marginMs : total / 2;
  return () => Math.max(0, context.getRemainingTimeInMillis() - reserve);
}

/**
 * How long a pass still waits for the answers of statements it sent when the invocation has no
 * time left (ms). A pass waits for every statement it started until it ends, but no longer than
 * the invocation (Lambda ends a timed-out invocation's process, which ends its statements with
 * it); a pass resumed after a freeze that outlasted its invocation finds the clock past the end,
 * while the database has answered its statements meanwhile (a fenced write's lock wait ends with
 * its lease, which ends with the invocation): this grace lets it read those answers.
 */
export const ANSWER_GRACE_MS = 1000;

/** Milliseconds to wait for statements already sent: the invocation's time left, at least `ANSWER_GRACE_MS`. */
export function answerWaitMs(deadline: Deadline): number {
  return Math.max(deadline.invocationRemainingMs(), ANSWER_GRACE_MS);
}

/**
 * Resolves after `ms`, or early when `signal` aborts. A delay above `MAX_TIMER_MS` (about 24.8
 * days), or not finite, waits `MAX_TIMER_MS`: Node would turn such a timer into 1 ms.
 */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted || !(ms > 0)) return resolve();
    const timer = setTimeout(done, Math.min(ms, MAX_TIMER_MS));
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });
}
