/**
 * How large the outbox pass's next claim is (`outbox.batchSize` growing to `outbox.maxBatchSize`):
 * the size a container's claims grow to and shrink from, the payload bound and the deadline bound
 * on one claim's limit, and the few limits a bounded claim is rounded to. Pure functions, and the
 * per-driver memory they work from (a container keeps its driver across invocations).
 */

/**
 * Payload text one claim should bring into memory (characters of the stored JSON): a claim's limit
 * is lowered once a claim shows rows so large that the claim would exceed this (`claimLimitFor`),
 * and a claim grows only while its largest row seen times the grown size stays within it
 * (`nextClaimSize`). Two batches in flight stay near 64 MiB of payload text whatever the batch
 * size, within the poller's default 512 MB (the first claim of a new container excepted).
 */
export const CLAIM_PAYLOAD_BUDGET_CHARS = 32 * 1024 * 1024;

/** What a container remembers of its claims, per driver (it keeps its driver across invocations). */
export interface ClaimMemory {
  /** The size the next claim grows or shrinks from (`nextClaimSize`). */
  size: number;
  /** Rows and payload text of the last claim that found rows, and its largest row. */
  rows: number;
  payloadChars: number;
  largestRowChars: number;
  /** The slowest destination call timed so far (ms; 0: none yet). */
  slowestCallMs: number;
  /** Claims still to make only once the pass has no batch in flight (`afterClaim`). */
  pipelinePause: number;
  /** The pause the next pipelined claim that finds nothing sets (`afterClaim`). */
  pipelineBackoff: number;
  /** How long a claim takes, the pass's last claims smoothed (ms; 0: none yet): `pipelineHoldMs`. */
  claimMs: number;
  /** The most the size grows to (`learnCeiling`): `max`, or half of it while claims of `max` took every row that could move. */
  ceiling: number;
  /** Full claims in a row at a lowered ceiling, towards raising it (`CEILING_RECOVERY`). */
  fullAtCeiling: number;
}
const claimMemory = new WeakMap<object, ClaimMemory>();

/**
 * The claim memory of `driver` (created at `base` on first use), its size brought within
 * `base`..`max` (a configuration change between invocations of one container takes effect).
 */
export function claimMemoryOf(driver: object, base: number, max: number): ClaimMemory {
  const memory = claimMemory.get(driver) ?? {
    size: base,
    rows: 0,
    payloadChars: 0,
    largestRowChars: 0,
    slowestCallMs: 0,
    pipelinePause: 0,
    pipelineBackoff: 1,
    claimMs: 0,
    ceiling: max,
    fullAtCeiling: 0,
  };
  claimMemory.set(driver, memory);
  memory.ceiling = Math.min(max, Math.max(base, memory.ceiling));
  memory.size = Math.min(memory.ceiling, Math.max(base, memory.size));
  return memory;
}

/**
 * The claim size after a claim with limit `limit` (at most `size`) that returned `rows`: doubled
 * (up to `max`, and only while `largestRowChars` times the new size fits the payload budget) when
 * a claim at the full size came back full — the table has more to give; halved (down to `base`,
 * at most half the limit it ran with) when any claim came back less than half full — keys held in
 * flight, not the claim size, bound it, and a larger claim would only read more rows of busy keys;
 * else unchanged.
 */
export function nextClaimSize(size: number, limit: number, rows: number, base: number, max: number, largestRowChars = 0): number {
  if (rows * 2 < limit) return Math.max(base, Math.min(size, Math.floor(limit / 2)));
  if (limit === size && rows >= size) {
    const fits = largestRowChars > 0 ? Math.floor(CLAIM_PAYLOAD_BUDGET_CHARS / largestRowChars) : max;
    return Math.max(size, Math.min(max, size * 2, fits));
  }
  return size;
}

/** The longest pause of pipelining (claims made with no batch in flight) after pipelined claims found nothing. */
export const MAX_PIPELINE_PAUSE = 16;

