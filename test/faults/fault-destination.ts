/**
 * The destination of the fault suite: records every entry it accepts (the "queue") and injects
 * destination faults drawn from a seeded generator:
 *
 * - throttling: the whole call fails (`ThrottlingException`), nothing is accepted;
 * - timeout: the call fails after a wait, nothing is accepted (a timeout *after* acceptance would
 *   be a duplicate that no claim accounts for; the suite keeps the two apart on purpose);
 * - slow call: the call takes longer than the lease (renewals must keep the claim), aborting
 *   with the pass's signal;
 * - partial batch: some entries of an accepted call answer `retryable`;
 * - per-entry retryable and permanent (retried) failures;
 * - poison messages (`payload.poison`): permanent, `deadNow`, every time.
 *
 * A frozen invocation is frozen before an entry is accepted; a killed one never accepts again.
 */
import type { Destination, EntryOutcome, OutboundMessage } from '../../lib/destinations/destination.ts';
import type { InvocationFaults } from './invocation-faults.ts';
import type { Prng } from './prng.ts';
import { pause } from '../helpers/recording-destination.ts';

/** One accepted entry, in acceptance order (`n`). */
export interface FaultDelivery {
  n: number;
  id: string;
  key: string | null;
  attempt: number;
  at: number;
}

/** Fault rates (per call unless named per entry). */
export interface DestinationFaultRates {
  throttle: number;
  timeout: number;
  slow: number;
  partial: number;
  entryRetryable: number;
  entryPermanent: number;
}

export const DEFAULT_DESTINATION_RATES: DestinationFaultRates = { throttle: 0.03, timeout: 0.02, slow: 0.01, partial: 0.04, entryRetryable: 0.01, entryPermanent: 0.003 };

export class FaultDestination {
  readonly deliveries: FaultDelivery[] = [];
  readonly injected = { throttle: 0, timeout: 0, slow: 0, partial: 0, entryRetryable: 0, entryPermanent: 0, poison: 0 };

  constructor(
    private readonly prng: Prng,
    private readonly rates: DestinationFaultRates,
    /** Duration of a slow call (longer than the lease). */
    private readonly slowMs: number,
  ) {}

  /** The destination as one invocation sees it: every call passes the invocation's gates. */
  forInvocation(faults: InvocationFaults, name = 'faults'): Destination {
    return {
      name,
      type: 'sqs',
      maxBatchSize: 10,
      publishBatch: (messages, signal) => faults.run(() => this.#publish(messages, faults, signal)),
    };
  }

  async #publish(messages: OutboundMessage[], faults: InvocationFaults, signal?: AbortSignal): Promise<EntryOutcome[]> {
    const p = this.prng;
    if (p.chance(this.rates.throttle)) {
      this.injected.throttle++;
      await pause(5);
      throw Object.assign(new Error('Rate exceeded (injected)'), { name: 'ThrottlingException' });
    }
    if (p.chance(this.rates.timeout)) {
      this.injected.timeout++;
      await pause(150);
      throw Object.assign(new Error('socket timeout (injected)'), { name: 'TimeoutError' });
    }
    if (p.chance(this.rates.slow)) {
      this.injected.slow++;
      if (await pause(this.slowMs, signal)) return messages.map((m) => ({ id: m.id, status: 'retryable', error: 'aborted' }));
    }
    const partial = p.chance(this.rates.partial);
    if (partial) this.injected.partial++;
    const plan = messages.map((m): EntryOutcome => {
      if ((m.payload as { poison?: boolean }).poison === true) {
        this.injected.poison++;
        return { id: m.id, status: 'permanent', error: 'InvalidMessageContents (injected poison)', deadNow: true };
      }
      if ((partial && p.chance(0.5)) || p.chance(this.rates.entryRetryable)) {
        this.injected.entryRetryable++;
        return { id: m.id, status: 'retryable', error: 'InternalError (injected)' };
      }
      if (p.chance(this.rates.entryPermanent)) {
        this.injected.entryPermanent++;
        return { id: m.id, status: 'permanent', error: 'AccessDenied (injected, retried)' };
      }
      return { id: m.id, status: 'sent' };
    });
    // A freeze may land right before acceptance; a killed invocation accepts nothing more.
    await faults.gate();
    for (let i = 0; i < messages.length; i++) {
      if (plan[i]!.status !== 'sent') continue;
      const m = messages[i]!;
      this.deliveries.push({ n: this.deliveries.length, id: m.id, key: m.key, attempt: m.attempt, at: Date.now() });
    }
    return plan;
  }
}
