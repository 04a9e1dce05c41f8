/**
 * Fault profiles: the default mix, and two that make a row come back to the invocation that lost
 * it (a claim is its token, so the old claim's bookkeeping must not touch the new one):
 *
 * - `short-lease`: invocations of 8–15 s with leases of 1.0–1.4 s, and some lease renewals that
 *   reach the database only after the lease ran out (a stalled event loop or network). The pass
 *   loses those claims, goes on, and often claims the same rows again once a reclaim returned them.
 * - `frozen-pull`: pull workers at concurrency 8 whose handlers sometimes freeze past their lease,
 *   ignoring their signal; the worker's renewal finds the lease gone, and the row is claimed
 *   again — often by the same worker — while the frozen run still holds its slot.
 *
 * `profileDriver` also counts rows an invocation claims that it had claimed before.
 */
import type { Driver } from '../../lib/db/driver.ts';
import { sleep } from '../../lib/runtime/deadline.ts';
import type { Prng } from './prng.ts';

export type FaultProfile = 'default' | 'short-lease' | 'frozen-pull';

/** Counts of the profile faults (shown in the run's table). */
export interface ProfileCounts {
  renewalStalls: number;
  frozenHandlers: number;
  /** Rows an invocation claimed that it had claimed before, per kind of invocation. */
  claimedAgain: { outbox: number; relay: number; pull: number };
  /** Claimed rows, and those whose lease (as the claim returned it) ends after their invocation; the latest by how much. */
  leases: { claimed: number; endingAfterInvocation: number; maxPastEndMs: number };
}

/** Invocation timeout and lease of one invocation, drawn from `rng` (the default draws as before). */
export function invocationTimings(profile: FaultProfile, rng: Prng): { timeoutMs: number; claimTimeoutMs: number } {
  if (profile === 'short-lease') return { timeoutMs: rng.int(8000, 15_000), claimTimeoutMs: rng.int(1000, 1400) };
  return { timeoutMs: rng.int(2500, 6000), claimTimeoutMs: rng.int(1000, 3000) };
}

/**
 * Wraps an invocation's driver: counts re-claims by this invocation and, in `short-lease`,
 * delays some renewals past their lease before they are sent.
 */
export function profileDriver(driver: Driver, profile: FaultProfile, rng: Prng, claimTimeoutMs: number, counts: ProfileCounts, invocationEndsAt: () => number): Driver {
  const claimedHere = new Set<string>();
  const noteClaims = <R extends { id: string; leaseExpiresAt: Date }>(kind: keyof ProfileCounts['claimedAgain'], rows: R[]): R[] => {
    const endsAt = invocationEndsAt();
    for (const row of rows) {
      if (claimedHere.has(row.id)) counts.claimedAgain[kind]++;
      claimedHere.add(row.id);
      counts.leases.claimed++;
      const pastEndMs = row.leaseExpiresAt.getTime() - endsAt;
      if (pastEndMs > 0) {
        counts.leases.endingAfterInvocation++;
        counts.leases.maxPastEndMs = Math.max(counts.leases.maxPastEndMs, pastEndMs);
      }
    }
    return rows;
  };
  const stall = async () => {
    if (profile !== 'short-lease' || !rng.chance(0.03)) return;
    counts.renewalStalls++;
    await sleep(Math.round(claimTimeoutMs * (1.1 + 0.4 * rng.float())));
  };
  const wrapped: Driver = Object.create(driver) as Driver;
  Object.assign(wrapped, {
    outboxClaimMany: async (p: Parameters<Driver['outboxClaimMany']>[0]) => noteClaims('outbox', await driver.outboxClaimMany(p)),
    inboxClaimPushMany: async (p: Parameters<Driver['inboxClaimPushMany']>[0]) => noteClaims('relay', await driver.inboxClaimPushMany(p)),
    pullClaimMany: async (p: Parameters<Driver['pullClaimMany']>[0]) => noteClaims('pull', await driver.pullClaimMany(p)),
    outboxRenewMany: async (p: Parameters<Driver['outboxRenewMany']>[0]) => (await stall(), driver.outboxRenewMany(p)),
    inboxRenewMany: async (p: Parameters<Driver['inboxRenewMany']>[0]) => (await stall(), driver.inboxRenewMany(p)),
    pullRenew: async (p: Parameters<Driver['pullRenew']>[0]) => (await stall(), driver.pullRenew(p)),
  });
  return wrapped;
}
