/**
 * The event of a scheduled function that is also invoked by hand (reclaim, retention): its
 * schedule's event, or what an operator sends. The schedule (an EventBridge rule, what
 * `schedule: rate(…)` deploys) sends `{"version": "0", "id": …, "detail-type": "Scheduled Event",
 * "source": "aws.events", "account": …, "time": …, "region": …, "resources": […], "detail": {}}`;
 * `osls invoke` without `--data` sends nothing. Every other key is the operator's, and each
 * function refuses the ones it does not take by name, before the database is reached: a typo
 * (`{"dryRun": true}`, `{"force": "true"}`) is never read as a request the function does not make.
 */
import { UsageError } from '../errors.ts';

/** The keys of an EventBridge event's envelope: all a scheduled event holds. */
const SCHEDULE_KEYS = new Set(['version', 'id', 'detail-type', 'source', 'account', 'time', 'region', 'resources', 'detail']);

/** An event taken apart: whether it is the schedule's, and the keys an operator added. */
export interface ScheduledFunctionEvent {
  /** True for the schedule's event (`"source": "aws.events"`). */
  scheduled: boolean;
  /** The event's keys besides the schedule's envelope (`{}` for the schedule's own event, `{}` or none). */
  options: Record<string, unknown>;
}

/**
 * Takes `event` apart for function `fn` (`usage`: what it takes, for the refusals). Nothing,
 * `null` and `""` are `{}`. An object whose `source` is `aws.events` is the schedule's event: its
 * envelope keys are left out, and its `detail` must be `{}` as a scheduled event's is (an
 * operator's option put there would be ignored). A `source` other than `aws.events` and anything
 * but an object are refused.
 */
export function scheduledFunctionEvent(fn: string, event: unknown, usage: string): ScheduledFunctionEvent {
  if (event === undefined || event === null || event === '') return { scheduled: false, options: {} };
  if (typeof event !== 'object' || Array.isArray(event)) throw new UsageError(`${fn}: ${usage}; got ${JSON.stringify(event).slice(0, 100)}`);
  const e = event as Record<string, unknown>;
  if (!Object.hasOwn(e, 'source')) return { scheduled: false, options: { ...e } };
  if (e.source !== 'aws.events') throw new UsageError(`${fn}: "source" must be "aws.events" (the schedule's event), not ${JSON.stringify(e.source).slice(0, 100)}: ${usage}`);
  const detail = e.detail;
  if (detail !== undefined && (typeof detail !== 'object' || detail === null || Array.isArray(detail) || Object.keys(detail).length > 0)) {
    throw new UsageError(`${fn}: the schedule's event has "detail": {}, not ${JSON.stringify(detail).slice(0, 100)}: ${usage}`);
  }
  return { scheduled: true, options: Object.fromEntries(Object.entries(e).filter(([key]) => !SCHEDULE_KEYS.has(key))) };
}

/** `unknown key "a"` or `unknown keys "a", "b"`, for a refusal. */
export function unknownKeys(keys: readonly string[]): string {
  return `unknown key${keys.length > 1 ? 's' : ''} ${keys.map((k) => JSON.stringify(k)).join(', ')}`;
}
