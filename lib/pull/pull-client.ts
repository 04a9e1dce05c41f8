/**
 * The low-level pull API (spec §6), bound to one driver: claim rows of a pull source, then renew,
 * complete (inside the caller's transaction), retry, dead-letter or release each claim.
 *
 * Every call after `claim` is fenced and must change exactly one row. Zero rows is not an error,
 * nor is a write that waited on another transaction's lock on the row until the lease ended (it
 * changed nothing; inside the caller's transaction, that transaction has failed and must roll
 * back): it is the outcome `{ ok: false, reason: 'ownership-lost' }`, counted in
 * `queuebox_claims_lost_total{component="pull"}`. After that outcome the caller must stop work on
 * the row and never retry with another token (seed: the claim fence).
 */
import { MIN_LEASE_MS } from '../claims/lease.ts';
import { redactError } from '../claims/redact.ts';
import { writeInsidePgTransaction } from '../db/caller-transaction.ts';
import type { CallerTransaction, ClaimRef, Driver, InboxRow } from '../db/driver.ts';
import { FencedLockTimeoutError, UsageError } from '../errors.ts';
import type { QueueBoxMetrics } from '../observability/metrics.ts';
import { MAX_TIMER_MS } from '../runtime/timer-limit.ts';

/** A claimed inbox row plus the claim that owns it. */
export interface PullMessage extends InboxRow {
  /** The row id and this claim's token: pass it to renew, complete, retry, dead, release. */
  readonly claim: ClaimRef;
}

/** Result of a fenced write: `ok` exactly when one row changed. */
export type PullOutcome = { ok: true } | { ok: false; reason: 'ownership-lost' };

export interface PullClaimOptions {
  /** Most rows to claim (at most one per aggregate); ≥ 1. */
  batch: number;
  /** Lease in milliseconds on the database clock; 1000 to `MAX_TIMER_MS` (2^31 − 1). */
  leaseMs: number;
}

export interface PullClient {
  /** Claims up to `batch` due or expired rows of `source`; the claim is committed on return. */
  claim(source: string, options: PullClaimOptions): Promise<PullMessage[]>;
  /** Extends the lease to db clock + `leaseMs`: a whole number of ms, `MIN_LEASE_MS` (1000) to `MAX_TIMER_MS`. */
  renew(claim: ClaimRef, leaseMs: number): Promise<PullOutcome>;
  /** Marks the row `processed` inside `tx`; on `ownership-lost` the caller must roll `tx` back. */
  complete(tx: CallerTransaction, claim: ClaimRef): Promise<PullOutcome>;
  /** Back to `pending` with `attempt + 1`, due after `delayMs` (0 to `MAX_TIMER_MS`); `error` is stored redacted. */
  retry(claim: ClaimRef, delayMs: number, error: unknown): Promise<PullOutcome>;
  /** Marks the row `dead`; `error` is stored redacted. */
  dead(claim: ClaimRef, error: unknown): Promise<PullOutcome>;
  /** Returns a claimed row that no handler started to `pending`, spending no attempt. */
  release(claim: ClaimRef): Promise<PullOutcome>;
}

export interface PullClientOptions {
  /** Counts lost claims (`queuebox_claims_lost_total{component="pull"}`). */
  metrics?: QueueBoxMetrics;
}

const OK: PullOutcome = { ok: true };
const LOST: PullOutcome = { ok: false, reason: 'ownership-lost' };

