/**
 * The fields a receiver stores besides the payload: idempotency key, event type, aggregate id,
 * correlation id and the optional delay, each from its header/attribute or from the source's
 * JSONPath, each checked against the column it goes to.
 */
import type { SourceConfig } from '../config/schema.ts';
import { columnLength, lengthUnit, type ColumnDialect } from '../db/column-length.ts';
import { InboxRejectionError } from './inbox-rejection.ts';
import { jsonPathText } from './json-path-value.ts';

/**
 * Column limits (migration 1): 255 for keys and ids, 128 for correlation — in the unit each
 * dialect counts (`columnLength`).
 */
export const MAX_KEY_LENGTH = 255;
export const MAX_CORRELATION_LENGTH = 128;
/** A number as JSON writes it (RFC 8259): what a delay's text must be. */
const JSON_NUMBER_TEXT = /^-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?$/;

/** Longest initial delay a message may ask for: 30 days, in milliseconds. */
export const MAX_DELAY_MS = 30 * 24 * 60 * 60 * 1000;

/** What a receiver extracted from one message. */
export interface MessageFields {
  idempotencyKey: string;
  eventType: string | null;
  aggregateId: string | null;
  correlationId: string | null;
  /** Milliseconds before the row becomes due (0 = now). */
  delayMs: number;
}

/** Values given outside the body: the HTTP headers or SQS message attributes. */
export interface ExternalValues {
  idempotencyKey?: string | undefined;
  correlationId?: string | undefined;
  /** Used when neither the external key nor the JSONPath yields one (SQS `MessageId`, a signed body's digest). */
  fallbackIdempotencyKey?: string | undefined;
  /** Event type from outside the body, used when the source has no `eventTypePath` (GitHub's event header). */
  eventType?: string | undefined;
}

const UNSTORABLE = /\u0000|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

function checkLength(value: string | undefined, max: number, what: string, dialect: ColumnDialect): string | null {
  if (value === undefined) return null;
  const length = columnLength(value, dialect);
  if (length > max) throw new InboxRejectionError('invalid_field', `${what} must be at most ${max} ${lengthUnit(dialect)} (got ${length})`);
  if (UNSTORABLE.test(value)) throw new InboxRejectionError('invalid_field', `${what} contains a NUL character or a lone UTF-16 surrogate, which the database cannot store`);
  return value;
}

/**
 * Extracts and checks the fields of `body` for `source`, lengths as `dialect`'s columns count them;
 * throws `InboxRejectionError`.
 */
export function extractMessageFields(sourceName: string, source: SourceConfig, body: unknown, external: ExternalValues, dialect: ColumnDialect = 'postgres'): MessageFields {
  const at = (key: keyof SourceConfig) => `inbox.sources.${sourceName}.${key}`;
  const idempotencyKey =
    nonEmpty(external.idempotencyKey) ??
    (source.idempotencyKeyPath !== undefined ? jsonPathText(body, source.idempotencyKeyPath, at('idempotencyKeyPath')) : undefined) ??
    nonEmpty(external.fallbackIdempotencyKey);
  if (idempotencyKey === undefined) {
    const where = source.idempotencyKeyPath !== undefined ? ` or a value at ${source.idempotencyKeyPath}` : '';
    throw new InboxRejectionError('missing_idempotency_key', `missing idempotency key: send the X-Idempotency-Key header${where}`);
  }
  const eventType = source.eventTypePath !== undefined ? jsonPathText(body, source.eventTypePath, at('eventTypePath')) : nonEmpty(external.eventType);
  const aggregateId = source.aggregateIdPath !== undefined ? jsonPathText(body, source.aggregateIdPath, at('aggregateIdPath')) : undefined;
  const correlationId =
    nonEmpty(external.correlationId) ?? (source.correlationIdPath !== undefined ? jsonPathText(body, source.correlationIdPath, at('correlationIdPath')) : undefined);
  let delayMs = 0;
  if (source.delayPath !== undefined) {
    const text = jsonPathText(body, source.delayPath, at('delayPath'));
    if (text !== undefined) {
      // A JSON number, or a string that holds one as JSON writes it: `Number` alone would also
      // read "0x10" as 16, "1_0" never, and " " as 0.
      delayMs = JSON_NUMBER_TEXT.test(text) ? Number(text) : Number.NaN;
      if (!Number.isFinite(delayMs) || delayMs < 0 || delayMs > MAX_DELAY_MS) {
        throw new InboxRejectionError('invalid_field', `delay at ${source.delayPath} must be a number of milliseconds from 0 to ${MAX_DELAY_MS} (got ${JSON.stringify(text)})`);
      }
    }
  }
  return {
    idempotencyKey: checkLength(idempotencyKey, MAX_KEY_LENGTH, 'idempotency key', dialect)!,
    eventType: checkLength(eventType, MAX_KEY_LENGTH, 'event type', dialect),
    aggregateId: checkLength(aggregateId, MAX_KEY_LENGTH, 'aggregate id', dialect),
    correlationId: checkLength(correlationId, MAX_CORRELATION_LENGTH, 'correlation id', dialect),
    delayMs,
  };
}

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value === '' ? undefined : value;
}
