/**
 * A relation of one of QueueBox's table names that is not QueueBox's: an application's own
 * `outbox` (other columns), a view, a sequence. Migration 1 creates the tables with `CREATE TABLE
 * IF NOT EXISTS`, which skips such a relation, and its next statement then fails on a column the
 * relation lacks (`column "sequence" of relation "outbox" does not exist`), while `--check` and
 * start-up keep asking for `migrate`. `migrate`, the `--sql` script, `--check` and start-up name
 * the relation and the `tables.<name>` key that chooses another name instead.
 *
 * Only while migration 1 is not recorded: a QueueBox table that lost a column after its migration
 * is a missing column (`missingColumns`, with its `ALTER TABLE`), not a foreign table.
 */
import { pgExpectedColumns, pgMigrations } from './migrations.ts';
import type { PgNames } from './names.ts';
import { pgQuery, type PgQueryable } from './pg-pool.ts';

/**
 * SQL: one row (`problem`) per relation of this configuration's table names that is not a table
 * with every column migration 1 creates. `$1` the schema, `$2` the table names, `$3` their
 * configuration keys (`tables.<name>`: QueueBox's table is the part after the dot), `$4` each table's migration-1 columns joined by `,` (`foreignTableValues`).
 */
export const FOREIGN_TABLE_SQL = `SELECT CASE WHEN c.relkind IN ('r', 'p') THEN
         'table "' || $1 || '"."' || want.name || '" already exists and is not QueueBox''s ' || substr(want.key, 8) || ' table: it has no column ' || missing.list
           || ' (an application''s own table of that name?)'
       ELSE
         'relation "' || $1 || '"."' || want.name || '" already exists as a '
           || CASE c.relkind WHEN 'v' THEN 'view' WHEN 'm' THEN 'materialized view' WHEN 'f' THEN 'foreign table' WHEN 'S' THEN 'sequence'
                             WHEN 'i' THEN 'index' WHEN 'I' THEN 'index' WHEN 'c' THEN 'composite type' ELSE 'relation' END
           || ', not QueueBox''s ' || substr(want.key, 8) || ' table (an application''s own relation of that name?)'
       END
       || '. migrate creates no table over it: set ' || want.key || ' to a name not in use in schema "' || $1 || '" (or database.schema to another schema)' AS problem
  FROM unnest($2::text[], $3::text[], $4::text[]) WITH ORDINALITY AS want(name, key, columns, ord)
  JOIN pg_namespace ns ON ns.nspname = $1
  JOIN pg_class c ON c.relnamespace = ns.oid AND c.relname = want.name
  CROSS JOIN LATERAL (
    SELECT string_agg(col.name, ', ' ORDER BY col.ord) AS list
      FROM unnest(string_to_array(want.columns, ',')) WITH ORDINALITY AS col(name, ord)
     WHERE NOT EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = col.name AND a.attnum > 0 AND NOT a.attisdropped)) AS missing
 WHERE c.relkind NOT IN ('r', 'p') OR missing.list IS NOT NULL
 ORDER BY want.ord`;

/** Columns a later migration adds (`ALTER TABLE … ADD COLUMN IF NOT EXISTS`): not in a table migration 1 created. */
function laterColumns(n: PgNames): Set<string> {
  const added = new Set<string>();
  for (const migration of pgMigrations) {
    if (migration.version === 1) continue;
    for (const match of migration.sql(n).matchAll(/^ALTER TABLE (\S+) ADD COLUMN IF NOT EXISTS "?([a-z0-9_]+)"?/gm)) added.add(`${match[1]}.${match[2]}`);
  }
  return added;
}

/** The values of `FOREIGN_TABLE_SQL`'s parameters. */
export function foreignTableValues(n: PgNames): [string, string[], string[], string[]] {
  const keys: Record<string, string> = { [n.outbox]: 'tables.outbox', [n.inbox]: 'tables.inbox', [n.maintenance]: 'tables.maintenance' };
  const later = laterColumns(n);
  const tables = pgExpectedColumns(n);
  return [
    n.schema,
    tables.map((t) => t.table),
    tables.map((t) => keys[t.qualified]!),
    tables.map((t) => t.columns.filter((c) => !later.has(`${t.qualified}.${c.name}`)).map((c) => c.name).join(',')),
  ];
}

/** Runs `FOREIGN_TABLE_SQL` (one round trip): a relation in the way, one line each (none: no such relation). */
export async function pgForeignTableProblems(db: PgQueryable, n: PgNames): Promise<string[]> {
  const { rows } = await pgQuery<{ problem: string }>(db, FOREIGN_TABLE_SQL, foreignTableValues(n));
  return rows.map((r) => r.problem);
}

/**
 * `pgForeignTableProblems` when migration 1 is not recorded (the bookkeeping table may be
 * missing), else none: for `--check` and start-up, which read without `migrate`'s lock.
 */
export async function pgForeignTableProblemsBeforeMigration(db: PgQueryable, n: PgNames): Promise<string[]> {
  const { rows } = await pgQuery<{ found: boolean }>(db, `SELECT to_regclass($1) IS NOT NULL AS found`, [n.migrations]);
  if (rows[0]!.found) {
    const { rows: first } = await pgQuery<{ recorded: boolean }>(db, `SELECT EXISTS (SELECT 1 FROM ${n.migrations} WHERE version = 1) AS recorded`);
    if (first[0]!.recorded) return [];
  }
  return pgForeignTableProblems(db, n);
}
