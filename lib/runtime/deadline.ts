/**
 * The invocation deadline of a scheduled pass (spec §3):
 * `deadline = context.getRemainingTimeInMillis() − margin`.
 */
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

/** Resolves after `ms`, or early when `signal` aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted || ms <= 0) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });
}
