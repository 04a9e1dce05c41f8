/**
 * The identity every delivery carries, whatever the destination: the row id as `X-Message-Id`,
 * `X-Topic`, `X-Attempt` (0-based), `X-Message-Key` when the row has a key, `X-Correlation-Id`
 * when the row headers carry one, then the row headers.
 *
 * SQS carries these as message attributes (`sqs-message-attributes.ts`); EventBridge, which has
 * no headers, carries them in the `metadata` object of the event envelope (`event-envelope.ts`).
 */
import type { OutboundMessage } from './destination.ts';
import { traceparentOf } from '../observability/trace-context.ts';

/** Standard header names, in the order they are emitted. */
export const STANDARD_HEADERS = ['X-Message-Id', 'X-Topic', 'X-Attempt', 'X-Message-Key', 'X-Correlation-Id'] as const;

const STANDARD_LOWER = new Set(STANDARD_HEADERS.map((name) => name.toLowerCase()));

/**
 * The key of a row as every destination reads it: null when the row has none. An empty key
 * (`''`, which plain SQL may write) is no key, as for the claim: no `X-Message-Key`, `"key": null`
 * in the EventBridge envelope, the row id as a FIFO queue's `MessageGroupId`.
 */
export function messageKeyOf(message: Pick<OutboundMessage, 'key'>): string | null {
  return message.key ? message.key : null;
}

/** The correlation id of a row: its `x-correlation-id` header, looked up case-insensitively; null when absent or empty. */
export function correlationIdOf(headers: Readonly<Record<string, unknown>>): string | null {
  for (const [name, value] of Object.entries(headers)) {
    if (name.toLowerCase() === 'x-correlation-id') {
      const text = headerText(value);
      if (text !== '') return text;
    }
  }
  return null;
}

/**
 * The flat header list of one delivery, standard names first, then the row headers in their own
 * order. A row header whose name equals a standard name (ignoring case) is left out: the standard
 * value is authoritative (`X-Message-Id` is always the row id). Headers with an empty value are
 * left out (SQS rejects empty attribute values, and an empty header carries nothing). Non-string
 * values written by plain SQL are carried as their JSON text.
 */
export function deliveryHeaders(message: OutboundMessage): Array<[name: string, value: string]> {
  const out: Array<[string, string]> = [['X-Message-Id', message.id]];
  // An empty topic (plain SQL may write one) is left out like an empty header: SQS refuses empty
  // attribute values.
  if (message.topic !== '') out.push(['X-Topic', message.topic]);
  out.push(['X-Attempt', String(message.attempt)]);
  const key = messageKeyOf(message);
  if (key !== null) out.push(['X-Message-Key', key]);
  const correlationId = correlationIdOf(message.headers);
  if (correlationId !== null) out.push(['X-Correlation-Id', correlationId]);
  for (const [name, value] of Object.entries(message.headers)) {
    if (STANDARD_LOWER.has(name.toLowerCase())) continue;
    const text = headerText(value);
    if (text !== '') out.push([name, text]);
  }
  return out;
}

/**
 * The W3C trace headers of a delivery (`traceparent`, then `tracestate` when the row has one),
 * from the row's trace context: its own `traceparent`, or the one of its X-Ray trace header. A
 * row header of the same name (any case) is the application's own and is kept instead.
 */
export function traceHeaders(message: OutboundMessage): Array<[name: 'traceparent' | 'tracestate', value: string]> {
  const traceparent = traceparentOf(message.trace);
  if (traceparent === undefined) return [];
  const own = new Set(Object.keys(message.headers).map((name) => name.toLowerCase()));
  const out: Array<['traceparent' | 'tracestate', string]> = [];
  if (!own.has('traceparent')) out.push(['traceparent', traceparent]);
  // a `tracestate` belongs to its `traceparent`: only with the row's own
  if (!own.has('tracestate') && !own.has('traceparent') && message.trace?.traceparent !== undefined && message.trace.tracestate !== undefined) {
    out.push(['tracestate', message.trace.tracestate]);
  }
  return out;
}

function headerText(value: unknown): string {
  if (typeof value === 'string') return value;
  if (value === null || value === undefined) return '';
  return typeof value === 'object' ? JSON.stringify(value) : String(value);
}
