/**
 * The relay's failure log line, the inbox side of `outbox delivery failed`: one line per write
 * that retried or dead-lettered inbox rows, not one per row.
 *
 * The rows of a write are grouped by source and error class; each group is one line,
 * `inbox forward failed` (level `ERROR` for dead rows, `WARN` for retried ones), naming the
 * source, the error class, how many rows were retried and how many went dead, at most
 * `FAILURE_LOG_SAMPLE` distinct event types, topics, keys (aggregate ids) and row ids (with the
 * number of distinct keys), and the stored error of one row.
 * `queuebox_inbox_failed_messages_total{source,status}` counts the same rows; its `source` values
 * are the configured source names and `(unknown source)` for a row whose source is not (or no
 * longer) in `inbox.sources` (the log line names the row's own source). The relay itself counts
 * them in `queuebox_inbox_messages_total{status}` too.
 */
import type { InboxRow } from '../db/driver.ts';
import { FAILURE_LOG_SAMPLE, shownKeys, UNKNOWN_SOURCE } from '../observability/failure-log.ts';
import type { QueueBoxMetrics } from '../observability/metrics.ts';

export { UNKNOWN_SOURCE };

/** The message of the relay's failure log line. */
export const RELAY_FAILURE_LOG_MESSAGE = 'inbox forward failed';

/** One inbox row a write retried or dead-lettered. */
export interface RelayFailure {
  row: InboxRow;
  /** The outbox topic the row renders to, when it renders. */
  topic?: string;
  errorClass: string;
  /** The row's `last_error` as written (redacted). */
  error: string;
}

/** The logging the relay's failure line needs; a Powertools `Logger` satisfies it. */
export interface RelayFailureLogger {
  warn(message: string, ...extra: Array<Record<string, unknown>>): void;
  error(message: string, ...extra: Array<Record<string, unknown>>): void;
}

/** What the report writes to: the relay's logger and metrics, and the configured sources (`inbox.sources`). */
export interface RelayFailureContext {
  logger: RelayFailureLogger;
  metrics: Pick<QueueBoxMetrics, 'count'>;
  sources: Readonly<Record<string, unknown>>;
}

/** The metric's `source` of a row's source: its name when `sources` configures it, else `(unknown source)`. */
export function sourceDimension(source: string, sources: Readonly<Record<string, unknown>>): string {
  return Object.hasOwn(sources, source) ? source : UNKNOWN_SOURCE;
}

interface Group {
  first: RelayFailure;
  rows: number;
  eventTypes: Set<string>;
  topics: Set<string>;
  keys: Set<string>;
  ids: string[];
}

const add = (set: Set<string>, value: string | null | undefined) => {
  if (value !== null && value !== undefined && set.size < FAILURE_LOG_SAMPLE) set.add(value);
};

/** Logs and counts the rows one write `retried` or marked `dead`. */
export function reportRelayFailures(ctx: RelayFailureContext, status: 'retried' | 'dead', failures: readonly RelayFailure[]): void {
  const { logger, metrics, sources } = ctx;
  const groups = new Map<string, Group>();
  for (const failure of failures) {
    const groupKey = `${failure.row.source}\u0000${failure.errorClass}`;
    let group = groups.get(groupKey);
    if (group === undefined) groups.set(groupKey, (group = { first: failure, rows: 0, eventTypes: new Set(), topics: new Set(), keys: new Set(), ids: [] }));
    group.rows++;
    add(group.eventTypes, failure.row.eventType);
    add(group.topics, failure.topic);
    if (failure.row.aggregateId !== null) group.keys.add(failure.row.aggregateId);
    if (group.ids.length < FAILURE_LOG_SAMPLE) group.ids.push(failure.row.id);
  }
  for (const group of groups.values()) {
    metrics.count('inboxFailedMessages', group.rows, { source: sourceDimension(group.first.row.source, sources), status });
    const fields = {
      source: group.first.row.source,
      errorClass: group.first.errorClass,
      retried: status === 'retried' ? group.rows : 0,
      dead: status === 'dead' ? group.rows : 0,
      eventTypes: [...group.eventTypes].sort(),
      topics: [...group.topics].sort(),
      keys: shownKeys(group.keys),
      keyCount: group.keys.size,
      ids: group.ids,
      error: group.first.error,
    };
    if (status === 'dead') logger.error(RELAY_FAILURE_LOG_MESSAGE, fields);
    else logger.warn(RELAY_FAILURE_LOG_MESSAGE, fields);
  }
}
