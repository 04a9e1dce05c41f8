/**
 * How many rows the relay's next claim asks for: `inbox.relay.batchSize`, or fewer when the rows
 * are large, so that a claim brings about `CLAIM_PAYLOAD_BUDGET_CHARS` (32 Mi characters) of
 * payload text into memory, as the outbox pass's claims do (`claimLimitFor`). The rows of a claim
 * are all in memory until its batch is forwarded: 100 bodies of 1 MiB would be 100 MB or more of
 * text in a relay sized for 512 MB.
 *
 * The limit follows the last claim that found rows (its rows' average payload text), per driver
 * (a container keeps its driver across invocations); before any, a row is taken to be as large as
 * the receivers let a body be (`inbox.maxBodyBytes`), so a new container's first claim is bounded
 * too. A claim always asks for at least one row, so a row larger than the budget still moves.
 * Lowered limits are rounded down to a few values (`claimLimitRung`), so claims reuse a handful of
 * statement texts.
 */
import { claimLimitFor, claimLimitRung } from '../outbox/claim-size.ts';

/** Rows and payload text (characters) of the last relay claim that found rows. */
interface RelayClaimMemory {
  rows: number;
  payloadChars: number;
}

const lastClaims = new WeakMap<object, RelayClaimMemory>();

/**
 * The limit of the relay's next claim on `driver`: `batchSize`, or fewer (at least 1) when the
 * last claim's rows averaged so much payload text that `batchSize` of them would exceed the budget;
 * before any claim found rows, every row counts as `maxBodyBytes` characters.
 */
export function relayClaimLimit(driver: object, batchSize: number, maxBodyBytes: number): number {
  const last = lastClaims.get(driver) ?? { rows: 1, payloadChars: maxBodyBytes };
  const bounded = claimLimitFor(batchSize, last);
  return bounded === batchSize ? bounded : claimLimitRung(bounded, batchSize, batchSize);
}

/** Records what a relay claim on `driver` returned; a claim that found nothing changes nothing. */
export function relayClaimed(driver: object, rows: ReadonlyArray<{ payloadText: string }>): void {
  if (rows.length === 0) return;
  let payloadChars = 0;
  for (const row of rows) payloadChars += row.payloadText.length;
  lastClaims.set(driver, { rows: rows.length, payloadChars });
}
