/**
 * What the three PostgreSQL claim statements (outbox, relay, pull) share: their text is built once
 * per table names (the same string every batch, and the same name when prepared), they read due
 * retries first, then a window of the oldest rows, then the heads of the keys that can move, and a
 * claim refused by the one-row-per-key-in-flight index is run again.
 */
import { memoizeByObject } from '../../runtime/memo.ts';
import type { PgNames } from './names.ts';

/** `build` runs once per `PgNames` object; later calls return the same text. */
export function oncePerNames(build: (names: PgNames) => string): (names: PgNames) => string {
  return memoizeByObject(build);
}

/**
 * `build` runs once per `PgNames` object and batch size; later calls return the same text. The
 * batch size is written into the text as a literal (`LIMIT 100`), not bound: a prepared claim
 * (`database.preparedStatements`) with `LIMIT $1` is planned again at every execution, because
 * PostgreSQL rates a generic plan with an unknown LIMIT as too costly and keeps custom plans;
 * with the literal it switches to the generic plan after five executions and plans no more.
 * The literal costs nothing unprepared (every execution is planned anyway). A bound LIMIT is no
 * guarantee of custom plans, though: on a few rows the pull claim's generic plan (`LIMIT $2`)
 * costs no more than its custom plans, and PostgreSQL keeps it. Every prepared claim is planned
 * under `PINNED_CLAIM_PLAN`, so that whichever plan PostgreSQL keeps serves a backlog.
 */
export function oncePerNamesAndLimit<T = string>(build: (names: PgNames, limit: number) => T): (names: PgNames, limit: number) => T {
  const textsOf = memoizeByObject((_names: PgNames) => new Map<number, T>());
  return (names, limit) => {
    if (!Number.isSafeInteger(limit) || limit < 1) throw new RangeError(`claim batch size must be a positive integer, not ${limit}`);
    const texts = textsOf(names);
    let text = texts.get(limit);
    if (text === undefined) {
      text = build(names, limit);
      texts.set(limit, text);
    }
    return text;
  };
}

/**
 * How many batches' worth of the oldest due rows a claim reads before it looks for the heads of
 * the keys that can move: three — its own batch, plus the batch a concurrent claim is locking
 * and one that another claim committed after this claim's snapshot (still pending to it, skipped
 * at the lock) — so that a claim beside another still fills its batch from the window when most
 * keys can move. The window claim reads the window lazily: rows past the batch are read only when
 * earlier ones were skipped. The full claim reads it whole and keeps the first row of each key in
 * it (`firstOfKeyIn`, outbox-queries.ts) before the head test. Measured with two passes at
 * 1,000,000 rows over 1,000 keys: a window of two batches came up short in many claims, each then
 * scanning every key (p99 claim 38–41 ms); three batches: p99 17 ms, at about 1 ms more per claim
 * where the window is mostly blocked (100 keys).
 */
export const OLDEST_WINDOW = 3;

/**
 * The condition (SQL, in the statement that defines the CTE `oldest`) under which a claim looks
 * past the window of the oldest rows — the loose scan over every open key, then keyless rows:
 * only when the window filled less than half the batch (`limit`: SQL text of the batch size).
 * A window that came up a few rows short because a concurrent claim holds them is enough: that
 * batch is a little smaller, and the next claim reads the next window. Without this, each such
 * claim paid the scan of every open key (about 30 ms at 1,000 keys over 1,000,000 rows) for the
 * few rows missing; a window mostly held by keys in flight still gets the scan.
 */
export function windowLeftRoom(limit: string): string {
  return `(SELECT count(*) FROM oldest) * 2 < ${limit}`;
}

/** Runs a claim again when a unique index of in-flight rows refused it (both dialects). */
export { claimRetryingInFlight } from '../in-flight-retry.ts';