/**
 * What a claim teaches the claim memory. `pipelined`: the pass had batches of its own in flight
 * when the claim was sent.
 *
 * - Ceiling (`learnCeiling`): the size grows to `max`, or to half of it after claims of `max`
 *   took every row that could move (`exhausted`, as the driver reports it).
 * - Size (`nextClaimSize`, up to the ceiling): a pipelined claim that came back less than half full leaves the size
 *   as it is. The rows it missed may be held by the pass's own batches — the keys in flight of a
 *   table with few keys — and say nothing of the size a claim with nothing in flight fills (with
 *   several rows per key, a claim of 1,000 takes 100 keys' ten rows each where one of 100 takes
 *   their heads only).
 * - Pipelining: a pipelined claim that found nothing (every row that can move was held, typically
 *   by the pass's own batches) pauses pipelining: the next `pipelinePause` claims are sent only
 *   once the pass has no batch in flight, the pause doubling with each pipelined claim in a row
 *   that finds nothing (1, 2, 4 … `MAX_PIPELINE_PAUSE`) and back to 1 once one finds rows. On a
 *   table whose keys one batch holds, every pipelined claim was empty: half the claims, each
 *   reading the window and the open keys for nothing; now about one in `MAX_PIPELINE_PAUSE`.
 */
export function afterClaim(
  memory: ClaimMemory,
  claim: { pipelined: boolean; limit: number; rows: number; exhausted?: boolean | undefined; heads?: number | undefined; base: number; max: number; largestRowChars: number },
): void {
  learnCeiling(memory, claim);
  if (!claim.pipelined || claim.rows * 2 >= claim.limit) memory.size = nextClaimSize(memory.size, claim.limit, claim.rows, claim.base, memory.ceiling, claim.largestRowChars);
  if (!claim.pipelined) {
    if (memory.pipelinePause > 0) memory.pipelinePause--;
  } else if (claim.rows === 0) {
    memory.pipelinePause = memory.pipelineBackoff;
    memory.pipelineBackoff = Math.min(MAX_PIPELINE_PAUSE, memory.pipelineBackoff * 2);
  } else {
    memory.pipelineBackoff = 1;
  }
}

/** Full claims in a row at the lowered ceiling, each leaving rows for the next, that raise it back to `max`. */
export const CEILING_RECOVERY = 8;

/**
 * The ceiling of the claim size (`ClaimMemory.ceiling`). A claim of `max` rows that came back full
 * and took every row that could move (`exhausted`: its window offered no more than it took), at
 * least half of them heads of their keys or keyless (`heads`; unset: all of them), leaves
 * nothing to the next claim — the pass's own pipelined claim, or another pass's on the same table,
 * which then comes back empty after reading the window and the open keys for nothing (a table of
 * about `max` open keys, each claim taking the next row of every key). The ceiling drops to half of
 * `max` (not below `base`), so that two claims share those rows. A claim of a few keys' runs of
 * rows (`outbox.rowsPerKey`: 100 keys, 10 rows each) is left alone: halved, such claims only
 * doubled in number (measured: 150 claims instead of 114, no faster). Claims that come back full at the
 * ceiling with rows to spare count towards raising it back to `max`: after `CEILING_RECOVERY` in a
 * row; a claim that found rows but was not full, or took every row, starts the count again.
 */
export function learnCeiling(
  memory: ClaimMemory,
  claim: { limit: number; rows: number; exhausted?: boolean | undefined; heads?: number | undefined; base: number; max: number },
): void {
  if (claim.rows === 0) return;
  const full = claim.rows >= claim.limit;
  const half = Math.max(claim.base, Math.floor(claim.max / 2));
  // Mostly heads: a claim of many keys' next rows, not a few keys' runs (`outbox.rowsPerKey`).
  const manyKeys = (claim.heads ?? claim.rows) * 2 >= claim.limit;
  if (full && claim.exhausted === true && manyKeys && claim.limit >= claim.max && half < claim.max) {
    memory.ceiling = half;
    memory.size = Math.min(memory.size, half);
    memory.fullAtCeiling = 0;
    return;
  }
  if (memory.ceiling >= claim.max) return;
  if (!full || claim.exhausted === true) {
    memory.fullAtCeiling = 0;
  } else if (claim.limit >= memory.ceiling && ++memory.fullAtCeiling >= CEILING_RECOVERY) {
    memory.ceiling = claim.max;
    memory.fullAtCeiling = 0;
  }
}

/**
 * Whether the pass may send a claim while `inFlight` batches of its own publish: below
 * `maxInFlight`, unless pipelining is paused — and even then once `waitedOut` (the pass waited
 * `maxPollIntervalMs` for its batches and none finished: a slow batch must not hold up other keys).
 */
