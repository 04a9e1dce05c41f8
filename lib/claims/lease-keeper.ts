/**
 * Keeps the leases of in-flight claims alive: every third of the lease it renews all of them in
 * one fenced statement. A claim the renewal did not return is lost, and so is every claim of a
 * renewal that fails (of a renewal that answers per row, a `RenewAnswer`, only the claims whose
 * own statement failed): its signal fires (or its `watch` callback runs) so the work on that row
 * stops (seed: renewal).
 *
 * A claim is its id and token (`claimKey`): two claims of one row (an old claim not yet known to
 * be lost, and the row's new claim) are watched, renewed and released separately. A renewal
 * statement never carries one row id twice, so its answer (the ids it renewed) names one claim
 * per id; claims of a row watched twice go into a second statement of the same renewal.
 */
import type { ClaimRef } from '../db/driver.ts';
import { claimKey } from './claim-key.ts';
import { addToSlots, removeFromSlots, type Slotted } from '../runtime/slot-list.ts';
import { renewalIntervalMs } from './lease.ts';

export interface LeaseKeeperOptions {
  /** The lease granted at claim time (sets the cadence: a third of it). */
  leaseMs: number;
  /** Lease to request at each renewal (recomputed: min(claimTimeout, time left)); 0 = stop renewing. */
  nextLeaseMs: () => number;
  /**
   * Fenced renewal of many claims; returns the ids renewed. A rejection loses every claim given. A
   * renewal of one statement per row returns a `RenewAnswer` instead: a failed statement loses
   * its own row's claim only.
   */
  renew: (claims: ClaimRef[], leaseMs: number) => Promise<string[] | RenewAnswer>;
  /** Called once per claim that is lost (zero rows or a failed renewal). */
  onLost: (claim: ClaimRef, reason: LostReason, error?: unknown) => void;
}

/** A renewal's answer per row: the ids renewed, and the ids whose own statement failed, with its error. */
export interface RenewAnswer {
  renewed: string[];
  failed: ReadonlyMap<string, unknown>;
}

/** Why a claim was lost: its renewal changed no row (`fenced`) or failed (`renew-failed`). */
export type LostReason = 'fenced' | 'renew-failed';

/** What `watchMany` returns: give it back to `releaseMany`. */
// eslint-disable-next-line @typescript-eslint/no-empty-object-type -- an opaque handle
export interface WatchedClaims {}

/**
 * Claims watched together (one destination call's rows, or one claim): the items are the caller's
 * own objects, turned into `ClaimRef`s only when a renewal runs, so watching a batch allocates
 * nothing per row. `gone` marks the items already lost.
 */
interface Group<T> extends WatchedClaims, Slotted {
  items: readonly T[];
  ref: (item: T) => ClaimRef;
  lost: (item: T, reason: LostReason) => void;
  gone: Set<number> | undefined;
  /** Set for a single claim (`watch`/`track`): its `claimKey` in `#byClaim`. */
  claimKey?: string;
  /** When the database last confirmed these claims (wall clock, ms): the watch's start, then each renewal that kept them (the time it was sent). */
  confirmedAt: number;
}

export class LeaseKeeper {
  readonly #options: LeaseKeeperOptions;
  // Per claim for `track`/`watch` + `release(claim)`; per call for `watchMany` + `releaseMany`.
  readonly #byClaim = new Map<string, Group<ClaimRef>>();
  // A slot list, not a Set: a long-lived Set or Map whose entries point at young objects (each
  // batch's rows) made the pass spend most of its CPU in the garbage collector (measured: 3.9
  // against 1.1 µs of pass CPU per message).
  readonly #groups: Array<Group<unknown>> = [];
  #size = 0;
  #timer: NodeJS.Timeout | undefined;
  #renewing: Promise<void> | undefined;
  /** Set while `close({ reportLost: true })` waits for the renewal under way: no renewal starts. */
  #closing = false;

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
   * Starts tracking a claim; `lost` is called once if the claim is lost. `release(claim)` ends it.
   * Watching the same claim again replaces the earlier watch; another claim of the same row is a
   * different claim and is watched beside it.
   */
  watch(claim: ClaimRef, lost: (reason: LostReason) => void): void {
    const key = claimKey(claim);
    const previous = this.#byClaim.get(key);
    if (previous) this.#remove(erase(previous));
    const group: Group<ClaimRef> = { items: [claim], ref: (c) => c, lost: (_c, reason) => lost(reason), gone: undefined, slot: -1, claimKey: key, confirmedAt: Date.now() };
    this.#byClaim.set(key, group);
    this.#add(erase(group));
  }

