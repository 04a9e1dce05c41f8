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
 * One table's reclaim failed or was cut short (or both: `failed` names them; `cause` is the first
 * one's error); the other may have committed. `counts` holds what each table's reclaim committed:
 * all of it for the one that answered, the chunks committed before the cut for one cut short
 * (PostgreSQL commits a reclaim chunk by chunk: `ReclaimResult.cutBy`), 0 for one that failed
 * outright. So their rows are counted: the rows a reclaim made `dead` went dead whatever happened
 * after them.
 */
export class ReclaimIncompleteError extends QueueBoxError {
  override readonly name = 'ReclaimIncompleteError';
  constructor(
    readonly counts: ReclaimCounts,
    cause: unknown,
    readonly failed: readonly ('outbox' | 'inbox')[] = [],
  ) {
    super(`reclaim failed: ${redactedError(cause).message}${committedBefore(counts, failed)}`, { cause });
  }
}

/** "; the outbox's reclaim committed N back to pending and D dead before it stopped": what a table that failed had done, when it had. */
function committedBefore(counts: ReclaimCounts, failed: readonly ('outbox' | 'inbox')[]): string {
  const done = failed
    .map((table) => ({ table, back: counts[table], dead: counts[table === 'outbox' ? 'outboxDead' : 'inboxDead'] }))
    .filter((t) => t.back + t.dead > 0)
    .map((t) => `the ${t.table}'s reclaim committed ${t.back} back to pending and ${t.dead} dead before it stopped`);
  return done.length === 0 ? '' : `; ${done.join(', and ')} (the rest are still processing: run it again)`;
}

/**
 * Reclaims both tables (concurrently) and returns how many rows each gave back. When one fails,
 * the other still runs to its end and `ReclaimIncompleteError` carries its counts. A table's
 * reclaim cut short after some of its chunks committed (`ReclaimResult.cutBy`: cancelled at the
 * deadline, or a later chunk failed) fails it as well, with the counts of those chunks: the rows
 * they returned are counted, and the run says it did not finish.
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
  // Why a table's reclaim did not finish: its error, or the error that cut it short.
  const stopped = (r: PromiseSettledResult<ReclaimResult>): { reason: unknown } | undefined =>
    r.status === 'rejected' ? { reason: r.reason } : r.value.cutBy !== undefined ? { reason: r.value.cutBy } : undefined;
  const failed = (['outbox', 'inbox'] as const).flatMap((table) => {
    const why = stopped(table === 'outbox' ? outbox : inbox);
    return why === undefined ? [] : [{ table, reason: why.reason }];
  });
  if (failed.length > 0) throw new ReclaimIncompleteError(counts, failed[0]!.reason, failed.map((f) => f.table));
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
