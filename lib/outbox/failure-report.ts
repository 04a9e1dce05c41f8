/**
 * What operators see of failed deliveries: one log line and one per-destination metric update
 * for each settle write that retried or dead-lettered rows, not one per row.
 *
 * The rows a batch's retry and dead writes changed are grouped by destination and error class;
 * each group is one line, `outbox delivery failed` (level `ERROR` when a row of it went dead,
 * `WARN` when all were retried), naming the destination, its queue URL or event bus, the error
 * class, how many rows were retried and how many went dead, at most `FAILURE_LOG_SAMPLE` distinct
 * topics, keys and row ids (with the number of distinct keys), and the stored error of one row.
 * `queuebox_outbox_failed_messages_total{destination,status}` counts the same rows; its
 * `destination` values are the configured destination names and `(no route)`.
 */
import { redactSecrets } from '../claims/redact.ts';
import type { OutboxRow } from '../db/driver.ts';
import type { Destination } from '../destinations/destination.ts';
import { FAILURE_LOG_SAMPLE, NO_ROUTE, shownKeys } from '../observability/failure-log.ts';
import type { PassContext } from './pass-context.ts';

export { NO_ROUTE };

/** The message of the failure log line (what a Logs Insights query filters on). */
export const FAILURE_LOG_MESSAGE = 'outbox delivery failed';

/** Where and why one row failed, noted when its outcome is planned. */
export interface FailureNote {
  row: OutboxRow;
  /** The destination's name; `(no route)` when no route matched the topic. */
  destinationName: string;
  /** The configured destination, when there is one. */
  destination?: Destination;
  errorClass: string;
  /** The row's `last_error` as written (redacted). */
  error: string;
}

/** `destination orders (SQS queue orders.fifo)`: how `last_error` names a destination. */
export function destinationLabel(destination: Destination): string {
  return destination.target === undefined ? `destination ${destination.name}` : `destination ${destination.name} (${destination.target.label})`;
}

interface Group {
  note: FailureNote;
  retried: number;
  dead: number;
  topics: Set<string>;
  keys: Set<string>;
  ids: string[];
}

/** Logs and counts the rows the retry and dead writes of one batch changed (ids), from their notes. */
export function reportFailures(ctx: Pick<PassContext, 'logger' | 'metrics'>, notes: ReadonlyMap<string, FailureNote>, retried: readonly string[], dead: readonly string[]): void {
  if (retried.length === 0 && dead.length === 0) return;
  const groups = new Map<string, Group>();
  const collect = (ids: readonly string[], status: 'retried' | 'dead') => {
    for (const id of ids) {
      const note = notes.get(id);
      if (note === undefined) continue;
      const groupKey = `${note.destinationName}\u0000${note.errorClass}`;
      let group = groups.get(groupKey);
      if (group === undefined) groups.set(groupKey, (group = { note, retried: 0, dead: 0, topics: new Set(), keys: new Set(), ids: [] }));
      group[status]++;
      if (group.topics.size < FAILURE_LOG_SAMPLE) group.topics.add(note.row.topic);
      if (note.row.key !== null) group.keys.add(note.row.key);
      if (group.ids.length < FAILURE_LOG_SAMPLE) group.ids.push(id);
    }
  };
  collect(retried, 'retried');
  collect(dead, 'dead');
  for (const group of groups.values()) {
    const { note } = group;
    ctx.metrics.count('outboxFailedMessages', group.retried, { destination: note.destinationName, status: 'retried' });
    ctx.metrics.count('outboxFailedMessages', group.dead, { destination: note.destinationName, status: 'dead' });
    const target = note.destination?.target?.fields;
    const fields = {
      destination: note.destinationName,
      ...(note.destination !== undefined ? { destinationType: note.destination.type } : {}),
      ...(target !== undefined ? Object.fromEntries(Object.entries(target).map(([name, value]) => [name, redactSecrets(value)])) : {}),
      errorClass: note.errorClass,
      retried: group.retried,
      dead: group.dead,
      topics: [...group.topics].sort(),
      keys: shownKeys(group.keys),
      keyCount: group.keys.size,
      ids: group.ids,
      error: note.error,
    };
    if (group.dead > 0) ctx.logger.error(FAILURE_LOG_MESSAGE, fields);
    else ctx.logger.warn(FAILURE_LOG_MESSAGE, fields);
  }
}
