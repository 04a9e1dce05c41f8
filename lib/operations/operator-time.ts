/**
 * Times that operators type (CLI `--created-from`/`--created-to`, the replay function's event,
 * the console's forms): ISO-8601 with a four-digit year, and a time of day only with its zone
 * (`Z` or `±hh:mm`). A date alone is midnight UTC of that date. A date-time without a zone is
 * refused: JavaScript would read it as the local time of whichever machine parses it (the
 * console says UTC; the Lambda runs in UTC; a laptop may not), so the same text could select
 * different rows. A time must fall within 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999Z,
 * the range both databases store (PostgreSQL has no year 0, SQL Server's `datetime2` ends with
 * 9999): year 0000, or an offset that moves a time past either end, is refused here, not by the
 * database.
 */

/** A date alone (`2026-11-30`), read as 00:00 UTC. */
const DATE_ONLY = /^\d{4}-\d{2}-\d{2}$/;
/** A date-time with its zone (`2026-11-30T12:00:00Z`, `2026-11-30 12:00+01:00`). */
const ZONED = /^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?(?:Z|[+-]\d{2}:?\d{2})$/;
/** A date-time without a zone. */
const UNZONED = /^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?$/;

/** The first and last instants an operator time may name (ms since the epoch). */
const EARLIEST = Date.parse('0001-01-01T00:00:00Z');
const LATEST = Date.parse('9999-12-31T23:59:59.999Z');

/** Why `text` is not an operator time (a phrase to follow the key's name), or undefined when it is one. */
export function operatorTimeProblem(text: string): string | undefined {
  if (UNZONED.test(text)) return `has no time zone: write it in UTC with a Z (e.g. ${text.replace(' ', 'T')}Z) or with an offset such as +02:00`;
  if (!DATE_ONLY.test(text) && !ZONED.test(text)) return 'must be an ISO-8601 time with its zone, such as 2026-11-30T12:00:00Z (or a date alone, 2026-11-30, for 00:00 UTC)';
  const ms = new Date(text).getTime();
  if (Number.isNaN(ms)) return 'is not a valid time';
  if (ms < EARLIEST || ms > LATEST) return 'is out of range: times run from 0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z';
  return missingDay(text);
}

/** JavaScript rolls a day the month does not have into the next month (2026-02-30 is 2026-03-02): a range would be wider than typed. */
function missingDay(text: string): string | undefined {
  const [year, month, day] = text.slice(0, 10).split('-').map(Number) as [number, number, number];
  const probe = new Date(0);
  probe.setUTCFullYear(year, month - 1, day);
  return probe.getUTCMonth() === month - 1 && probe.getUTCDate() === day ? undefined : `is not a valid time (${text.slice(0, 7)} has no day ${day})`;
}
