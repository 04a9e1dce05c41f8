/**
 * Delivery to one EventBridge bus with `PutEvents`.
 *
 * Invariants:
 * - a call carries at most 10 entries whose sizes add up to less than `maxRequestBytes` (default
 *   256 KB, at most 262,143 bytes: AWS's user guide says the total entry size "must be less than
 *   256KB"; entry size as AWS documents it: Source + DetailType + Detail in UTF-8); larger batches
 *   are split into several calls, sent one after another;
 * - `Source` and `EventBusName` come from config, `DetailType` is the topic, `Detail` is the
 *   envelope of `event-envelope.ts` (the row id is `detail.metadata.messageId`);
 * - the row's trace context travels as the entry's `TraceHeader` (X-Ray) and as
 *   `detail.metadata.traceparent` / `tracestate` (W3C);
 * - an entry that can never be accepted (`maxRequestBytes` or more, an empty topic — `DetailType`
 *   is required — or a topic over 128 characters — Unicode
 *   code points, as AWS's API model measures string lengths — or a `Detail` with an integer
 *   outside the signed 64-bit range or nested deeper than 1,000 levels, `eventbridge-json-limits.ts`)
 *   is `permanent` + `deadNow` and is not sent; the rest of the batch still is;
 * - per entry: `EventId` → `sent`; `InternalFailure` / `ThrottlingException` → `retryable`;
 *   `MalformedDetail` / `InvalidArgument` / `ValidationException` (the entry itself is wrong) →
 *   `permanent` + `deadNow`; any other code (access, authorization, KMS) → `permanent`, which
 *   spends the row's attempts because an operator can fix it;
 * - a whole-call error applies to every entry of that call (see `classifyCallError`);
 * - a call is aborted after `callTimeoutMs` (the SDK client has no request timeout of its own):
 *   its entries are `retryable`.
 */
import { PutEventsCommand, type EventBridgeClient, type PutEventsRequestEntry } from '@aws-sdk/client-eventbridge';
import { classifyCallError, timedCall } from './classify-call-error.ts';
import { DEFAULT_CALL_TIMEOUT_MS, DEFAULT_EVENTBRIDGE_REQUEST_BYTES } from '../config/schema.ts';
import type { CallProgress, Destination, DestinationTarget, EntryOutcome, OutboundMessage } from './destination.ts';
import { publishInCalls } from './pack-batches.ts';
import { eventEnvelopeJson } from './event-envelope.ts';
import { eventBridgeDetailLimitError } from './eventbridge-json-limits.ts';
import { awsTraceHeaderOf } from '../observability/trace-context.ts';

/**
 * EventBridge limit of one `PutEvents` request (and so of one entry), in bytes, by default (256 KB,
 * `destinations.<name>.maxRequestBytes`): the entries' total size must be less than this, so
 * 262,143 bytes at most.
 */
export const EVENTBRIDGE_MAX_BYTES = DEFAULT_EVENTBRIDGE_REQUEST_BYTES;
/** EventBridge limit of entries per `PutEvents`. */
export const EVENTBRIDGE_MAX_BATCH_ENTRIES = 10;
/** Longest `DetailType`, in characters (Unicode code points: an emoji is one). */
export const EVENTBRIDGE_MAX_DETAIL_TYPE_LENGTH = 128;

/** Per-entry error codes that are retried while attempts remain. */
export const EVENTBRIDGE_RETRYABLE_CODES: ReadonlySet<string> = new Set(['InternalFailure', 'ThrottlingException']);
/** Per-entry error codes that mean the entry itself can never be accepted: dead at once. */
export const EVENTBRIDGE_DEAD_NOW_CODES: ReadonlySet<string> = new Set(['MalformedDetail', 'InvalidArgument', 'ValidationException']);

export interface EventBridgeDestinationOptions {
  /** Config name of the destination. */
  name: string;
  /** Bus name or ARN. */
  eventBusName: string;
  /** `Source` of every entry. */
  source: string;
  /** The longest one call may take before it is aborted, its entries retryable (`destinations.<name>.callTimeoutMs`, default 10 s). */
  callTimeoutMs?: number;
  /** A call's entries add up to less than this many bytes (`destinations.<name>.maxRequestBytes`, default 256 KB). */
  maxRequestBytes?: number;
  /** Client built once per container and reused for every call. */
  client: EventBridgeClient;
}

interface PreparedEntry {
  index: number;
  entry: PutEventsRequestEntry;
  bytes: number;
}

/** `TraceHeader` of an entry: the row's X-Ray trace header (or the one of its `traceparent`), when it has one. */
function traceHeaderOf(message: OutboundMessage): Pick<PutEventsRequestEntry, 'TraceHeader'> {
  const header = awsTraceHeaderOf(message.trace);
  return header === undefined ? {} : { TraceHeader: header };
}

