/**
 * Why a key's (or aggregate's) head row is not moving, in words an operator can act on.
 */
import type { ConsoleBlockedHead } from '../db/driver.ts';
import { attemptNumber } from './attempt-text.ts';

/** Failures after which a head that keeps failing is called a poison row. */
export const POISON_ATTEMPTS = 3;

/** The cause of a stuck head, most specific first. */
export type BlockedCause = 'expired-lease' | 'poison' | 'retry-backoff' | 'scheduled';

/** A cause and its sentence. */
export interface BlockedReason {
  cause: BlockedCause;
  text: string;
}

/** Classifies a head returned by `outboxBlockedKeys` / `inboxBlockedAggregates`. */
export function blockedReason(head: ConsoleBlockedHead): BlockedReason {
  if (head.state === 'processing') {
    return {
      cause: 'expired-lease',
      text: `lease held by an invocation that died: expired ${duration(-head.leaseLeftMs)} ago and not renewed; the next reclaim returns the row to pending`,
    };
  }
  const of = head.maxAttempts !== null ? ` of ${head.maxAttempts}` : '';
  // The attempts that failed, and the one the head waits for: `2 of 5 attempts failed; attempt 3 of 5 in 9 s`.
  const failed = `${head.attempt}${of} attempt${head.attempt === 1 && of === '' ? '' : 's'} failed`;
  const next = `attempt ${attemptNumber(head)} ${head.dueInMs > 0 ? `in ${duration(head.dueInMs)}` : 'due now'}`;
  if (head.attempt >= POISON_ATTEMPTS) {
    return { cause: 'poison', text: `poison row: ${failed} and it keeps failing; ${next}` };
  }
  if (head.attempt > 0) return { cause: 'retry-backoff', text: `retry backing off: ${failed}; ${next}` };
  return { cause: 'scheduled', text: `scheduled in the future: first attempt in ${duration(head.dueInMs)}` };
}

/**
 * Past this a span reaches a time at `infinity` or `-infinity` (or past the year 275760, where a
 * `Date` ends): about 250,000 years, shown as `∞`.
 */
const UNBOUNDED_MS = 8e15;

/** `850 ms`, `42 s`, `5 min 3 s`, `2 h 10 min`, `3 d 4 h`; `∞` for a span to `infinity` or from `-infinity`. */
export function duration(ms: number): string {
  if (!(Math.abs(ms) < UNBOUNDED_MS) && !Number.isNaN(ms)) return '∞';
  const abs = Math.max(0, Math.round(ms));
  if (abs < 1000) return `${abs} ms`;
  const s = Math.floor(abs / 1000);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  if (s < 86_400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  return `${Math.floor(s / 86_400)} d ${Math.floor((s % 86_400) / 3600)} h`;
}
