/**
 * The SQS receiver (Lambda SQS trigger with `ReportBatchItemFailures`).
 *
 * Source: the sqs source whose `queueName` (default: its name) equals the queue name at the end
 * of the record's `eventSourceARN`. Key: the `x-idempotency-key` message attribute, else the
 * source's JSONPath, else the SQS `MessageId`. A record that cannot be accepted (a body larger than
 * `inbox.maxBodyBytes` as sent, or once its numbers are written out as stored; body not a JSON
 * object, nested too deep, too many keys, text or a number PostgreSQL cannot store, a field too
 * long, a topic or outbox key the relay could not write…) is stored `dead` with the reason in the
 * same statement — it is stored, so SQS does not redeliver it, and the rest of the batch is
 * unaffected; so is a body the database itself refuses as JSON (`PayloadRejectedError`). Such a
 * row is keyed `rejected:<MessageId>` (`deadKeyOf`), never by the `x-idempotency-key` attribute:
 * an SQS redelivery of the record is a duplicate of it, and a corrected message sent later under
 * the attribute's key is stored, not taken for a duplicate of the broken one. The prefix is
 * reserved: a record whose key (attribute, JSONPath or MessageId) starts with `rejected:` is
 * stored dead as well (`reserved_idempotency_key`), so no valid row meets a dead row's key. A valid
 * body is stored as lib/inbox/parse-json-body.ts describes (a leading byte order mark dropped, as
 * over HTTP). A record whose store fails otherwise is reported in
 * `batchItemFailures`; on a FIFO queue every later record of the batch is reported too, so SQS
 * keeps each message group's order. The record's trace context (`AWSTraceHeader`, a `traceparent`
 * message attribute) is stored with the row when valid and ignored otherwise.
 */
import type { SQSBatchResponse, SQSEvent, SQSRecord } from 'aws-lambda';
import { redactedError, redactError } from '../claims/redact.ts';
import type { QueueBoxConfig, SourceConfig } from '../config/schema.ts';
import type { Driver, InboxMessageInput } from '../db/driver.ts';
import type { Logger } from '../observability/logger.ts';
import type { QueueBoxMetrics } from '../observability/metrics.ts';
import { traceContextOf, type TraceContext } from '../observability/trace-context.ts';
import { columnLength, type ColumnDialect } from '../db/column-length.ts';
import { extractMessageFields, MAX_CORRELATION_LENGTH } from './extract-fields.ts';
import { jsonPathText } from './json-path-value.ts';
import { parseJsonBody, storableText } from './parse-json-body.ts';
import { InboxRejectionError, type RejectionReason } from './inbox-rejection.ts';
import { checkRelayable } from './relay-fit.ts';
import { PayloadRejectedError } from '../errors.ts';

export interface SqsReceiverOptions {
  config: QueueBoxConfig;
  driver: Driver;
  logger: Logger;
}

/** Handles one SQS batch; `metrics` is the invocation's buffer. */
export type SqsReceiver = (event: SQSEvent, metrics: QueueBoxMetrics) => Promise<SQSBatchResponse>;

/** The queue name of an SQS ARN (`arn:aws:sqs:region:account:name`). */
export function queueNameOf(arn: string): string {
  return arn.slice(arn.lastIndexOf(':') + 1);
}

function attribute(record: SQSRecord, name: string): string | undefined {
  for (const [key, value] of Object.entries(record.messageAttributes ?? {})) {
    if (key.toLowerCase() === name && value.stringValue !== undefined && value.stringValue !== '') return value.stringValue;
  }
  return undefined;
}

/** The sender's trace context: the `AWSTraceHeader` system attribute and a `traceparent` / `tracestate` message attribute; an invalid one is left out. */
function inboundTrace(record: SQSRecord): TraceContext | null {
  return traceContextOf({ traceparent: attribute(record, 'traceparent'), tracestate: attribute(record, 'tracestate'), awsTraceHeader: record.attributes?.AWSTraceHeader });
}

