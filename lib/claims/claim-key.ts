/**
 * The identity of one claim: the row id and the claim's token together. A row claimed again gets
 * a new token, so everything QueueBox remembers about a claim (watches, losses, signals, settle
 * plans) is keyed by this, never by the row id alone (seed: the claim token names the owner).
 */
import type { ClaimRef } from '../db/driver.ts';

/** The key of one claim: `id/token`. */
export function claimKey(claim: ClaimRef): string {
  return `${claim.id}/${claim.token}`;
}
