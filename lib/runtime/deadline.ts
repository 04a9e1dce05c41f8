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
  const deadline = operationDeadline(context, marginMs);
  return () => deadline.remainingMs();
}

/** The deadline of a one-off operation: `operationBudgetMs` as a `Deadline` (for `closingBudgetMs`). */
export function operationDeadline(context: RemainingTime, marginMs: number): Deadline {
  const total = context.getRemainingTimeInMillis();
  return createDeadline(context, total > 2 * marginMs ? marginMs : total / 2);
}

/**
 * The most a pass's closing steps — its backlog read (gauges), the heartbeat's stamp, a started
 * pass's scale-out release — take past its deadline (ms), when the pass ended at or near it.
 */
export const CLOSING_SLICE_MS = 1000;

/** The end of each deadline's closing window, as the invocation's time left then (`closingBudgetMs`). */
const closingFloors = new WeakMap<Deadline, number>();

/**
 * The time left for the closing steps of a pass (for `withStatementBudget`): its backlog read, the
 * heartbeat's stamp and the scale-out release, which come after its work and are not finishing
 * writes, so they do not get the margin. They share one window, fixed when the first of them asks:
 * up to the deadline, or — for a pass that ended at its deadline or less than `CLOSING_SLICE_MS`
 * before it — `CLOSING_SLICE_MS` from then, never more than half of the invocation's time left
 * then. So the handler returns with at least that other half (less `NO_ANSWER_GRACE_MS` of a
 * database that stopped answering) to write its metrics, and one whose settles took the margin to
 * the invocation's end skips these steps (not sent: `InvocationEndedError`, logged).
 */
export function closingBudgetMs(deadline: Deadline, options: { shared?: boolean } = {}): () => number {
  let floor = options.shared === false ? undefined : closingFloors.get(deadline);
  if (floor === undefined) {
    const left = deadline.invocationRemainingMs();
    floor = left - Math.max(deadline.remainingMs(), Math.min(CLOSING_SLICE_MS, left / 2));
    // A step that may come before the pass's end (the release of a slot whose invoke failed)
    // takes a window of its own (`shared: false`): fixing the shared one then would leave the
    // pass's own closing steps none once it runs to its deadline.
    if (options.shared !== false) closingFloors.set(deadline, floor);
  }
  const until = floor;
  return () => Math.max(0, deadline.invocationRemainingMs() - until);
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