/** Builds the receiver once per container. */
export function createSqsReceiver(options: SqsReceiverOptions): SqsReceiver {
  const { config, driver, logger } = options;
  const byQueue = new Map<string, { name: string; config: SourceConfig }>();
  for (const [name, source] of Object.entries(config.inbox.sources)) {
    if (source.type === 'sqs') byQueue.set(source.queueName ?? name, { name, config: source });
  }

  return async (event, metrics) => {
    const failures: SQSBatchResponse['batchItemFailures'] = [];
    let failedFifo = false;
    for (const record of event.Records) {
      const fifo = record.eventSourceARN.endsWith('.fifo');
      if (failedFifo && fifo) {
        failures.push({ itemIdentifier: record.messageId });
        continue;
      }
      const source = byQueue.get(queueNameOf(record.eventSourceARN));
      if (source === undefined) {
        metrics.count('inboxRejections', 1, { reason: 'unknown_source' });
        metrics.count('inboxStoreFailures', 1, {});
        logger.error('no sqs inbox source for this queue; the record stays in the queue', { queue: queueNameOf(record.eventSourceARN), messageId: record.messageId });
        failures.push({ itemIdentifier: record.messageId });
        failedFifo ||= fifo;
        continue;
      }
      try {
        let { message, rejection } = toMessage(source.name, source.config, config.inbox, record, driver.dialect);
        let result;
        try {
          result = await driver.inboxInsert(message);
        } catch (error) {
          // The database refused the body's JSON although the checks passed it: stored dead like any invalid body.
          if (!(error instanceof PayloadRejectedError) || message.deadReason !== undefined) throw error;
          message = deadMessage(baseOf(source.name, source.config, record), record, `body is not valid JSON: ${error.message}`, driver.dialect);
          rejection = 'invalid_json';
          result = await driver.inboxInsert(message);
        }
        if (rejection !== undefined && !result.duplicate) {
          metrics.count('inboxRejections', 1, { reason: rejection });
          logger.warn('sqs message stored dead at receipt', { source: source.name, id: result.id, messageId: record.messageId, idempotencyKey: message.headers?.[KEY_ATTRIBUTE], reason: message.deadReason });
        }
        metrics.count('inboxMessages', 1, { status: result.duplicate ? 'duplicate' : rejection !== undefined ? 'dead' : 'new' });
      } catch (error) {
        metrics.count('inboxStoreFailures', 1, {});
        logger.error('inbox store failed; SQS will redeliver the record', { source: source.name, messageId: record.messageId, error: redactedError(error) });
        failures.push({ itemIdentifier: record.messageId });
        failedFifo ||= fifo;
      }
    }
    return { batchItemFailures: failures };
  };

}

/** The row to store for a record: a pending message, or a `dead` one with the rejection reason. */
function toMessage(name: string, source: SourceConfig, inbox: QueueBoxConfig['inbox'], record: SQSRecord, dialect: ColumnDialect): { message: InboxMessageInput; rejection?: RejectionReason } {
  const base = baseOf(name, source, record);
  try {
    // The HTTP receiver's cap (413 there), so a body is at most `inbox.maxBodyBytes` whichever way
    // it came, as sent and as stored (SQS itself takes up to 1 MiB, the default cap).
    const bytes = Buffer.byteLength(record.body);
    if (bytes > inbox.maxBodyBytes) throw new InboxRejectionError('body_too_large', `body of ${bytes} bytes exceeds the limit of ${inbox.maxBodyBytes} bytes (inbox.maxBodyBytes)`);
    const body = parseJsonBody(record.body, inbox.maxBodyBytes);
    const keyAttribute = attribute(record, KEY_ATTRIBUTE);
    const fields = extractMessageFields(name, source, body.value, {
      idempotencyKey: keyAttribute,
      correlationId: attribute(record, 'x-correlation-id'),
      fallbackIdempotencyKey: record.messageId,
    }, dialect);
    if (fields.idempotencyKey.startsWith(DEAD_KEY_PREFIX)) {
      throw new InboxRejectionError(
        'reserved_idempotency_key',
        `idempotency key ${JSON.stringify(fields.idempotencyKey)} (from ${keyOrigin(source, body.value, keyAttribute)}) starts with "${DEAD_KEY_PREFIX}", which is reserved for the keys of records stored dead at receipt`,
      );
    }
    checkRelayable(name, source, inbox, fields, dialect);
    return { message: { ...base, payload: body.value, payloadText: body.text, ...fields } };
  } catch (error) {
    if (!(error instanceof InboxRejectionError)) throw error;
    return { message: deadMessage(base, record, error.message, dialect), rejection: error.reason };
  }
}