/** Creates a pull client on `driver`; it holds no state besides the driver and the metrics. */
export function createPullClient(driver: Driver, options: PullClientOptions = {}): PullClient {
  const outcome = (changed: boolean): PullOutcome => {
    if (changed) return OK;
    options.metrics?.count('claimsLost', 1, { component: 'pull' });
    return LOST;
  };
  // A fenced write that waited on another transaction's lock on the row until the lease ended
  // changed nothing (`FencedLockTimeoutError`): the claim is lost, as when it changes no row.
  const fenced = (write: Promise<boolean>): Promise<PullOutcome> =>
    write.then(outcome, (error: unknown) => {
      if (error instanceof FencedLockTimeoutError) return outcome(false);
      throw error;
    });
  return {
    async claim(source, options) {
      if (typeof source !== 'string' || source.trim() === '') throw new UsageError(`pull claim source must be the name of an inbox source, got ${describe(source)}`);
      if (typeof options !== 'object' || options === null) throw new UsageError(`pull claim needs its options { batch, leaseMs }, got ${describe(options)}`);
      const { batch, leaseMs } = options;
      if (typeof batch !== 'number' || !Number.isInteger(batch) || batch < 1 || batch > MAX_PULL_BATCH) {
        throw new UsageError(`pull batch must be a whole number from 1 to ${MAX_PULL_BATCH} (as pull.batchSize), got ${describe(batch)}`);
      }
      if (typeof leaseMs !== 'number' || !Number.isFinite(leaseMs) || leaseMs < MIN_LEASE_MS) throw new UsageError(`pull leaseMs must be a number of ms, at least ${MIN_LEASE_MS}, got ${describe(leaseMs)}`);
      checkLeaseLimit(leaseMs);
      const rows = await driver.pullClaimMany({ source, limit: batch, leaseMs: Math.floor(leaseMs) });
      // Added to the row, not spread into a copy: a spread would parse every payload now (`payload`
      // is parsed on first read), each a handler may never read.
      return rows.map((row) => Object.assign(row, { claim: { id: row.id, token: row.claimToken } }));
    },
    // A lease under the least one a claim gets (0, negative, a fraction of a ms) answered `ok`
    // while it had already ended, and NaN reached the database as an error of its own.
    renew: async (claim, leaseMs) => {
      checkClaim('renew', claim);
      if (typeof leaseMs !== 'number' || !Number.isInteger(leaseMs) || leaseMs < MIN_LEASE_MS) {
        throw new UsageError(`pull renew leaseMs must be a whole number of ms, at least ${MIN_LEASE_MS}, got ${String(leaseMs)}`);
      }
      checkLeaseLimit(leaseMs);
      return fenced(driver.pullRenew({ id: claim.id, token: claim.token, leaseMs }));
    },
    // Refused outside the caller's transaction: a completion that commits on its own would mark
    // the message processed even if the handler's change rolls back. Through a handle that cannot
    // report its transaction, the check goes in the same round trip as the UPDATE (`db`), so a
    // completion not awaited before the caller's ROLLBACK ends with that transaction.
    complete: async (tx, claim) => {
      checkClaim('complete', claim);
      const write = (db: unknown) => driver.pullComplete(db as CallerTransaction, { id: claim.id, token: claim.token });
      return fenced(writeInsidePgTransaction(tx, 'complete', write, () => `the completion of inbox row ${claim.id}`));
    },
    // Checked here, as the worker's own delays are at creation: NaN, Infinity or a delay past
    // `MAX_TIMER_MS` reached the database as an interval or integer out of range.
    retry: async (claim, delayMs, error) => {
      checkClaim('retry', claim);
      if (typeof delayMs !== 'number' || !Number.isFinite(delayMs) || delayMs < 0 || delayMs > MAX_TIMER_MS) {
        throw new UsageError(`pull retry delayMs must be a number of ms, 0 to ${MAX_TIMER_MS} (about 24.8 days, the longest delay the other settings take), got ${String(delayMs)}`);
      }
      return fenced(driver.pullRetry({ id: claim.id, token: claim.token, delayMs, error: redactError(error) }));
    },
    dead: async (claim, error) => {
      checkClaim('dead', claim);
      return fenced(driver.pullMarkDead({ id: claim.id, token: claim.token, error: redactError(error) }));
    },
    release: async (claim) => {
      checkClaim('release', claim);
      return fenced(driver.pullRelease({ id: claim.id, token: claim.token }));
    },
  };
}

/** The most rows one pull claim takes: `pull.batchSize`'s limit. */
const MAX_PULL_BATCH = 1000;

/** A UUID as the database writes one (any case): what a claim's id and token are. */
const UUID_TEXT = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * A claim is the `{ id, token }` a claim returned (`PullMessage.claim`). Anything else is a
 * programming error, refused naming the call before anything is sent; it used to reach the
 * database and come back as its `invalid input syntax for type uuid`.
 */
function checkClaim(call: string, claim: unknown): asserts claim is ClaimRef {
  const c = claim as Partial<ClaimRef> | null | undefined;
  if (typeof c !== 'object' || c === null || typeof c.id !== 'string' || typeof c.token !== 'string' || !UUID_TEXT.test(c.id) || !UUID_TEXT.test(c.token)) {
    throw new UsageError(`pull ${call}: claim must be the { id, token } of a claimed message (message.claim), both UUIDs, got ${describe(claim)}`);
  }
}

/** A value for a message: short, and its type when it is not what was asked for. */
function describe(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value.length > 80 ? `${value.slice(0, 80)}…` : value);
  if (typeof value === 'object' && value !== null) {
    try {
      const text = JSON.stringify(value);
      return text.length > 120 ? `${text.slice(0, 120)}…` : text;
    } catch {
      return Object.prototype.toString.call(value);
    }
  }
  return String(value);
}

/** A fenced write waits for a row lock at most until the lease ends, and PostgreSQL's `lock_timeout` is an int32 of ms. */
function checkLeaseLimit(leaseMs: number): void {
  if (leaseMs > MAX_TIMER_MS) throw new UsageError(`pull leaseMs must be at most ${MAX_TIMER_MS} (about 24.8 days: the longest lock wait PostgreSQL takes), got ${leaseMs}`);
}
