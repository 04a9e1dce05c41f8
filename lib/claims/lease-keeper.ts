/**
 * Keeps the leases of in-flight claims alive: every third of the lease it renews all of them in
 * one fenced statement. A claim the renewal did not return — or every claim, when the renewal
 * fails — is lost: its signal fires (or its `watch` callback runs) so the work on that row stops
 * (seed: renewal).
 */
import type { ClaimRef } from '../db/driver.ts';
import { renewalIntervalMs } from './lease.ts';

export interface LeaseKeeperOptions {
  /** The lease granted at claim time (sets the cadence: a third of it). */
  leaseMs: number;
  /** Lease to request at each renewal (recomputed: min(claimTimeout, time left)); 0 = stop renewing. */
  nextLeaseMs: () => number;
  /** Fenced renewal of many claims; returns the ids renewed. */
  renew: (claims: ClaimRef[], leaseMs: number) => Promise<string[]>;
  /** Called once per claim that is lost (zero rows or a failed renewal). */
  onLost: (claim: ClaimRef, reason: LostReason, error?: unknown) => void;
}

/** Why a claim was lost: its renewal changed no row (`fenced`) or failed (`renew-failed`). */
export type LostReason = 'fenced' | 'renew-failed';

interface Tracked {
  claim: ClaimRef;
  lost: (reason: LostReason) => void;
}

export class LeaseKeeper {
  readonly #options: LeaseKeeperOptions;
  readonly #tracked = new Map<string, Tracked>();
  #timer: NodeJS.Timeout | undefined;
  #renewing: Promise<void> | undefined;

  constructor(options: LeaseKeeperOptions) {
    this.#options = options;
  }

  /** Starts tracking a claim; returns the signal that fires when the claim is lost. */
  track(claim: ClaimRef): AbortSignal {
    const controller = new AbortController();
    this.watch(claim, (reason) => controller.abort(new Error(reason === 'fenced' ? 'claim lost: renewal changed no row' : 'claim lost: renewal failed')));
    return controller.signal;
  }

  /**
   * Starts tracking a claim; `lost` is called once if the claim is lost. The batch form of
   * `track`: the outbox pass watches every row of a batch without an `AbortController` per row.
   */
  watch(claim: ClaimRef, lost: (reason: LostReason) => void): void {
    this.#tracked.set(claim.id, { claim, lost });
    if (this.#timer === undefined) {
      this.#timer = setInterval(() => void this.renewNow(), renewalIntervalMs(this.#options.leaseMs));
      this.#timer.unref();
    }
  }

  /** Stops tracking a claim (its work finished, successfully or not). */
  release(id: string): void {
    this.#tracked.delete(id);
    if (this.#tracked.size === 0) this.#clear();
  }

  /** Number of claims tracked. */
  get size(): number {
    return this.#tracked.size;
  }

  /** Renews every tracked claim now (also used by tests). */
  async renewNow(): Promise<void> {
    if (this.#renewing) return this.#renewing;
    this.#renewing = this.#renew().finally(() => {
      this.#renewing = undefined;
    });
    return this.#renewing;
  }

  async #renew(): Promise<void> {
    const tracked = [...this.#tracked.values()];
    if (tracked.length === 0) return;
    const leaseMs = this.#options.nextLeaseMs();
    if (leaseMs <= 0) return; // the invocation is ending; let the leases run out with it
    let renewed: Set<string>;
    try {
      renewed = new Set(await this.#options.renew(tracked.map((t) => t.claim), leaseMs));
    } catch (error) {
      for (const t of tracked) this.#lose(t, 'renew-failed', error);
      return;
    }
    for (const t of tracked) if (!renewed.has(t.claim.id)) this.#lose(t, 'fenced');
  }

  #lose(t: Tracked, reason: LostReason, error?: unknown): void {
    if (!this.#tracked.has(t.claim.id)) return;
    this.#tracked.delete(t.claim.id);
    this.#options.onLost(t.claim, reason, error);
    t.lost(reason);
    if (this.#tracked.size === 0) this.#clear();
  }

  /** Stops the timer; tracked claims are left to expire. */
  stop(): void {
    this.#tracked.clear();
    this.#clear();
  }

  #clear(): void {
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
  }
}
