/**
 * Delivery to one SQS queue (standard or FIFO) with `SendMessageBatch`.
 *
 * Invariants:
 * - a call carries at most 10 entries and at most 1 MiB (body + attributes as SQS counts them);
 *   larger batches are split into several calls, sent one after another;
 * - the body is the payload's JSON text as stored (`payloadText`, every digit kept); the delivery headers travel as message attributes;
 * - the row's trace context travels as the `AWSTraceHeader` system attribute and the `traceparent`
 *   (and `tracestate`) message attributes, these while the 10 attributes leave room;
 * - FIFO: `MessageGroupId` = key (the row id when there is no key), `MessageDeduplicationId` =
 *   row id, or `${id}:r${replayCount}` for a replayed row so SQS does not absorb the replay;
 * - a row that can never be accepted (too large, too many or invalid attributes, invalid group id
 *   or characters) is `permanent` + `deadNow` and is not sent; the rest of the batch still is;
 * - per entry: success → `sent`, `SenderFault=false` → `retryable`, `SenderFault=true` → `permanent`;
 *   a message over the queue's own `MaximumMessageSize` (`InvalidParameterValue`, "Message must
 *   be shorter than N bytes": a queue set below 1 MiB, such as the 262,144 of queues created before
 *   SQS raised its default) → `permanent` + `deadNow`, since no retry of the same message can fit;
 *   a whole-call error applies to every entry of that call (see `classifyCallError`);
 * - a call is aborted after `callTimeoutMs` (the SDK client has no request timeout of its own):
 *   its entries are `retryable`.
 */
import { SendMessageBatchCommand, type SendMessageBatchRequestEntry, type SQSClient } from '@aws-sdk/client-sqs';
import { classifyCallError, timedCall } from './classify-call-error.ts';
import { DEFAULT_CALL_TIMEOUT_MS } from '../config/schema.ts';
import { messageKeyOf } from './delivery-metadata.ts';
import type { CallProgress, Destination, DestinationTarget, EntryOutcome, OutboundMessage } from './destination.ts';
import { publishInCalls } from './pack-batches.ts';
import { isValidSqsText, sqsMessageAttributes } from './sqs-message-attributes.ts';
import { awsTraceHeaderOf } from '../observability/trace-context.ts';

/** SQS limit for one message and for one batch request, in bytes (1 MiB). */
export const SQS_MAX_BYTES = 1_048_576;
/** SQS limit of entries per `SendMessageBatch`. */
export const SQS_MAX_BATCH_ENTRIES = 10;
/** Longest FIFO `MessageGroupId`, in characters. */
export const SQS_MAX_GROUP_ID_LENGTH = 128;

/** The per-entry failure of a message larger than the queue's `MaximumMessageSize`. */
const QUEUE_SIZE_REFUSAL = /\bMessage must be shorter than \d+ bytes\b/;

