/**
 * The destination seam: how the outbox poller hands a batch to SQS or EventBridge.
 *
 * A destination receives at most `maxBatchSize` (10) envelopes per call and answers per entry.
 * It never throws for a per-entry failure; a whole-call failure (network, 5xx, throttling of the
 * call) is reported as the same outcome for every entry of the call. Classification decides
 * what the poller does with the row: `sent`, `retryable` (retry with backoff while attempts
 * remain) or `permanent` (dead now when no retry can succeed, see `deadNow`).
 */

import type { TraceContext } from '../observability/trace-context.ts';

/** What the poller delivers: a claimed row, flattened. */
export interface OutboundMessage {
  /** Row id; travels as `X-Message-Id`. */
  id: string;
  topic: string;
  /** The row key; null when the row has none (an empty key, which plain SQL may write, is none). */
  key: string | null;
  /** The payload parsed (on first read); numbers beyond double precision are rounded here. */
  payload: Record<string, unknown>;
  /** The payload as stored, JSON text with every digit; what SQS and EventBridge deliver. */
  payloadText: string;
  /** Row headers (application headers, plus relay headers such as `x-inbox-id`). */
  headers: Record<string, string>;
  /** 0-based attempt number of this delivery; travels as `X-Attempt`. */
  attempt: number;
  /** Times the row was replayed; a replayed row gets a fresh FIFO deduplication id. */
  replayCount: number;
  /** Trace context stored with the row (`trace-context.ts`); published as the destination's trace header and `traceparent`. */
  trace?: TraceContext | null;
}

export type EntryOutcome =
  | { id: string; status: 'sent' }
  | {
      id: string;
      status: 'retryable' | 'permanent';
      /** Redaction happens in the poller; this is the raw reason (code + message). */
      error: string;
      /** True when no retry can ever succeed (too large, too many attributes, invalid): dead at once. */
      deadNow?: boolean;
      /**
       * The failure's class as the service names it (`QueueDoesNotExist`, `ThrottlingException`,
       * an entry's error code) or as QueueBox does for a message it refused to send
       * (`MessageTooLarge`); log lines and metrics group failures by it.
       */
      errorClass?: string;
    };

/** Where a destination delivers, as `last_error` and log lines name it. */
export interface DestinationTarget {
  /** Short, for `last_error`: `SQS queue orders.fifo`, `EventBridge bus orders-bus`. */
  label: string;
  /** The full address, for log lines: `{ queueUrl }` or `{ eventBusName }`. */
  fields: { queueUrl: string } | { eventBusName: string };
}

export interface Destination {
  /** Config name (used as the `destination` metric dimension). */
  readonly name: string;
  /** `sqs` or `eventbridge` (the `destination_type` metric dimension). */
  readonly type: 'sqs' | 'eventbridge';
  /** Entries per call (10 for both SQS and EventBridge). */
  readonly maxBatchSize: number;
  /** The queue or bus it delivers to; failures name it (a destination without one is named alone). */
  readonly target?: DestinationTarget;
  /**
   * Publishes up to `maxBatchSize` messages in one call; returns exactly one outcome per input
   * message (same ids). `signal` aborts the call (lost claim, deadline). A destination that splits
   * the batch into several service calls (a size limit) tells `progress` of each as it goes.
   */
  publishBatch(messages: OutboundMessage[], signal?: AbortSignal, progress?: CallProgress): Promise<EntryOutcome[]>;
}

/**
 * What a destination that splits a batch into several service calls tells as it goes: the
 * messages each call is about to offer, and each call's outcomes as soon as it answers. A pass
 * that stops waiting with a later call still open settles the messages whose calls answered and
 * releases the ones never offered, instead of leaving the whole batch to its lease. Indexes are
 * positions in the batch given to `publishBatch`. A destination that sends one call need not call it.
 */
export interface CallProgress {
  /**
   * The messages at `indexes` are to be sent in one call next; answers the ones to offer (the
   * others lost their claim meanwhile: they are not sent, and their outcome no longer matters).
   */
  offering(indexes: readonly number[]): readonly number[];
  /** Final outcomes, known before the batch ends: `outcomes[i]` is the message at `indexes[i]`. */
  answered(indexes: readonly number[], outcomes: readonly EntryOutcome[]): void;
}
