/**
 * The bounds of a dead-row grouping (`ConsoleDeadGroupQuery`), checked the same way by every driver.
 */
import type { ConsoleDeadGroupQuery } from './driver.ts';
import { UsageError } from '../errors.ts';

/** The most characters of `last_error` a group may share (SQL Server groups them as `NVARCHAR(n)`). */
export const DEAD_GROUP_MAX_ERROR_CHARS = 1000;

/** The query with whole positive numbers (`errorChars` at most `DEAD_GROUP_MAX_ERROR_CHARS`); otherwise a `UsageError`. */
export function deadGroupQuery(q: ConsoleDeadGroupQuery): ConsoleDeadGroupQuery {
  for (const [name, value] of Object.entries(q)) {
    if (!Number.isInteger(value) || value < 1) throw new UsageError(`dead groups: ${name} must be a whole number of 1 or more, not ${String(value)}`);
  }
  if (q.errorChars > DEAD_GROUP_MAX_ERROR_CHARS) throw new UsageError(`dead groups: errorChars must be at most ${DEAD_GROUP_MAX_ERROR_CHARS}, not ${q.errorChars}`);
  return q;
}
