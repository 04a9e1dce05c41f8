/**
 * The EventBridge `Detail` of a delivery. EventBridge has no message headers, so the delivery
 * identity travels inside the event, in a stable envelope (documented in docs/destinations.md):
 *
 * ```json
 * { "metadata": { "messageId", "topic", "key", "attempt", "correlationId", "headers" }, "data": payload }
 * ```
 *
 * `metadata.messageId` is the row id (`X-Message-Id`): consumers deduplicate on it, since
 * EventBridge itself does not. `key` and `correlationId` are `null` when absent (an empty key is
 * absent); `headers` are the row headers as stored; `traceparent` and `tracestate` are present
 * only when the row has a trace context. Rules can match on `detail.metadata.*` and `detail.data.*`.
 *
 * `data` is the payload's JSON text as stored, spliced in verbatim: numbers keep every digit
 * (no parse, no re-stringify of the payload).
 */
import { correlationIdOf, messageKeyOf, traceHeaders } from './delivery-metadata.ts';
import type { OutboundMessage } from './destination.ts';

/** Version of the envelope shape; bumped only on an incompatible change. */
export const EVENT_ENVELOPE_VERSION = 1;

/** The `Detail` object of every QueueBox event. */
export interface EventEnvelope {
  metadata: {
    /** Envelope shape version (`1`). */
    version: number;
    /** Row id; the deduplication key for consumers. */
    messageId: string;
    topic: string;
    key: string | null;
    /** 0-based attempt of this delivery. */
    attempt: number;
    correlationId: string | null;
    headers: Record<string, string>;
    /** W3C trace context of the row (`traceHeaders`); absent when the row has none. */
    traceparent?: string;
    tracestate?: string;
  };
  data: Record<string, unknown>;
}

/** The `metadata` member of the envelope of one delivery. */
function envelopeMetadata(message: OutboundMessage): EventEnvelope['metadata'] {
  return {
    version: EVENT_ENVELOPE_VERSION,
    messageId: message.id,
    topic: message.topic,
    key: messageKeyOf(message),
    attempt: message.attempt,
    correlationId: correlationIdOf(message.headers),
    headers: message.headers,
    ...Object.fromEntries(traceHeaders(message)),
  };
}

/** The envelope of one delivery as JSON text (the `Detail`): metadata serialized, `data` the payload text verbatim. */
export function eventEnvelopeJson(message: OutboundMessage): string {
  return `{"metadata":${JSON.stringify(envelopeMetadata(message))},"data":${message.payloadText}}`;
}
