/**
 * The bound of a bounded replay (`ReplayFilter.maxRows`), checked the same way by every driver.
 */
import { UsageError } from '../errors.ts';

/** The largest `ReplayFilter.maxRows`: a bounded replay is one transaction, kept well below SQL Server's lock escalation (5,000 locks). */
export const REPLAY_MAX_ROWS_BOUND = 1000;

/** `maxRows` when it is a whole number from 1 to `REPLAY_MAX_ROWS_BOUND`; otherwise a `UsageError` naming it. */
export function replayMaxRows(maxRows: number): number {
  if (!Number.isInteger(maxRows) || maxRows < 1 || maxRows > REPLAY_MAX_ROWS_BOUND) {
    throw new UsageError(`replay: maxRows must be a whole number from 1 to ${REPLAY_MAX_ROWS_BOUND}, not ${maxRows}`);
  }
  return maxRows;
}
