/**
 * How QueueBox reads a `timestamptz` from PostgreSQL: as a number of milliseconds since the epoch
 * (`epochMs` in the SQL, `epochTime` on the answer), never as the column itself.
 *
 * Why: the server writes a `timestamptz` as text in the session's `DateStyle`, and `pg` (its
 * `pg-types` parser) understands only the ISO style: under `SQL`, `German` or `Postgres` — set on
 * the database or the role, or by a connection's `options` — it gives `null` for every time it
 * reads. The session may not be QueueBox's to set: a pull worker given `pool` claims through the
 * application's pool, and behind PgBouncer or RDS Proxy a session `SET` is not ours to keep. A
 * number means the same whatever the session's `DateStyle`, `TimeZone` or `IntervalStyle`, and
 * whatever type parsers the application installed for timestamps; `epochMs`'s whole numeric is
 * also untouched by `extra_float_digits`. (The outbox claim reads whole microseconds, a bigint
 * computed from a float8 `date_part`, cheaper per claimed row than a numeric: `claimedTime`.)
 */

/** The latest and earliest time a JavaScript `Date` holds, in ms: ±100,000,000 days from 1970. */
export const DATE_LIMIT_MS = 8.64e15;

/**
 * A time as the answer carries it: `epochMs`'s numeric arrives as text (a float8 on PostgreSQL 13,
 * whose `extract` gives one, as a number); the outbox claim's microseconds, divided by 1,000, as a
 * number with a fraction.
 */
export type EpochMs = number | string;

/**
 * SQL: the timestamptz expression `at` as whole milliseconds since the epoch, rounded down, as
 * `pg` rounds the ISO text it parses (so `date_trunc('milliseconds', at)` is the same instant);
 * `Infinity` / `-Infinity` for `infinity` / `-infinity`, NULL for NULL. Exact: `extract` is a
 * numeric from PostgreSQL 14 on; on 13 its float8 seconds are first rounded to the microsecond
 * they hold. The result is a numeric (text on the wire, whole: no float output setting rounds it).
 */
export function epochMs(at: string): string {
  return `floor(round(extract(epoch FROM ${at}) * 1000000) / 1000)`;
}

/**
 * SQL: the interval `span` in seconds, exact: a numeric (text on the wire, read with `Number`),
 * never a float8, whose text the session's `extra_float_digits` rounds: set to -15 on the role or
 * the database, it leaves one significant digit, and an age of 300.25 s reads as `3e+02`. Every
 * age and span QueueBox reads is taken this way, as every time is taken by `epochMs`. `extract` is
 * a numeric from PostgreSQL 14 on, to the microsecond; on 13 its float8 becomes a numeric of its
 * 15 significant digits, a conversion no output setting touches.
 */
export function spanSeconds(span: string): string {
  return `extract(epoch FROM ${span})::numeric`;
}

/**
 * A read time as a `Date` that can be shown (`toISOString`) and compared. `infinity` is the latest
 * time a `Date` holds (+275760-09-13), `-infinity` the earliest (-271821-04-20), and so is a time
 * past either (a `Date` cannot be infinite, nor reach PostgreSQL's latest year, 294276). A
 * fractional value (the outbox claim's microseconds / 1,000: the nearest double, which may fall
 * just below the millisecond it is in) is first rounded to the microsecond it stands for, then down
 * to the millisecond, as `epochMs` is.
 */
export function epochTime(value: EpochMs): Date {
  const ms = Number(value);
  if (!Number.isFinite(ms)) return new Date(Math.sign(ms) * DATE_LIMIT_MS);
  const whole = Number.isInteger(ms) ? ms : Math.floor(Math.round(ms * 1000) / 1000);
  return new Date(Math.max(-DATE_LIMIT_MS, Math.min(DATE_LIMIT_MS, whole)));
}

/** `epochTime` of a column that may be NULL. */
export function epochTimeOrNull(value: EpochMs | null): Date | null {
  return value === null ? null : epochTime(value);
}
