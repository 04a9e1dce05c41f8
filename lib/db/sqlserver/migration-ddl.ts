/**
 * DDL pieces of the SQL Server migrations: idempotent (guarded) statements that create sequences
 * and indexes (online where the edition allows), drop indexes and statistics, and re-collate
 * columns. Names are validated identifiers; values never appear here.
 */
import { quoteMssqlIdent as q } from './names.ts';

/**
 * Filtered indexes (and every later insert or update of their table) need these SET options;
 * QUOTED_IDENTIFIER is a parse-time option, so it is set at the top of the batch that creates the index.
 * They equal the driver's connection defaults, so nothing changes for later use of the connection.
 */
export const FILTERED_INDEX_SET_OPTIONS =
  'SET ANSI_NULLS ON; SET ANSI_PADDING ON; SET ANSI_WARNINGS ON; SET ARITHABORT ON; SET CONCAT_NULL_YIELDS_NULL ON; SET QUOTED_IDENTIFIER ON; SET NUMERIC_ROUNDABORT OFF;';

/** A validated name as a Unicode T-SQL literal. */
export function literal(name: string): string {
  // Names are validated identifiers (no quotes possible); N'…' keeps them Unicode literals.
  return `N'${name}'`;
}

/** Creates the BIGINT sequence `qualified` once. */
export function createSequence(qualified: string): string {
  return `IF OBJECT_ID(${literal(qualified)}, N'SO') IS NULL CREATE SEQUENCE ${qualified} AS BIGINT START WITH 1 INCREMENT BY 1;`;
}

/** Editions that build indexes ONLINE: Enterprise/Developer/Evaluation (3), Azure SQL Database (5), Azure SQL Managed Instance (8). */
export const ONLINE_INDEX_EDITIONS = '3, 5, 8';

/**
 * Creates an index once: `ONLINE = ON` where the edition can (concurrent reads and writes of the
 * table go on during the build), an ordinary build elsewhere. The clustered index is created with
 * its (still empty) table and always builds plainly. `setOptions`: the index is filtered or on
 * computed columns, so its batch starts with `FILTERED_INDEX_SET_OPTIONS`.
 */
export function createIndex(table: string, index: string, definition: string, setOptions: boolean): string {
  const guard = `IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE object_id = OBJECT_ID(${literal(table)}) AND name = ${literal(index)})`;
  const create = `CREATE ${definition.replace('{index}', q(index)).replace('{table}', table)}`;
  const dynamic = (text: string) => `EXEC(N'${text.replace(/'/g, "''")}');`;
  const body = /CLUSTERED/.test(definition)
    ? `  ${create};`
    : `BEGIN
  IF CAST(SERVERPROPERTY('EngineEdition') AS INT) IN (${ONLINE_INDEX_EDITIONS})
    ${dynamic(`${create} WITH (ONLINE = ON)`)}
  ELSE
    ${dynamic(create)}
END;`;
  return `${setOptions ? `${FILTERED_INDEX_SET_OPTIONS}\n` : ''}${guard}\n${body}`;
}

/** Drops index `index` of `table` when it exists. */
export function dropIndex(table: string, index: string): string {
  return `IF EXISTS (SELECT 1 FROM sys.indexes WHERE object_id = OBJECT_ID(${literal(table)}) AND name = ${literal(index)}) DROP INDEX ${q(index)} ON ${table};`;
}

/** The collation of keys, sources, idempotency keys and aggregate ids: binary, so case and accents count. */
export const KEY_COLLATION = 'Latin1_General_100_BIN2';

/** Re-collates `column` (declared `ddl`) binary, when it is not already. */
export function binaryColumn(table: string, column: string, ddl: string): string {
  return `IF EXISTS (SELECT 1 FROM sys.columns WHERE object_id = OBJECT_ID(${literal(table)}) AND name = ${literal(column)} AND collation_name <> N'${KEY_COLLATION}')
  ALTER TABLE ${table} ALTER COLUMN ${q(column)} ${ddl.replace('NVARCHAR(255)', `NVARCHAR(255) COLLATE ${KEY_COLLATION}`)};`;
}

/** Drops the statistics SQL Server created by itself on `columns` of `table`: they would block the column's ALTER. */
export function dropAutoStatistics(table: string, columns: readonly string[]): string {
  return `DECLARE @v_drop NVARCHAR(MAX) = N'';
SELECT @v_drop = @v_drop + N'DROP STATISTICS ${table.replace(/'/g, "''")}.' + QUOTENAME(s.name) + N';'
  FROM sys.stats AS s
  JOIN sys.stats_columns AS sc ON sc.object_id = s.object_id AND sc.stats_id = s.stats_id
  JOIN sys.columns AS c ON c.object_id = sc.object_id AND c.column_id = sc.column_id
 WHERE s.object_id = OBJECT_ID(${literal(table)}) AND s.auto_created = 1 AND c.name IN (${columns.map(literal).join(', ')});
EXEC(@v_drop);`;
}

/** A persisted `<column>_bytes` column: SQL Server's `=` ignores trailing spaces, equal byte lengths make it exact. */
export function byteLengthColumn(table: string, column: string): string {
  return `${FILTERED_INDEX_SET_OPTIONS}
IF COL_LENGTH(${literal(table)}, ${literal(`${column}_bytes`)}) IS NULL
  ALTER TABLE ${table} ADD ${q(`${column}_bytes`)} AS CAST(DATALENGTH(${q(column)}) AS INT) PERSISTED;`;
}


/**
 * Turns lock escalation off for `table`, once (guarded by `sys.tables.lock_escalation_desc`): a
 * statement holding 5,000 locks on one table no longer converts them into a table lock (see
 * "ALTER TABLE … LOCK_ESCALATION" and "Lock escalation" in the SQL Server locking guide,
 * learn.microsoft.com/sql/t-sql/statements/alter-table-transact-sql,
 * learn.microsoft.com/sql/relational-databases/sql-server-transaction-locking-and-row-versioning-guide).
 * DISABLE "prevents lock escalation in most cases" (the ALTER TABLE reference): a few table locks
 * remain (e.g. a serializable scan of a heap), none of which QueueBox's statements take.
 */
export function disableLockEscalation(table: string): string {
  return `IF EXISTS (SELECT 1 FROM sys.tables WHERE object_id = OBJECT_ID(${literal(table)}) AND lock_escalation_desc <> N'DISABLE')
  ALTER TABLE ${table} SET (LOCK_ESCALATION = DISABLE);`;
}