export function mayPipeline(memory: ClaimMemory, inFlight: number, maxInFlight: number, waitedOut = false): boolean {
  return inFlight === 0 || (inFlight < maxInFlight && (memory.pipelinePause === 0 || waitedOut));
}

/** Records how long a claim took (`claimMs`: the mean of the last one and the ones before, halved each time). */
export function claimTimed(memory: ClaimMemory, ms: number): void {
  memory.claimMs = memory.claimMs > 0 ? (memory.claimMs + ms) / 2 : ms;
}

/**
 * How much longer the pass holds its next claim while batches of its own are in flight (ms; 0 or
 * less: claim now): until the oldest of them has been out for as long as a claim takes. A claim
 * sent while a batch is in flight overlaps it. That pays while the batch waits on its destination
 * (or on a lock), and costs when the destination answered at once: the batch is then in its sent
 * mark, a statement on the same database as the claim, and on a database that is the bottleneck
 * the two only slow each other down (docs/performance-history.md, "A claim waits for a batch that is only settling", with a
 * destination that answers at once). A batch still out after a claim's time is waiting on
 * something other than the database's claim, and the claim overlaps that wait.
 */
export function pipelineHoldMs(batchesStartedAt: readonly number[], claimMs: number, now: number): number {
  if (batchesStartedAt.length === 0 || claimMs <= 0) return 0;
  return Math.min(...batchesStartedAt) + claimMs - now;
}

/**
 * The next claim's limit: `size`, or fewer rows when the last claim's rows averaged so much
 * payload that `size` of them would exceed `CLAIM_PAYLOAD_BUDGET_CHARS` (at least 1). A claim of
 * small rows brings the limit back up to `size`.
 */
export function claimLimitFor(size: number, lastClaim: { rows: number; payloadChars: number } | undefined): number {
  if (!lastClaim || lastClaim.rows === 0) return size;
  const average = lastClaim.payloadChars / lastClaim.rows;
  if (average * size <= CLAIM_PAYLOAD_BUDGET_CHARS) return size;
  return Math.max(1, Math.min(size, Math.floor(CLAIM_PAYLOAD_BUDGET_CHARS / average)));
}

/**
 * Rows one destination call carries, for the deadline bound: the smallest `maxBatchSize` of the
 * configured destinations (SQS `SendMessageBatch` and EventBridge `PutEvents` take 10), so the
 * bound holds whichever destination the rows are routed to; 1 when none is configured.
 */
export function rowsPerCallOf(destinations: Iterable<{ maxBatchSize: number }>): number {
  let least = Infinity;
  for (const destination of destinations) least = Math.min(least, destination.maxBatchSize);
  return Number.isFinite(least) && least >= 1 ? Math.floor(least) : 1;
}

/**
 * The most rows a claim may take with `remainingMs` left before the deadline: a claim above
 * `batchSize` (grown, `outbox.maxBatchSize`) must be publishable in the time left, in rounds of
 * the call slots it can count on (`concurrency` shared with the `batchesInFlight` already
 * publishing) of `rowsPerCall` rows each (`rowsPerCallOf`), every call taking up to the slowest call seen so far,
 * with the claim window's factor 2 to spare; never below `batchSize`, which the claim window
 * already covers, and no more than `batchSize` until a call has been timed.
 */
export function rowsPublishableBefore(
  remainingMs: number,
  slowestCallMs: number,
  concurrency: number,
  batchSize: number,
  batchesInFlight: number,
  rowsPerCall: number,
): number {
  if (slowestCallMs <= 0) return batchSize;
  const slots = Math.max(1, Math.floor(concurrency / (batchesInFlight + 1)));
  const rounds = Math.floor(remainingMs / (2 * slowestCallMs));
  return Math.max(batchSize, rounds * slots * rowsPerCall);
}

/**
 * A limit rounded down to a few values (`batchSize` times or divided by a power of two, at least
 * 1), so that bounded claims reuse a handful of statement texts (one prepared statement each with
 * `database.preparedStatements`) instead of one per limit.
 */
export function claimLimitRung(limit: number, batchSize: number, max: number): number {
  if (limit >= max) return max;
  if (limit >= batchSize) return batchSize * 2 ** Math.floor(Math.log2(limit / batchSize));
  return Math.max(1, Math.floor(batchSize / 2 ** Math.ceil(Math.log2(batchSize / Math.max(1, limit)))));
}