/** An EventBridge bus as a `Destination`. */
export class EventBridgeDestination implements Destination {
  readonly type = 'eventbridge' as const;
  readonly maxBatchSize = EVENTBRIDGE_MAX_BATCH_ENTRIES;
  readonly name: string;
  readonly eventBusName: string;
  readonly source: string;
  /** `EventBridge bus <name or ARN>`, as configured. */
  readonly target: DestinationTarget;
  /** See `callTimeoutMs` of the options. */
  readonly callTimeoutMs: number;
  /** See `maxRequestBytes` of the options. */
  readonly maxRequestBytes: number;
  readonly #client: EventBridgeClient;

  constructor(options: EventBridgeDestinationOptions) {
    this.name = options.name;
    this.eventBusName = options.eventBusName;
    this.source = options.source;
    this.target = { label: `EventBridge bus ${options.eventBusName}`, fields: { eventBusName: options.eventBusName } };
    this.callTimeoutMs = options.callTimeoutMs ?? DEFAULT_CALL_TIMEOUT_MS;
    this.maxRequestBytes = options.maxRequestBytes ?? EVENTBRIDGE_MAX_BYTES;
    this.#client = options.client;
  }

  async publishBatch(messages: OutboundMessage[], signal?: AbortSignal, progress?: CallProgress): Promise<EntryOutcome[]> {
    return publishInCalls(
      messages,
      { maxEntries: EVENTBRIDGE_MAX_BATCH_ENTRIES, maxBytes: this.maxRequestBytes - 1 },
      (message, index) => this.#prepare(message, index),
      (call) => this.#send(call, messages, signal),
      { signal, progress },
    );
  }

  #prepare(message: OutboundMessage, index: number): PreparedEntry | { error: string; errorClass: string } {
    // A code point is at most two UTF-16 units: count them only when the units could exceed the limit.
    // Plain SQL can write an empty topic (enqueue refuses one); PutEvents requires a DetailType.
    if (message.topic.length === 0) return { error: 'topic is empty; EventBridge requires a DetailType', errorClass: 'DetailTypeEmpty' };
    const characters = message.topic.length > EVENTBRIDGE_MAX_DETAIL_TYPE_LENGTH ? [...message.topic].length : message.topic.length;
    if (characters > EVENTBRIDGE_MAX_DETAIL_TYPE_LENGTH) {
      return { error: `topic is ${characters} characters; EventBridge allows a DetailType of at most ${EVENTBRIDGE_MAX_DETAIL_TYPE_LENGTH}`, errorClass: 'DetailTypeTooLong' };
    }
    const detail = eventEnvelopeJson(message);
    const bytes = Buffer.byteLength(this.source) + Buffer.byteLength(message.topic) + Buffer.byteLength(detail);
    if (bytes >= this.maxRequestBytes) {
      return {
        error: `event entry is ${bytes} bytes (source, detail type and detail); EventBridge allows less than ${this.maxRequestBytes} (destinations.${this.name}.maxRequestBytes)`,
        errorClass: 'EntryTooLarge',
      };
    }
    const limit = eventBridgeDetailLimitError(detail);
    if (limit !== undefined) return limit;
    return {
      index,
      bytes,
      entry: { Source: this.source, DetailType: message.topic, Detail: detail, EventBusName: this.eventBusName, ...traceHeaderOf(message) },
    };
  }

  async #send(call: PreparedEntry[], messages: OutboundMessage[], signal?: AbortSignal): Promise<EntryOutcome[]> {
    const idOf = (entry: PreparedEntry) => messages[entry.index]!.id;
    if (signal?.aborted) return call.map((entry) => ({ id: idOf(entry), status: 'retryable', error: 'aborted', errorClass: 'Aborted' }));
    const timed = timedCall(signal, this.callTimeoutMs, this.name);
    try {
      const output = await this.#client.send(new PutEventsCommand({ Entries: call.map((c) => c.entry) }), { abortSignal: timed.signal });
      // PutEvents answers entries in request order.
      return call.map((entry, i): EntryOutcome => {
        const id = idOf(entry);
        const result = output.Entries?.[i];
        if (result?.EventId && !result.ErrorCode) return { id, status: 'sent' };
        if (!result?.ErrorCode) return { id, status: 'retryable', error: 'EventBridge PutEvents returned no result for this entry', errorClass: 'NoResult' };
        const error = `EventBridge PutEvents entry failed: ${result.ErrorCode}: ${result.ErrorMessage ?? ''}`;
        const errorClass = result.ErrorCode;
        if (EVENTBRIDGE_RETRYABLE_CODES.has(result.ErrorCode)) return { id, status: 'retryable', error, errorClass };
        return { id, status: 'permanent', error, errorClass, ...(EVENTBRIDGE_DEAD_NOW_CODES.has(result.ErrorCode) ? { deadNow: true } : {}) };
      });
    } catch (error) {
      const failure = classifyCallError('EventBridge PutEvents', error, timed.signal);
      return call.map((entry) => ({ id: idOf(entry), ...failure }));
    } finally {
      timed.dispose();
    }
  }
}
