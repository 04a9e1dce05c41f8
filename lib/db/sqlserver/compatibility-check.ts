/**
 * The database compatibility level check run by `migrate` and at start-up (`schemaVerify`):
 * QueueBox's statements use `OPENJSON`, which needs compatibility level 130 (SQL Server 2016) or
 * higher; below it they fail with a syntax error on every batch.
 */
import { QueueBoxError } from '../../errors.ts';

/** Lowest database compatibility level QueueBox runs at. */
export const MIN_COMPATIBILITY_LEVEL = 130;

/** Reads the current database's compatibility level as `level`. */
export const COMPATIBILITY_LEVEL_SQL = 'SELECT CAST(compatibility_level AS INT) AS level FROM sys.databases WHERE database_id = DB_ID();';

/** Throws a `QueueBoxError` naming the statement to run when `level` is below 130. */
export function assertCompatibilityLevel(level: number | undefined): void {
  if (level === undefined || level >= MIN_COMPATIBILITY_LEVEL) return;
  throw new QueueBoxError(
    `database compatibility level ${level} is below ${MIN_COMPATIBILITY_LEVEL}: QueueBox needs OPENJSON (SQL Server 2016 or later). ` +
      `Raise it with: ALTER DATABASE CURRENT SET COMPATIBILITY_LEVEL = ${MIN_COMPATIBILITY_LEVEL};`,
  );
}
