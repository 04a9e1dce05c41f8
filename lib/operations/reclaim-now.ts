/**
 * Reclaim as an operation: return expired `processing` rows of the outbox AND the inbox to
 * `pending`, in one call (each lost lease counts as an attempt; a row whose last attempt it was
 * goes `dead`). Scheduled runs respect the shared throttle (the same database gate the
 * workers use, so a scheduled reclaim never adds load beyond one reclaim per `claimTimeoutMs / 5`);
 * a manual run ignores it and reclaims now.
 */
import type { QueueBoxConfig } from '../config/schema.ts';
import type { Driver } from '../db/driver.ts';

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

/** Reclaims both tables (concurrently) and returns how many rows each gave back. */
export async function reclaimNow(options: ReclaimNowOptions): Promise<ReclaimCounts> {
  const { driver, config, throttled } = options;
  const [outbox, inbox] = await Promise.all([
    driver.outboxReclaimExpired(throttled ? { throttleMs: Math.floor(config.outbox.claimTimeoutMs / 5) } : {}),
    driver.inboxReclaimExpired({
      ...(throttled ? { throttleMs: Math.floor(config.inbox.relay.claimTimeoutMs / 5) } : {}),
      maxAttempts: config.inbox.relay.maxAttempts ?? config.outbox.maxAttempts,
    }),
  ]);
  return { outbox: outbox.reclaimed, inbox: inbox.reclaimed, outboxDead: outbox.dead, inboxDead: inbox.dead };
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
