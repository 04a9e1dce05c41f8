/**
 * What the three PostgreSQL claim statements (outbox, relay, pull) share: their text is built once
 * per table names (the same string every batch, and the same name when prepared), and their
 * candidates are read due retries first.
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
 * The literal costs nothing unprepared (every execution is planned anyway).
 */
export function oncePerNamesAndLimit(build: (names: PgNames, limit: number) => string): (names: PgNames, limit: number) => string {
  const textsOf = memoizeByObject((_names: PgNames) => new Map<number, string>());
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
 * The claim's candidate ids: due retries (`attempt > 0`) first, then first attempts (see
 * docs/claims-and-leases.md, "Which rows a claim takes first"). `select(attempts)` is one ordered,
 * limited `SELECT c.id … FOR UPDATE SKIP LOCKED` with `attempts` among its conditions. PostgreSQL
 * refuses `FOR UPDATE` directly under `UNION`, so each branch is a subquery; Append runs the
 * branches in order and the outer `LIMIT` stops pulling (and locking) once it has enough rows, so
 * first attempts are read only when retries leave room.
 */
export function retriesFirst(select: (attempts: string) => string, limitParam: string): string {
  return `SELECT id FROM (${select('c.attempt > 0')}) AS retried
       UNION ALL
       SELECT id FROM (${select('c.attempt = 0')}) AS fresh
       LIMIT ${limitParam}`;
}
