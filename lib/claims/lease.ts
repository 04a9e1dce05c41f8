/**
 * Lease arithmetic shared by every worker (seed: the lease; spec §3: lease sized to the invocation).
 */

/** Shortest lease QueueBox grants; below this a claim could expire before the claim returns. */
export const MIN_LEASE_MS = 1000;

/** The least time before the deadline in which an outbox pass still claims (ms). */
export const MIN_CLAIM_WINDOW_MS = 1000;

/**
 * Least time a pass needs before its deadline to claim at all (ms), per worker: the outbox pass's
 * claim window, the relay's least lease. `hasTimeToClaim` and packaging's timeout check read it.
 */
export const MIN_TIME_TO_CLAIM_MS = { outboxPoller: MIN_CLAIM_WINDOW_MS, inboxRelay: MIN_LEASE_MS } as const;

/**
 * The lease to grant or renew now: `min(claimTimeoutMs, time left in this invocation)`.
 * Nothing can renew after the invocation ends, so a frozen or killed invocation's rows become
 * reclaimable right after its end, not `claimTimeoutMs` later. Returns 0 when too little time
 * is left to claim at all.
 */
export function leaseMsFor(claimTimeoutMs: number, remainingMs: number | undefined): number {
  const lease = remainingMs === undefined ? claimTimeoutMs : Math.min(claimTimeoutMs, Math.floor(remainingMs));
  return lease >= MIN_LEASE_MS ? lease : 0;
}

/** The end of an invocation in which no renewal is sent (`renewalLeaseMsFor`); under 2/3 of `MIN_LEASE_MS`. */
export const RENEWAL_TAIL_MS = 100;

/**
 * The lease a renewal asks for: `min(claimTimeoutMs, time left in this invocation)`, however little
 * is left (0 in its last `RENEWAL_TAIL_MS`). A renewal extends a lease its holder already has, so
 * a claim's floor (`MIN_LEASE_MS`) does not apply: without renewals in the invocation's last
 * second, the lease last granted — `claimTimeoutMs` under 1.5 s, a renewal a third of it earlier —
 * could end up to a third of `claimTimeoutMs` before the invocation does, while the pass still
 * waited for its calls, and another invocation reclaimed and published the row meanwhile. Renewed
 * with the time left, the lease ends with the invocation, as a killed invocation's does.
 */
export function renewalLeaseMsFor(claimTimeoutMs: number, remainingMs: number | undefined): number {
  // In the last RENEWAL_TAIL_MS no renewal is sent: the one a third of a lease earlier, with less
  // than the lease left, already renewed up to the invocation's end, and a statement sent now
  // could not answer in time (its failure would report the claim lost for nothing).
  if (remainingMs !== undefined && remainingMs < RENEWAL_TAIL_MS) return 0;
  return remainingMs === undefined ? claimTimeoutMs : Math.min(claimTimeoutMs, Math.floor(remainingMs));
}

/** Renewal cadence: every third of the lease (seed: renewal). */
export function renewalIntervalMs(leaseMs: number): number {
  return Math.max(1, Math.floor(leaseMs / 3));
}

/** Reclaim throttle: at most once per `claimTimeoutMs / 5` (seed: reclaim of stale claims). */
export function reclaimThrottleMs(claimTimeoutMs: number): number {
  return Math.floor(claimTimeoutMs / 5);
}
