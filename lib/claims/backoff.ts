/**
 * Retry delays: `baseMs × 2^attempt`, plus up to `jitter` × that delay at random, capped at `capMs`.
 *
 * Outbox (spec §4): base `retryBaseDelayMs`, jitter 25 %, cap 60 s.
 * Pull (spec §6): base 1000 ms, jitter 20 %, cap 300 s.
 */
export interface BackoffPolicy {
  baseMs: number;
  capMs: number;
  /** Fraction of the exponential delay added at random (0.25 = up to +25 %). */
  jitter: number;
}

export const OUTBOX_BACKOFF_CAP_MS = 60_000;

/** Delay before the retry that follows a failure of `attempt` (0-based). */
export function backoffDelayMs(attempt: number, policy: BackoffPolicy, random: () => number = Math.random): number {
  const exponential = policy.baseMs * 2 ** Math.min(attempt, 40);
  const delay = exponential + exponential * policy.jitter * random();
  return Math.round(Math.min(delay, policy.capMs));
}
