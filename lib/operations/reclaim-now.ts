/**
 * Reclaim as an operation: return expired `processing` rows of the outbox AND the inbox to
 * `pending`, in one call (each lost lease counts as an attempt; a row whose last attempt it was
 * goes `dead`). Scheduled runs respect the shared throttle (the same database gate the
 * workers use, so a scheduled reclaim never adds load beyond one reclaim per `claimTimeoutMs / 5`);
 * a manual run ignores it and reclaims now.
 */
import { redactedError } from '../claims/redact.ts';
import type { QueueBoxConfig } from '../config/schema.ts';
import type { Driver, ReclaimResult } from '../db/driver.ts';
import { QueueBoxError, UsageError } from '../errors.ts';
import { scheduledFunctionEvent, unknownKeys } from './scheduled-function-event.ts';

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
 * One table's reclaim failed (or both: `failed` names them; `cause` is the first one's error); the
 * other may have committed. `counts` holds what the one that answered did (0 for a failed table),
 * so its rows are counted: the rows it made `dead` went dead whatever happened to the other table.
 */
export class ReclaimIncompleteError extends QueueBoxError {
  override readonly name = 'ReclaimIncompleteError';
  constructor(
    readonly counts: ReclaimCounts,
    cause: unknown,
    readonly failed: readonly ('outbox' | 'inbox')[] = [],
  ) {
    super(`reclaim failed: ${redactedError(cause).message}`, { cause });
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
  const failed = ([['outbox', outbox], ['inbox', inbox]] as const).filter(([, r]) => r.status === 'rejected');
  const first = failed[0]?.[1];
  if (first?.status === 'rejected') throw new ReclaimIncompleteError(counts, first.reason, failed.map(([table]) => table));
  return counts;
}

const RECLAIM_USAGE =
  'the reclaim event is {} or {"force": true} (reclaim now, ignoring the throttle), {"force": false} (reclaim within the throttle, as the schedule does), or the schedule\'s event';

/**
 * Whether the reclaim function's event asks for a throttled run. The schedule's event is
 * throttled; `{}` or nothing (an invoke by hand) is not; `"force": true | false` says it outright,
 * on either. Any other key, and a `force` that is not a boolean, is refused naming it before the
 * database is reached (`{"force": "true"}` must not run throttled, nor `{"dryRun": true}` reclaim).
 */
export function reclaimEventThrottled(event: unknown): boolean {
  const { scheduled, options } = scheduledFunctionEvent('reclaim', event, RECLAIM_USAGE);
  const unknown = Object.keys(options).filter((key) => key !== 'force');
  if (unknown.length > 0) throw new UsageError(`reclaim: ${unknownKeys(unknown)}: ${RECLAIM_USAGE}`);
  const force = options.force;
  if (force !== undefined && typeof force !== 'boolean') throw new UsageError(`reclaim: force must be true or false, got ${JSON.stringify(force).slice(0, 100)}: ${RECLAIM_USAGE}`);
  return force === undefined ? scheduled : !force;
}
