/**
 * The values of the caller-transaction outbox INSERT, in placeholder order `$1…$9`, shared by
 * every dialect's statement text: id (null: the database picks one), topic, key, payload text,
 * headers text, max attempts, schedule as ISO 8601 text (UTC) or null, delay in ms, trace context
 * as JSON text or null.
 */
import type { OutboxMessageInput } from './driver.ts';
import { serializeTraceContext } from '../observability/trace-context.ts';

/** The nine values; `id` defaults to the message's own id (or null). */
export function outboxInsertValues(m: OutboxMessageInput, defaults: { maxAttempts: number }, id: string | null = m.id ?? null): unknown[] {
  return [
    id,
    m.topic,
    m.key ?? null,
    m.payloadText ?? JSON.stringify(m.payload),
    JSON.stringify(m.headers ?? {}),
    m.maxAttempts ?? defaults.maxAttempts,
    m.scheduledAt?.toISOString() ?? null,
    m.delayMs ?? 0,
    serializeTraceContext(m.trace),
  ];
}
