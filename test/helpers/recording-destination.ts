/**
 * An in-memory `Destination` for poller tests: records every entry it accepts, answers per entry
 * as the test says, can take its time (honouring the abort signal) and tracks how many calls and
 * which rows are in flight at once.
 */
import type { Destination, EntryOutcome, OutboundMessage } from '../../lib/destinations/destination.ts';

/** How the destination answers one entry: `sent`, or a failure. */
export type EntryAnswer = 'sent' | { status: 'retryable' | 'permanent'; error: string; deadNow?: boolean };

export interface RecordingDestinationOptions {
  name?: string;
  type?: 'sqs' | 'eventbridge';
  maxBatchSize?: number;
  /** Duration of each call in ms (default 0); the call ends early, answering `retryable`, when aborted. */
  delayMs?: number | ((messages: OutboundMessage[]) => number);
  /** Per-entry answer (default `sent`). */
  answer?: (message: OutboundMessage) => EntryAnswer;
  /** Every call waits for this before answering (not abortable: a frozen, then thawed, worker). */
  waitFor?: () => Promise<void>;
  /** Throws for the whole call when this returns an error. */
  failCall?: (messages: OutboundMessage[]) => Error | undefined;
}

/** One accepted entry. */
export interface Delivery {
  id: string;
  topic: string;
  key: string | null;
  attempt: number;
  payload: Record<string, unknown>;
  headers: Record<string, string>;
}

export class RecordingDestination implements Destination {
  readonly name: string;
  readonly type: 'sqs' | 'eventbridge';
  readonly maxBatchSize: number;
  /** Entries answered `sent`, in the order they were accepted. */
  readonly deliveries: Delivery[] = [];
  /** Every entry offered, whatever the answer. */
  readonly offered: OutboundMessage[] = [];
  calls = 0;
  abortedCalls = 0;
  maxConcurrentCalls = 0;
  /** Ids offered while the same id, or a row of the same key, was already in a call. */
  readonly overlaps: string[] = [];
  #active = 0;
  readonly #inFlightIds = new Set<string>();
  readonly #inFlightKeys = new Set<string>();
  readonly #options: RecordingDestinationOptions;

  constructor(options: RecordingDestinationOptions = {}) {
    this.#options = options;
    this.name = options.name ?? 'main';
    this.type = options.type ?? 'sqs';
    this.maxBatchSize = options.maxBatchSize ?? 10;
  }

  /** Times each id was accepted. */
  deliveryCounts(): Map<string, number> {
    const counts = new Map<string, number>();
    for (const d of this.deliveries) counts.set(d.id, (counts.get(d.id) ?? 0) + 1);
    return counts;
  }

  async publishBatch(messages: OutboundMessage[], signal?: AbortSignal): Promise<EntryOutcome[]> {
    this.calls++;
    this.#active++;
    this.maxConcurrentCalls = Math.max(this.maxConcurrentCalls, this.#active);
    for (const m of messages) {
      if (this.#inFlightIds.has(m.id) || (m.key !== null && this.#inFlightKeys.has(m.key))) this.overlaps.push(m.id);
      this.#inFlightIds.add(m.id);
      if (m.key !== null) this.#inFlightKeys.add(m.key);
      this.offered.push(m);
    }
    try {
      const delay = typeof this.#options.delayMs === 'function' ? this.#options.delayMs(messages) : (this.#options.delayMs ?? 0);
      const aborted = await pause(delay, signal);
      if (aborted) {
        this.abortedCalls++;
        return messages.map((m) => ({ id: m.id, status: 'retryable', error: 'aborted' }));
      }
      if (this.#options.waitFor) await this.#options.waitFor();
      const callError = this.#options.failCall?.(messages);
      if (callError) throw callError;
      return messages.map((m) => {
        const answer = this.#options.answer?.(m) ?? 'sent';
        if (answer === 'sent') {
          this.deliveries.push({ id: m.id, topic: m.topic, key: m.key, attempt: m.attempt, payload: m.payload, headers: m.headers });
          return { id: m.id, status: 'sent' };
        }
        return { id: m.id, ...answer };
      });
    } finally {
      this.#active--;
      for (const m of messages) {
        this.#inFlightIds.delete(m.id);
        if (m.key !== null) this.#inFlightKeys.delete(m.key);
      }
    }
  }
}

/** Waits `ms`; true when `signal` aborted first (also used by the fault suite's destination). */
export function pause(ms: number, signal?: AbortSignal): Promise<boolean> {
  if (signal?.aborted) return Promise.resolve(true);
  if (ms <= 0) return Promise.resolve(false);
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve(false);
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      resolve(true);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
