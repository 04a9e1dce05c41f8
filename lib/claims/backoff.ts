/**
 * Retry delays: `baseMs × 2^attempt`, plus up to `jitter` × that delay at random, capped at `capMs`.
 *
 * Outbox (spec §4): base `retryBaseDelayMs`, jitter 25 %, cap 60 s.
 * Pull (spec §6): base 1000 ms, jitter 20 %, cap 300 s.
 *
 * Idle polling (`idlePollDelayMs`): the same curve without jitter, from `pollIntervalMs` up to
 * `maxPollIntervalMs`.
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

/** How a pass polls an empty table: the first pause and the longest one (ms). */
export interface IdlePollSettings {
  pollIntervalMs: number;
  /** The longest pause; never below `pollIntervalMs`. */
  maxPollIntervalMs: number;
}

/**
 * The pause before the next claim when the last `emptyClaims + 1` claims in a row found nothing:
 * `pollIntervalMs`, doubling with each further empty claim, up to `maxPollIntervalMs` (never
 * below `pollIntervalMs`, so a configuration that sets only a long `pollIntervalMs` keeps it). A
 * claim that finds rows starts the count again. With the defaults (100 ms, 1 s) an idle pass sends
 * about one claim a second, and a row committed while it waits is claimed within about a second.
 */
export function idlePollDelayMs(emptyClaims: number, settings: IdlePollSettings): number {
  return backoffDelayMs(emptyClaims, { baseMs: settings.pollIntervalMs, capMs: Math.max(settings.pollIntervalMs, settings.maxPollIntervalMs), jitter: 0 });
}
