/**
 * What the pieces of one outbox pass share: dependencies, the lease keeper, the set of claims
 * lost during the pass and the running tally that becomes the pass summary.
 */
import type { LeaseKeeper } from '../claims/lease-keeper.ts';
import type { OpenCalls } from './open-calls.ts';
import type { Driver } from '../db/driver.ts';
import type { Destinations } from '../destinations/create-destinations.ts';
import type { QueueBoxMetrics } from '../observability/metrics.ts';
import type { CallLimiter } from './call-limiter.ts';
import type { Router } from './routes.ts';

/** The driver methods the poller uses (a full `Driver` satisfies it). */
export type OutboxPassDriver = Pick<
  Driver,
  'outboxClaimMany' | 'outboxRenewMany' | 'outboxMarkSentMany' | 'outboxRetryMany' | 'outboxMarkDeadMany' | 'outboxReclaimExpired' | 'outboxStats'
> &
  Partial<Pick<Driver, 'outboxReleaseMany'>>;

/** The logging the poller does; a Powertools `Logger` satisfies it. */
export interface PassLogger {
  debug(message: string, ...extra: Array<Record<string, unknown>>): void;
  info(message: string, ...extra: Array<Record<string, unknown>>): void;
  warn(message: string, ...extra: Array<Record<string, unknown>>): void;
  error(message: string, ...extra: Array<Record<string, unknown>>): void;
}

/** Counters of one pass; every count is of rows unless named otherwise. */
export interface PassTally {
  claimed: number;
  sent: number;
  retried: number;
  dead: number;
  /** Claims this pass lost: a renewal or a fenced settle write changed no row. */
  claimsLost: number;
  /** Rows the reclaim step returned to `pending`. */
  reclaimed: number;
  /** Claim statements that returned at least one row. */
  batches: number;
  /** Destination calls made (a batch split by a size limit is several). */
  publishCalls: number;
  /** Claimed rows the pass stopped before offering to a destination: back to `pending`, no attempt spent. */
  released: number;
}

export interface PassContext {
  driver: OutboxPassDriver;
  destinations: Destinations;
  router: Router;
  limiter: CallLimiter;
  keeper: LeaseKeeper;
  metrics: QueueBoxMetrics;
  logger: PassLogger;
  /**
   * The time left for a finishing write (a settle) sent now: the invocation's, not the pass's
   * deadline (`settleBatch`). Absent: the writes keep the budget they are sent in.
   */
  finishingBudgetMs?: () => number;
  retryBaseDelayMs: number;
  /** Jitter source for retry delays. */
  random: () => number;
  /** The destination calls in flight; `abortAll` when the pass gives up on in-flight work. */
  calls: OpenCalls;
  /** True once the pass has returned: late results are not settled (the rows stay `processing`). */
  closed(): boolean;
  /**
   * Claims (`claimKey`: id and token) a renewal lost during this pass; their outcomes are never
   * settled. A later claim of the same row is another claim and is published and settled.
   */
  lost: Set<string>;
  /** Settles sent and not yet answered: the pass awaits them before it counts what it abandoned. */
  settling: Set<Promise<void>>;
  /**
   * Batches still waiting for a destination call, each with the settle of what has answered so
   * far. When the pass stops waiting, it runs them: a row whose call answered is settled (sent,
   * retried, dead) even though a call for other rows of its batch is still open; only the rows of
   * the open calls are left to their lease.
   */
  unfinished: Set<() => Promise<void>>;
  /** Emits the metrics recorded so far (a step whose counts must survive a killed invocation). */
  flushMetrics(): void;
  tally: PassTally;
  /** Records the duration of one destination call. */
  publishTimed(destinationType: string, ms: number): void;
  /**
   * True while the time left before the deadline covers the claim window, in which a call started
   * now is expected to answer: a batch holding several rows of a key starts a key's next round
   * only then (`deliverPipelined`), as the pass claims only then.
   */
  callFitsBeforeDeadline(): boolean;
}