/** What every row of a record has: source, consumption, no headers, the record's trace context. */
function baseOf(name: string, source: SourceConfig, record: SQSRecord): Pick<InboxMessageInput, 'source' | 'consumption' | 'headers' | 'trace'> {
  return { source: name, consumption: source.consumption, headers: {}, trace: inboundTrace(record) };
}

/** The message attribute a record's idempotency key comes from. */
const KEY_ATTRIBUTE = 'x-idempotency-key';

/** The prefix of the keys of records stored dead at receipt; no valid row of an SQS source has a key starting with it. */
const DEAD_KEY_PREFIX = 'rejected:';

/**
 * The key of a record stored dead at receipt: its SQS `MessageId`, which stays the same when SQS
 * redelivers it, so a redelivery is a duplicate. Not the `x-idempotency-key` attribute: a
 * corrected message sent later under that key would be taken for a duplicate of the broken one
 * and never stored. The prefix keeps these keys apart from the keys of valid rows, which may be
 * a MessageId: a valid row keyed (attribute or JSONPath) by the MessageId of the message it
 * corrects would otherwise meet the dead row's key, and so would the record's own valid row
 * (keyed by its MessageId) should a redelivery be judged otherwise than the first delivery
 * (the configuration changed in between). The prefix is reserved: a valid record whose key
 * starts with it is itself stored dead (`reserved_idempotency_key`), so a sender's key can
 * neither take a dead row's key before the broken record arrives nor be taken for a duplicate
 * of a dead row. Either way both rows are kept, none dropped.
 */
function deadKeyOf(messageId: string): string {
  return `${DEAD_KEY_PREFIX}${messageId}`;
}

/** Where a record's key came from: the attribute, the source's JSONPath, else the MessageId. */
function keyOrigin(source: SourceConfig, body: unknown, keyAttribute: string | undefined): string {
  if (keyAttribute !== undefined) return `the ${KEY_ATTRIBUTE} message attribute`;
  const path = source.idempotencyKeyPath;
  if (path !== undefined && jsonPathText(body, path, 'idempotencyKeyPath') !== undefined) return `idempotencyKeyPath ${path}`;
  return 'the SQS MessageId';
}

/**
 * A rejected record as a `dead` row: the raw body as a JSON string, keyed by `deadKeyOf`; the
 * `x-idempotency-key` attribute, when the record has one, is kept in `headers` for operators.
 * Body, reason and attribute are stored with NUL characters and lone surrogates replaced (the
 * reason may quote the body: JSON.parse's does). The reason is redacted and bounded as every
 * `last_error` is (`redactError`): it is shown and logged (`sqs message stored dead at receipt`)
 * where the body is not; the body is stored as it came.
 */
function deadMessage(base: Pick<InboxMessageInput, 'source' | 'consumption' | 'headers' | 'trace'>, record: SQSRecord, reason: string, dialect: ColumnDialect): InboxMessageInput {
  const key = attribute(record, KEY_ATTRIBUTE);
  const correlation = storable(attribute(record, 'x-correlation-id'), MAX_CORRELATION_LENGTH, dialect);
  const body = storableText(record.body);
  const why = storableText(redactError(reason)).text;
  return {
    ...base,
    headers: key === undefined ? {} : { [KEY_ATTRIBUTE]: storableText(key).text },
    idempotencyKey: deadKeyOf(record.messageId),
    correlationId: correlation ?? null,
    payload: body.text,
    deadReason: body.replaced ? `${why} (NUL characters and lone surrogates were replaced by U+FFFD to store the body)` : why,
  };
}

/** `value` when the database can store it within `max` characters (as `dialect` counts them), else undefined. */
function storable(value: string | undefined, max: number, dialect: ColumnDialect): string | undefined {
  if (value === undefined || columnLength(value, dialect) > max || storableText(value).replaced) return undefined;
  return value;
}