  /** Stops tracking a claim (its work finished, successfully or not); another claim of the row is untouched. */
  release(claim: ClaimRef): void {
    const group = this.#byClaim.get(claimKey(claim));
    if (group) this.#remove(erase(group));
  }

  /**
   * Starts tracking the claims of `items` (e.g. the rows of one destination call): `ref` gives an
   * item's claim when a renewal runs, `lost` is called once per item whose claim is lost.
   * `releaseMany` with the returned handle ends the watch of all of them.
   */
  watchMany<T>(items: readonly T[], ref: (item: T) => ClaimRef, lost: (item: T, reason: LostReason) => void): WatchedClaims {
    const group: Group<T> = { items, ref, lost, gone: undefined, slot: -1, confirmedAt: Date.now() };
    this.#add(erase(group));
    return group;
  }

  /** Stops tracking the claims of a `watchMany` handle. */
  releaseMany(handle: WatchedClaims): void {
    this.#remove(handle as Group<unknown>);
  }

  /** Number of claims tracked. */
  get size(): number {
    return this.#size;
  }

  /**
   * Resolves when no renewal is under way. A caller that released claims and is about to write
   * them (a settle) awaits this first: a renewal sent before the release still carries those rows,
   * and two statements locking the same rows in different orders can deadlock. A renewal that has
   * not answered within a lease has lost its claims anyway: the wait ends then.
   */
  async idle(): Promise<void> {
    const renewing = this.#renewing;
    if (renewing === undefined) return;
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([renewing, new Promise<void>((resolve) => (timer = setTimeout(resolve, this.#options.leaseMs)))]);
    clearTimeout(timer);
  }

  /**
   * Resolves once the claims of `handle` are known to be held within the last half lease: at once
   * when the watch started or a renewal kept them since, else after a renewal (the one under way,
   * or one sent now), which reports a lost claim as usual. Renewals run every third of the lease,
   * so only a worker whose timers did not run — a container frozen and thawed, a blocked event
   * loop — waits here: it learns that its lease ended before it starts new work on those claims
   * (a key's next row), instead of at its next timed renewal. The wall clock, because a frozen
   * container's monotonic clock may not have moved.
   */
  async confirm(handle: WatchedClaims): Promise<void> {
    const group = handle as Group<unknown>;
    if (group.slot === -1 || Date.now() - group.confirmedAt <= this.#options.leaseMs / 2) return;
    await this.renewNow();
  }

  /** Renews every tracked claim now (also used by tests). */
  async renewNow(): Promise<void> {
    if (this.#renewing) return this.#renewing;
    if (this.#closing) return;
    this.#renewing = this.#renew().finally(() => {
      this.#renewing = undefined;
    });
    return this.#renewing;
  }

  async #renew(): Promise<void> {
    const tracked: Array<{ group: Group<unknown>; index: number; claim: ClaimRef }> = [];
    for (const group of this.#groups) {
      for (let index = 0; index < group.items.length; index++) {
        if (!group.gone?.has(index)) tracked.push({ group, index, claim: group.ref(group.items[index]) });
      }
    }
    if (tracked.length === 0) return;
    const leaseMs = this.#options.nextLeaseMs();
    if (leaseMs <= 0) return; // the invocation has ended; its leases end with it
    for (const layer of byDistinctId(tracked)) {
      const sentAt = Date.now();
      let renewed: Set<string>;
      let failed: ReadonlyMap<string, unknown> | undefined;
      try {
        const answer = await this.#options.renew(layer.map((t) => t.claim), leaseMs);
        if (Array.isArray(answer)) renewed = new Set(answer);
        else {
          renewed = new Set(answer.renewed);
          failed = answer.failed;
        }
      } catch (error) {
        for (const t of layer) this.#lose(t.group, t.index, t.claim, 'renew-failed', error);
        continue;
      }
      for (const t of layer) {
        if (failed?.has(t.claim.id) === true) this.#lose(t.group, t.index, t.claim, 'renew-failed', failed.get(t.claim.id));
        else if (!renewed.has(t.claim.id)) this.#lose(t.group, t.index, t.claim, 'fenced');
        else if (t.group.confirmedAt < sentAt) t.group.confirmedAt = sentAt;
      }
    }
  }

  #lose(group: Group<unknown>, index: number, claim: ClaimRef, reason: LostReason, error?: unknown): void {
    // Released (work finished) or already lost while the renewal ran: nothing to report.
    if (group.slot === -1 || group.gone?.has(index)) return;
    (group.gone ??= new Set()).add(index);
    this.#size--;
    if (group.gone.size === group.items.length) this.#remove(group);
    this.#options.onLost(claim, reason, error);
    group.lost(group.items[index], reason);
  }

  #add(group: Group<unknown>): void {
    addToSlots(this.#groups, group);
    this.#size += group.items.length;
    if (this.#timer === undefined && this.#size > 0 && !this.#closing) {
      this.#timer = setInterval(() => void this.renewNow(), renewalIntervalMs(this.#options.leaseMs));
      this.#timer.unref();
    }
  }

  #remove(group: Group<unknown>): void {
    if (!removeFromSlots(this.#groups, group)) return;
    this.#size -= group.items.length - (group.gone?.size ?? 0);
    if (group.claimKey !== undefined && this.#byClaim.get(group.claimKey) === (group as Group<ClaimRef>)) this.#byClaim.delete(group.claimKey);
    if (this.#size === 0) this.#clear();
  }

  /** Stops the timer; tracked claims are left to expire. */
  stop(): void {
    for (const group of this.#groups) group.slot = -1;
    this.#groups.length = 0;
    this.#byClaim.clear();
    this.#size = 0;
    this.#clear();
  }

  /**
   * Stops the timer (as `stop`), then resolves once a renewal already under way has ended. A
   * worker awaits this before it returns: a renewal still running when a Lambda handler's promise
   * settles would be frozen with the container, its statement cut from its answer.
   *
   * By default the claims are dropped at once, so a loss that renewal finds is not reported. With
   * `reportLost`, they stay watched until it has answered (no renewal starts meanwhile, and a
   * `release` still ends a claim's watch): `onLost` (and the claim's own callback) runs for each
   * claim it finds lost, as for any renewal. A pull run uses it: its handlers given up on at the
   * end still hold their claims, and a loss found then is one to count.
   */
  async close(options: { reportLost?: boolean } = {}): Promise<void> {
    if (options.reportLost !== true) {
      this.stop();
      await this.#renewing?.catch(() => {});
      return;
    }
    this.#closing = true;
    this.#clear();
    try {
      await this.#renewing?.catch(() => {});
    } finally {
      this.#closing = false;
      this.stop();
    }
  }

  #clear(): void {
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
  }
}

/**
 * Splits the claims of one renewal so that no part holds a row id twice (a renewal answers with
 * ids). Almost always one part; a row watched under an old and a new claim adds a second.
 */
function byDistinctId<T extends { claim: ClaimRef }>(tracked: T[]): T[][] {
  const seen = new Set<string>();
  let later: T[] | undefined;
  const first: T[] = [];
  for (const t of tracked) {
    if (seen.has(t.claim.id)) (later ??= []).push(t);
    else {
      seen.add(t.claim.id);
      first.push(t);
    }
  }
  return later === undefined ? [first] : [first, ...byDistinctId(later)];
}

/** A group's item type does not matter once it is stored (items only go back to its own callbacks). */
function erase<T>(group: Group<T>): Group<unknown> {
  return group as unknown as Group<unknown>;
}
