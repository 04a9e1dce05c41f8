/**
 * A destination `main` that answers every message through a `RecordingDestination`, except the
 * calls holding a message `hangs` picks: those never return, not even when aborted (a destination
 * whose connection stalls), and their messages are kept in `hung`.
 */
import type { Destination, EntryOutcome, OutboundMessage } from '../../lib/destinations/destination.ts';
import { RecordingDestination } from './recording-destination.ts';
import { createGate } from './wait.ts';

export class HangingDestination implements Destination {
  readonly name = 'main';
  readonly type = 'sqs' as const;
  readonly hung: OutboundMessage[] = [];
  readonly recording = new RecordingDestination();
  readonly #never = createGate();

  constructor(
    private readonly hangs: (message: OutboundMessage) => boolean,
    readonly maxBatchSize = 10,
  ) {}

  async publishBatch(messages: OutboundMessage[], signal?: AbortSignal): Promise<EntryOutcome[]> {
    if (messages.some(this.hangs)) {
      this.hung.push(...messages);
      await this.#never.wait();
    }
    return this.recording.publishBatch(messages, signal);
  }
}
