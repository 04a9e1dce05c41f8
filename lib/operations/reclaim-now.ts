/**
 * Reclaim as an operation: return expired `processing` rows of the outbox AND the inbox to
 * `pending`, in one call (each lost lease counts as an attempt; a row whose last attempt it was
 * goes `dead`). Scheduled runs respect the shared throttle (the same database gate the
 * workers use, so a scheduled reclaim never adds load beyond one reclaim per `claimTimeoutMs / 5`);
 * a manual run ignores it and reclaims now.
 */
import type { QueueBoxConfig } from '../config/schema.ts';
import type { Driver, ReclaimResult } from '../db/driver.ts';
import { QueueBoxError } from '../errors.ts';

/** Rows returned to `pending`, per table; and rows whose lease expired during their last attempt, now `dead`. */
export interface ReclaimCounts {
  outbox: number;
  inbox: number;
  outboxDead: number;
  inboxDead: number;
}

export interface ReclaimNowOptions {
  driver: Driver;
  config: Pick<QueueBoxConfig, 'outbox' | 'inbox'>;
  /** True: gate each table by its worker's throttle (`claimTimeoutMs / 5`); false: reclaim now. */
  throttled: boolean;
}

/**
 * One table's reclaim failed; the other may have committed. `counts` holds what the one that
 * answered did (0 for the failed table), so its rows are counted: the rows it made `dead` went
 * dead whatever happened to the other table.
 */
export class ReclaimIncompleteError extends QueueBoxError {
  override readonly name = 'ReclaimIncompleteError';
  constructor(
    readonly counts: ReclaimCounts,
    cause: unknown,
  ) {
    super(`reclaim failed: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
  }
}

/**
 * Reclaims both tables (concurrently) and returns how many rows each gave back. When one fails,
 * the other still runs to its end and `ReclaimIncompleteError` carries its counts.
 */
export async function reclaimNow(options: ReclaimNowOptions): Promise<ReclaimCounts> {
  const { driver, config, throttled } = options;
  const [outbox, inbox] = await Promise.allSettled([
    driver.outboxReclaimExpired(throttled ? { throttleMs: Math.floor(config.outbox.claimTimeoutMs / 5) } : {}),
    driver.inboxReclaimExpired({
      ...(throttled ? { throttleMs: Math.floor(config.inbox.relay.claimTimeoutMs / 5) } : {}),
      maxAttempts: config.inbox.relay.maxAttempts ?? config.outbox.maxAttempts,
    }),
  ]);
  const done = (r: PromiseSettledResult<ReclaimResult>) => (r.status === 'fulfilled' ? r.value : { reclaimed: 0, dead: 0 });
  const counts = { outbox: done(outbox).reclaimed, inbox: done(inbox).reclaimed, outboxDead: done(outbox).dead, inboxDead: done(inbox).dead };
  const failed = [outbox, inbox].find((r) => r.status === 'rejected');
  if (failed !== undefined) throw new ReclaimIncompleteError(counts, failed.reason);
  return counts;
}

/**
 * True for an EventBridge Scheduler/rule event (`source: "aws.events"`, `detail-type:
 * "Scheduled Event"`) that does not ask for `force`. Anything else — `serverless invoke`, the
 * console's test event, `{"force": true}` — is a manual invocation.
 */
export function isScheduledEvent(event: unknown): boolean {
  if (typeof event !== 'object' || event === null) return false;
  const e = event as Record<string, unknown>;
  return e.source === 'aws.events' && e.force !== true;
}
