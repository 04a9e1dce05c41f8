/**
 * Delivery headers as SQS message attributes, checked against the SQS rules before sending.
 *
 * A row that breaks a rule can never be delivered as it is, so the caller dead-letters it at once
 * (`deadNow`) with the error returned here, instead of spending its attempts on a certain failure.
 */
import type { MessageAttributeValue } from '@aws-sdk/client-sqs';
import { deliveryHeaders, STANDARD_HEADERS, traceHeaders } from './delivery-metadata.ts';
import type { OutboundMessage } from './destination.ts';

/** SQS accepts at most 10 message attributes per message. */
export const SQS_MAX_MESSAGE_ATTRIBUTES = 10;
/** Longest SQS message attribute name, in characters. */
export const SQS_MAX_ATTRIBUTE_NAME_LENGTH = 256;

const NAME_CHARS = /^[A-Za-z0-9_.-]+$/;
const RESERVED_PREFIX = /^(aws|amazon)\./i;
/** Characters SQS refuses in bodies and attribute values (outside #x9 #xA #xD #x20-#xD7FF #xE000-#xFFFD #x10000-#x10FFFF). */
const INVALID_TEXT = /[^\t\n\r\x20-\uD7FF\uE000-\uFFFD\u{10000}-\u{10FFFF}]/u;

/** Result of mapping one row: the attributes and their size, or why the row cannot be sent. */
export type SqsAttributesResult =
  | { ok: true; attributes: Record<string, MessageAttributeValue>; bytes: number }
  | { ok: false; error: string };

/** Why `name` is not a valid SQS message attribute name, or null when it is. */
export function invalidAttributeNameReason(name: string): string | null {
  if (name.length === 0) return 'is empty';
  if (name.length > SQS_MAX_ATTRIBUTE_NAME_LENGTH) return `is ${name.length} characters long; SQS allows ${SQS_MAX_ATTRIBUTE_NAME_LENGTH}`;
  if (!NAME_CHARS.test(name)) return 'may only contain letters, digits, _, - and .';
  if (RESERVED_PREFIX.test(name)) return 'starts with a prefix reserved by AWS (AWS. or Amazon.)';
  if (name.startsWith('.') || name.endsWith('.')) return 'may not start or end with a period';
  if (name.includes('..')) return 'may not contain two periods in a row';
  return null;
}

/** True when SQS accepts `text` as a message body or string attribute value. */
export function isValidSqsText(text: string): boolean {
  return !INVALID_TEXT.test(text);
}

/**
 * Maps a row to SQS message attributes (all `String`). `bytes` is their size as SQS counts it:
 * name, data type and value of each attribute, in UTF-8 bytes. With `withTrace` (default) the
 * W3C trace headers (`traceHeaders`) follow, as many as the 10 attributes leave room for: trace
 * context never makes a message undeliverable.
 */
export function sqsMessageAttributes(message: OutboundMessage, withTrace = true): SqsAttributesResult {
  const headers = deliveryHeaders(message);
  if (headers.length > SQS_MAX_MESSAGE_ATTRIBUTES) {
    const standard = headers.filter(([name]) => (STANDARD_HEADERS as readonly string[]).includes(name)).length;
    return {
      ok: false,
      error:
        `message needs ${headers.length} message attributes (${standard} QueueBox headers + ${headers.length - standard} row headers); ` +
        `SQS allows at most ${SQS_MAX_MESSAGE_ATTRIBUTES}: remove row headers`,
    };
  }
  // No prototype: a row header named `__proto__` is an attribute like any other, not the object's prototype.
  const attributes = Object.create(null) as Record<string, MessageAttributeValue>;
  let bytes = 0;
  for (const [name, value] of headers) {
    const reason = invalidAttributeNameReason(name);
    if (reason !== null) return { ok: false, error: `header name "${name.slice(0, 300)}" is not a valid SQS message attribute name: it ${reason}` };
    if (!isValidSqsText(value)) return { ok: false, error: `header "${name}" contains characters that SQS does not accept in attribute values` };
    attributes[name] = { DataType: 'String', StringValue: value };
    bytes += Buffer.byteLength(name) + Buffer.byteLength('String') + Buffer.byteLength(value);
  }
  if (withTrace) {
    // validated ASCII (`trace-context.ts`): always a valid attribute
    for (const [name, value] of traceHeaders(message).slice(0, SQS_MAX_MESSAGE_ATTRIBUTES - headers.length)) {
      attributes[name] = { DataType: 'String', StringValue: value };
      bytes += Buffer.byteLength(name) + Buffer.byteLength('String') + Buffer.byteLength(value);
    }
  }
  return { ok: true, attributes, bytes };
}
