/**
 * Length of a text as a QueueBox column counts it, which differs by database: PostgreSQL's
 * `varchar(n)` counts Unicode code points (an emoji is one); SQL Server's `NVARCHAR(n)` counts
 * UTF-16 code units (a character outside the Basic Multilingual Plane, such as an emoji, is two:
 * a surrogate pair). So a key of 200 emoji fits PostgreSQL's `varchar(255)` and not SQL Server's
 * `NVARCHAR(255)`. Every length check in front of a column (inbox fields, outbox topic and key)
 * counts with `columnLength` and the dialect the row goes to.
 */

/** The database a text goes to: the unit its text columns count differs. */
export type ColumnDialect = 'postgres' | 'sqlserver';

/** Length in characters as PostgreSQL counts them: Unicode code points, so an emoji is one. */
export function codePointLength(value: string): number {
  let n = 0;
  for (const _ of value) n++;
  return n;
}

/** Length of `value` as the dialect's columns count it: code points (PostgreSQL) or UTF-16 code units (SQL Server). */
export function columnLength(value: string, dialect: ColumnDialect): number {
  return dialect === 'sqlserver' ? value.length : codePointLength(value);
}

/** The unit of a length limit in a message: what `columnLength` counts for `dialect`. */
export function lengthUnit(dialect: ColumnDialect): string {
  return dialect === 'sqlserver' ? 'UTF-16 code units (SQL Server; a character outside the Basic Multilingual Plane, such as an emoji, counts 2)' : 'characters';
}