const GROUP_ID_CHARS = /^[A-Za-z0-9!"#$%&'()*+,\-./:;<=>?@[\\\]^_`{|}~]+$/;

export interface SqsDestinationOptions {
  /** Config name of the destination. */
  name: string;
  /** Full queue URL; a URL ending in `.fifo` is a FIFO queue. */
  queueUrl: string;
  /** The longest one call may take before it is aborted, its entries retryable (`destinations.<name>.callTimeoutMs`, default 10 s). */
  callTimeoutMs?: number;
  /** Client built once per container and reused for every call. */
  client: SQSClient;
}

interface PreparedEntry {
  index: number;
  entry: SendMessageBatchRequestEntry;
  bytes: number;
}

/** The FIFO deduplication id of a delivery: the row id, fresh (`:r<n>`) after each replay. */
export function fifoDeduplicationId(message: OutboundMessage): string {
  return message.replayCount > 0 ? `${message.id}:r${message.replayCount}` : message.id;
}

/** The queue name of a queue URL: its last path segment (`orders.fifo`), or the URL when it has none. */
export function sqsQueueName(queueUrl: string): string {
  const name = queueUrl.replace(/\/+$/, '').split('/').pop();
  return name === undefined || name === '' ? queueUrl : name;
}

/** The two noncharacters SQS refuses in a body (it takes #xE000 to #xFFFD), which JSON may hold raw in a string. */
const NONCHARACTERS = /[\uFFFE\uFFFF]/g;

/**
 * The message body of a payload's JSON text: the text as stored, with U+FFFE and U+FFFF, which
 * SQS refuses, written as JSON escapes (`\uffff`): the same JSON value, which SQS takes. In JSON
 * text they can only stand inside a string, where an escape means the same character. Other
 * characters SQS refuses cannot be in stored JSON text (control characters are escaped in a JSON
 * string, and PostgreSQL stores no lone surrogate).
 */
export function sqsBody(payloadText: string): string {
  return payloadText.includes('\uFFFE') || payloadText.includes('\uFFFF') ? payloadText.replace(NONCHARACTERS, (c) => `\\u${c.charCodeAt(0).toString(16)}`) : payloadText;
}

/** An SQS queue as a `Destination`. */
export class SqsDestination implements Destination {
  readonly type = 'sqs' as const;
  readonly maxBatchSize = SQS_MAX_BATCH_ENTRIES;
  readonly name: string;
  readonly queueUrl: string;
  /** True for a FIFO queue (URL ends in `.fifo`). */
  readonly fifo: boolean;
  /** `SQS queue <name>` (the URL's last path segment) and the full URL. */
  readonly target: DestinationTarget;
  /** See `callTimeoutMs` of the options. */
  readonly callTimeoutMs: number;
  readonly #client: SQSClient;

  constructor(options: SqsDestinationOptions) {
    this.name = options.name;
    this.queueUrl = options.queueUrl;
    this.fifo = options.queueUrl.endsWith('.fifo');
    this.target = { label: `SQS queue ${sqsQueueName(options.queueUrl)}`, fields: { queueUrl: options.queueUrl } };
    this.callTimeoutMs = options.callTimeoutMs ?? DEFAULT_CALL_TIMEOUT_MS;
    this.#client = options.client;
  }

  async publishBatch(messages: OutboundMessage[], signal?: AbortSignal, progress?: CallProgress): Promise<EntryOutcome[]> {
    return publishInCalls(
      messages,
      { maxEntries: SQS_MAX_BATCH_ENTRIES, maxBytes: SQS_MAX_BYTES },
      (message, index) => this.#prepare(message, index),
      (call) => this.#send(call, messages, signal),
      { signal, progress },
    );
  }

  #prepare(message: OutboundMessage, index: number): PreparedEntry | { error: string; errorClass: string } {
    let attributes = sqsMessageAttributes(message);
    if (!attributes.ok) return { error: attributes.error, errorClass: 'InvalidMessageAttributes' };
    const body = sqsBody(message.payloadText);
    if (!isValidSqsText(body)) return { error: 'payload contains characters that SQS does not accept in a message body', errorClass: 'InvalidMessageContents' };
    let bytes = Buffer.byteLength(body) + attributes.bytes;
    // The trace attributes give way when only they push the message past the limit.
    if (bytes > SQS_MAX_BYTES && (attributes = sqsMessageAttributes(message, false)).ok) bytes = Buffer.byteLength(body) + attributes.bytes;
    if (!attributes.ok) return { error: attributes.error, errorClass: 'InvalidMessageAttributes' };
    if (bytes > SQS_MAX_BYTES) return { error: `message is ${bytes} bytes (body and attributes); SQS allows ${SQS_MAX_BYTES}`, errorClass: 'MessageTooLarge' };
    const entry: SendMessageBatchRequestEntry = {
      Id: String(index),
      MessageBody: body,
      MessageAttributes: attributes.attributes,
    };
    // A system attribute: not counted in the message size.
    const traceHeader = awsTraceHeaderOf(message.trace);
    if (traceHeader !== undefined) entry.MessageSystemAttributes = { AWSTraceHeader: { DataType: 'String', StringValue: traceHeader } };
    if (this.fifo) {
      const groupId = messageKeyOf(message) ?? message.id;
      if (groupId.length > SQS_MAX_GROUP_ID_LENGTH || !GROUP_ID_CHARS.test(groupId)) {
        return {
          error: `key "${groupId.slice(0, 300)}" cannot be a FIFO MessageGroupId: SQS allows at most ${SQS_MAX_GROUP_ID_LENGTH} characters, letters, digits and ASCII punctuation`,
          errorClass: 'InvalidMessageGroupId',
        };
      }
      entry.MessageGroupId = groupId;
      entry.MessageDeduplicationId = fifoDeduplicationId(message);
    }
    return { index, entry, bytes };
  }

  async #send(call: PreparedEntry[], messages: OutboundMessage[], signal?: AbortSignal): Promise<EntryOutcome[]> {
    const idOf = (entry: PreparedEntry) => messages[entry.index]!.id;
    if (signal?.aborted) return call.map((entry) => ({ id: idOf(entry), status: 'retryable', error: 'aborted', errorClass: 'Aborted' }));
    const timed = timedCall(signal, this.callTimeoutMs, this.name);
    try {
      const output = await this.#client.send(
        new SendMessageBatchCommand({ QueueUrl: this.queueUrl, Entries: call.map((c) => c.entry) }),
        { abortSignal: timed.signal },
      );
      const sent = new Set((output.Successful ?? []).map((s) => s.Id));
      const failed = new Map((output.Failed ?? []).map((f) => [f.Id, f]));
      return call.map((entry): EntryOutcome => {
        const id = idOf(entry);
        if (sent.has(entry.entry.Id)) return { id, status: 'sent' };
        const failure = failed.get(entry.entry.Id);
        if (!failure) return { id, status: 'retryable', error: 'SQS SendMessageBatch returned no result for this entry', errorClass: 'NoResult' };
        const code = failure.Code ?? 'UnknownError';
        const error = `SQS SendMessageBatch entry failed: ${code}${failure.SenderFault ? ' (sender fault)' : ''}: ${failure.Message ?? ''}`;
        if (failure.SenderFault && code === 'InvalidParameterValue' && QUEUE_SIZE_REFUSAL.test(failure.Message ?? '')) {
          return { id, status: 'permanent', error, errorClass: code, deadNow: true };
        }
        return { id, status: failure.SenderFault ? 'permanent' : 'retryable', error, errorClass: code };
      });
    } catch (error) {
      const failure = classifyCallError('SQS SendMessageBatch', error, timed.signal);
      return call.map((entry) => ({ id: idOf(entry), ...failure }));
    } finally {
      timed.dispose();
    }
  }
}
