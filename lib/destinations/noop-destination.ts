/**
 * An in-process destination that accepts everything: every entry is answered `sent` without any
 * network call. For the benchmark (it measures QueueBox and the database, not AWS) and for tests
 * that need a destination but not a delivery.
 */
import type { Destination, EntryOutcome, OutboundMessage } from './destination.ts';

/** Accepts every message; `sentCount` counts the entries it answered. */
export class NoopDestination implements Destination {
  readonly maxBatchSize = 10;
  /** Entries answered `sent` since construction. */
  sentCount = 0;

  constructor(
    readonly name: string,
    readonly type: 'sqs' | 'eventbridge' = 'sqs',
  ) {}

  async publishBatch(messages: OutboundMessage[], signal?: AbortSignal): Promise<EntryOutcome[]> {
    if (signal?.aborted) return messages.map((m) => ({ id: m.id, status: 'retryable', error: 'aborted' }));
    this.sentCount += messages.length;
    return messages.map((m) => ({ id: m.id, status: 'sent' }));
  }
}
