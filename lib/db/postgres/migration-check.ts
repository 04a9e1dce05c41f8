/**
 * `queuebox migrate --check` for PostgreSQL: what the database lacks for this release and
 * configuration, one line each, without changing anything — for a deploy pipeline.
 */
import { checkClaimFunctions } from './claim-function-install.ts';
import { claimFunctionName, type ClaimStatement } from './claim-functions.ts';
import { pgExpectedColumns, pgMigrations } from './migrations.ts';
import { quoteIdent, type PgNames } from './names.ts';
import { pgQuery, type PgQueryable } from './pg-pool.ts';
import { PG_SERVER_ENCODING_SQL, pgSchemaTrustProblems, serverEncodingProblem } from './schema-trust.ts';

/**
 * The differences between the database and what `migrate` would leave (none: up to date):
 * a database whose encoding is not UTF8 (that line alone: `migrate` refuses it), the schema missing or open to other roles (`schema-trust.ts`), a numbered migration not
 * recorded in `queuebox_migrations`, a missing table or column (with its `ALTER TABLE`), a claim
 * function of the configuration missing, another role's, or not QueueBox's definition, and what
 * changed by hand since a recorded migration ran: an index or named constraint missing, a column
 * of another type, nullability or without its default (`changedObjects`), the name of an index
 * of a migration held by another table's index (or another relation: `pgIndexNameTakenProblems`,
 * which `migrate` refuses), an index of a migration left invalid (`pgInvalidIndexProblems`). A
 * schema whose bookkeeping records another table set's migrations (`pgTableSetProblem`) is that
 * one line (and the trust problems): `migrate` refuses it, so the rest would only mislead.
 * Migrations recorded by a newer release are not differences (expand, then contract:
 * docs/upgrading.md).
 */
export async function pgMigrateCheck(db: PgQueryable, n: PgNames, statements: readonly ClaimStatement[], batchSize: number): Promise<string[]> {
  // A database that is not UTF8 is that one line: `migrate` refuses it before anything else.
  const { rows: encoding } = await pgQuery<{ encoding: string }>(db, PG_SERVER_ENCODING_SQL);
  const wrongEncoding = serverEncodingProblem(encoding[0]!.encoding);
  if (wrongEncoding !== undefined) return [wrongEncoding];
  const { rows: found } = await pgQuery<{ schema: boolean; migrations: boolean }>(db, 
    `SELECT pg_catalog.to_regnamespace($1) IS NOT NULL AS schema, pg_catalog.to_regclass($2) IS NOT NULL AS migrations`,
    [quoteIdent(n.schema), n.migrations],
  );
  if (!found[0]!.schema) return [`schema ${quoteIdent(n.schema)} does not exist: run \`queuebox migrate\` (or apply \`queuebox migrate --sql\`)`];
  const problems = await pgSchemaTrustProblems(db, n, statements.map(claimFunctionName));
  const done = new Set<number>();
  if (found[0]!.migrations) {
    const { rows } = await pgQuery<{ version: number }>(db, `SELECT version FROM ${n.migrations}`);
    for (const row of rows) done.add(row.version);
    const otherSet = done.size > 0 ? await pgTableSetProblem(db, n) : undefined;
    if (otherSet !== undefined) return [...problems, otherSet];
  } else {
    problems.push(`table ${n.migrations} does not exist: no migration was applied`);
  }
  for (const migration of pgMigrations) {
    if (!done.has(migration.version)) problems.push(`migration ${migration.version} (${migration.name}) is not applied`);
  }
  for (const line of await missingColumns(db, n)) problems.push(line.startsWith('-- ') ? line.slice(3) : `a column is missing: ${line}`);
  problems.push(...(await changedObjects(db, n, done)));
  problems.push(...(await pgIndexNameTakenProblems(db, n, done)));
  problems.push(...(await pgInvalidIndexProblems(db, n)));
  const verdicts = await checkClaimFunctions(db, n, statements);
  for (const [index, verdict] of verdicts.entries()) {
    const name = `${n.schema}.${claimFunctionName(statements[index]!)}`;
    if (verdict.status === 'missing') {
      problems.push(`claim function ${name} (outbox.batchSize ${batchSize}) is missing: claims send their statement until \`queuebox migrate\` creates it`);
    } else if (verdict.status !== 'usable') {
      problems.push(verdict.detail);
    }
  }
  return [...new Set(problems)];
}

/** A missing table, or a missing column with the `ALTER TABLE` that adds it. */
export async function missingColumns(db: PgQueryable, n: PgNames): Promise<string[]> {
  const { rows } = await pgQuery<{ table_name: string; column_name: string }>(db, 
    `SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = $1 AND table_name = ANY($2::text[])`,
    [n.schema, [n.outboxTable, n.inboxTable, n.maintenanceTable]],
  );
  const present = new Set(rows.map((r) => `${r.table_name}.${r.column_name}`));
  const tables = new Set(rows.map((r) => r.table_name));
  const statements: string[] = [];
  for (const table of pgExpectedColumns(n)) {
    if (!tables.has(table.table)) {
      statements.push(`-- table ${table.qualified} does not exist: run \`queuebox migrate\``);
      continue;
    }
    for (const column of table.columns) {
      if (!present.has(`${table.table}.${column.name}`)) statements.push(`ALTER TABLE ${table.qualified} ADD COLUMN ${quoteIdent(column.name)} ${column.ddl};`);
    }
  }
  return statements;
}

/** A migration's line that creates an index (its name and its table, qualified), and one that drops an index. */
const CREATE_INDEX_LINE = /^CREATE (?:UNIQUE )?INDEX IF NOT EXISTS "([^"]+)" ON (\S+) /;
const DROP_INDEX_LINE = /^DROP INDEX IF EXISTS "[^"]+"\."([^"]+)";$/;

const TYPE_NAMES: Record<string, string> = { timestamptz: 'timestamp with time zone' };

/** `format_type`'s spelling of a type as the migrations write it (`varchar(255)`, `timestamptz`). */
function catalogType(type: string): string {
  return TYPE_NAMES[type] ?? type.replace(/^varchar\(/, 'character varying(');
}

/**
 * What the recorded migrations created that is no longer as they left it: an index missing (with
 * its `CREATE INDEX`), a named constraint that is missing or sits on another table than its
 * migration's, a column of another type, nullability or without its default (with the `ALTER
 * TABLE`). Only what migrations in `done` create counts, less the indexes any migration drops; a
 * missing table or column is `missingColumns`'s. An index whose name another table's index (or
 * another relation) holds is not missing but taken: `pgIndexNameTakenProblems` names it, as
 * `migrate` refuses it.
 */
export async function changedObjects(db: PgQueryable, n: PgNames, done: ReadonlySet<number>): Promise<string[]> {
  const indexes = new Map<string, string>();
  const constraints = new Map<string, { table: string; version: number }>();
  // An index a later migration drops is not required either, applied or not (it goes anyway).
  for (const migration of pgMigrations) {
    const applied = done.has(migration.version);
    let table = '';
    for (const line of migration.sql(n).split('\n')) {
      table = /^CREATE TABLE IF NOT EXISTS (\S+) \($/.exec(line)?.[1] ?? table;
      const created = CREATE_INDEX_LINE.exec(line);
      if (created && applied) indexes.set(created[1]!, line);
      const dropped = DROP_INDEX_LINE.exec(line);
      if (dropped) indexes.delete(dropped[1]!);
      const constraint = /^ {2}CONSTRAINT "([^"]+)" /.exec(line);
      if (constraint && applied) constraints.set(constraint[1]!, { table, version: migration.version });
    }
  }
  const { rows } = await pgQuery<{ kind: string; name: string; table_name: string; type: string; not_null: boolean; has_default: boolean }>(db,
    `SELECT 'index' AS kind, c.relname AS name, COALESCE(t.relname, '') AS table_name, '' AS type, false AS not_null, false AS has_default
       FROM pg_class c LEFT JOIN pg_index i ON i.indexrelid = c.oid LEFT JOIN pg_class t ON t.oid = i.indrelid
      WHERE c.relnamespace = to_regnamespace($1) AND c.relname = ANY($2::text[])
     UNION ALL
     SELECT 'constraint', con.conname, COALESCE(t.relname, ''), '', false, false
       FROM pg_constraint con LEFT JOIN pg_class t ON t.oid = con.conrelid
      WHERE con.connamespace = to_regnamespace($1) AND con.conname = ANY($3::text[])
     UNION ALL
     SELECT 'column', a.attname, c.relname, format_type(a.atttypid, a.atttypmod), a.attnotnull, a.atthasdef
       FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
      WHERE c.relnamespace = to_regnamespace($1) AND c.relkind IN ('r', 'p') AND c.relname = ANY($4::text[]) AND a.attnum > 0 AND NOT a.attisdropped`,
    [quoteIdent(n.schema), [...indexes.keys()], [...constraints.keys()], [n.outboxTable, n.inboxTable, n.maintenanceTable]],
  );
  // The qualified names the migrations write, and the table each names; another table's, as the catalog spells it.
  const tableOf: Record<string, string> = { [n.outbox]: n.outboxTable, [n.inbox]: n.inboxTable, [n.maintenance]: n.maintenanceTable };
  const qualified = (table: string) => `${quoteIdent(n.schema)}."${table.replaceAll('"', '""')}"`;
  /** The tables an object of `name` of `kind` is on. */
  const on = (kind: string, name: string) => rows.filter((r) => r.kind === kind && r.name === name).map((r) => r.table_name);
  const problems: string[] = [];
  // A relation of the name (another table's index, a table…) is the taken name of `pgIndexNameTakenProblems`, not a missing index.
  for (const [name, ddl] of indexes) {
    if (on('index', name).length === 0) problems.push(`index ${quoteIdent(n.schema)}.${quoteIdent(name)} is missing: ${ddl}`);
  }
  for (const [name, { table, version }] of constraints) {
    const tables = on('constraint', name);
    if (tables.length === 0) {
      problems.push(`constraint ${quoteIdent(name)} of table ${table} is missing (migration ${version} creates it)`);
    } else if (!tables.includes(tableOf[table] ?? table)) {
      problems.push(`constraint ${quoteIdent(name)} of table ${table} is on table ${tables.map((t) => (t === '' ? 'none (a constraint of a domain)' : qualified(t))).join(', ')} instead (migration ${version} creates it on ${table}): ${table} goes without it`);
    }
  }
  const columns = new Map(rows.filter((r) => r.kind === 'column').map((r) => [`${r.table_name}.${r.name}`, r]));
  for (const table of pgExpectedColumns(n)) {
    for (const column of table.columns) {
      const row = columns.get(`${table.table}.${column.name}`);
      const [, type, nullability, defaultExpr] = /^(.+?) (NOT NULL|NULL)(?: DEFAULT (.+))?$/.exec(column.ddl) ?? [];
      if (row === undefined || type === undefined) continue;
      const alter = `ALTER TABLE ${table.qualified} ALTER COLUMN ${quoteIdent(column.name)}`;
      const fixes: string[] = [];
      if (row.type !== catalogType(type)) fixes.push(`${alter} TYPE ${type};`);
      if (row.not_null !== (nullability === 'NOT NULL')) fixes.push(`${alter} ${row.not_null ? 'DROP' : 'SET'} NOT NULL;`);
      if (defaultExpr !== undefined && !row.has_default) fixes.push(`${alter} SET DEFAULT ${defaultExpr};`);
      if (fixes.length > 0) problems.push(`column ${table.qualified}.${quoteIdent(column.name)} is not ${column.ddl}: ${fixes.join(' ')}`);
    }
  }
  return problems;
}

/** An index a migration creates: the `CREATE INDEX IF NOT EXISTS` line, the table's name (unqualified) and the migration's version. */
interface MigrationIndex {
  ddl: string;
  table: string;
  version: number;
}

/**
 * Every index the migrations leave once all of them ran (created, and not dropped by a later
 * one), by name.
 */
function migrationIndexes(n: PgNames): Map<string, MigrationIndex> {
  const tableOf: Record<string, string> = { [n.outbox]: n.outboxTable, [n.inbox]: n.inboxTable, [n.maintenance]: n.maintenanceTable };
  const indexes = new Map<string, MigrationIndex>();
  for (const migration of pgMigrations) {
    for (const line of migration.sql(n).split('\n')) {
      const created = CREATE_INDEX_LINE.exec(line);
      if (created) indexes.set(created[1]!, { ddl: line, table: tableOf[created[2]!] ?? created[2]!, version: migration.version });
      const dropped = DROP_INDEX_LINE.exec(line);
      if (dropped) indexes.delete(dropped[1]!);
    }
  }
  return indexes;
}

/**
 * SQL: one row (`problem`) per index of a migration that exists but is invalid (`NOT
 * pg_index.indisvalid`), with the statements that rebuild it. `$1` the schema, `$2` the index
 * names, `$3` the statements for each. A `CREATE INDEX CONCURRENTLY` (or `REINDEX CONCURRENTLY`)
 * that failed leaves its index so, and one still running shows it so: the planner never uses it,
 * while `CREATE INDEX IF NOT EXISTS` takes it for built. `migrate` (and the `--sql` script)
 * refuse to run over one rather than rebuild it: the index was built concurrently to keep a
 * large, live table writable, and migrate, one transaction, could only rebuild it the blocking
 * way — `DROP INDEX` holds the table's `ACCESS EXCLUSIVE` lock to `COMMIT`, so reads wait too,
 * while the build reads the whole table — at a deploy that announced no index build. The
 * concurrent statements cannot run in a transaction: the refusal names them, to run by hand.
 * (Names are quoted by hand here and in `tableSetSql`: the configuration's are validated
 * identifiers, as `quoteIdent` prints them.)
 */
export const INVALID_INDEX_SQL = `SELECT 'index "' || $1 || '"."' || want.name || '"'
       || ' is invalid, left by a CREATE INDEX CONCURRENTLY (or REINDEX CONCURRENTLY) that failed or is still running: queries never use it, and migrate refuses to run over it (it would take it for built); once no build of it runs, rebuild it without blocking writes, one statement at a time outside a transaction: '
       || want.fix AS problem
  FROM unnest($2::text[], $3::text[]) WITH ORDINALITY AS want(name, fix, ord)
  JOIN pg_namespace ns ON ns.nspname = $1
  JOIN pg_class c ON c.relnamespace = ns.oid AND c.relname = want.name AND c.relkind = 'i'
  JOIN pg_index i ON i.indexrelid = c.oid
 WHERE NOT i.indisvalid
 ORDER BY want.ord`;

/** The values of `INVALID_INDEX_SQL`'s parameters: the migrations' indexes and, for each, the concurrent `DROP` and `CREATE`. */
export function invalidIndexValues(n: PgNames): [string, string[], string[]] {
  const indexes = [...migrationIndexes(n)];
  const fixes = indexes.map(([name, { ddl }]) => `DROP INDEX CONCURRENTLY IF EXISTS ${quoteIdent(n.schema)}.${quoteIdent(name)}; ${ddl.replace(' INDEX IF NOT EXISTS ', ' INDEX CONCURRENTLY IF NOT EXISTS ')}`);
  return [n.schema, indexes.map(([name]) => name), fixes];
}

/** Runs `INVALID_INDEX_SQL` (one round trip): an invalid index of a migration, one line each (none: all valid or absent). */
export async function pgInvalidIndexProblems(db: PgQueryable, n: PgNames): Promise<string[]> {
  const { rows } = await pgQuery<{ problem: string }>(db, INVALID_INDEX_SQL, invalidIndexValues(n));
  return rows.map((r) => r.problem);
}

/**
 * SQL: one row (`problem`) per index of a migration whose name another relation of the schema
 * holds: an index on another table than the migration's, or a table, view, sequence… of the name.
 * PostgreSQL names indexes per schema, and the migration's `CREATE INDEX IF NOT EXISTS` skips the
 * index when any relation has its name, leaving the migration's table without it (a claim without
 * its index reads far more rows). Such a name is left by hand, or by a schema migrated under a
 * configuration whose table names shared derived names (`tables.inbox: app` with
 * `tables.outbox: app_push`), refused at load since. `migrate` (and the `--sql` script) refuse to
 * run while one is there, and `--check` names it, with the same line: the relation to rename or
 * drop, then, when the index's migration is still to run, migrate again, or, when it is recorded
 * (`migrate` does not run it again), the `CREATE INDEX` to run too. `$1` the schema, `$2` the
 * index names, `$3` the table each belongs to, `$4` the version of the migration that creates
 * each, `$5` each one's `CREATE INDEX`, `$6` the versions `queuebox_migrations` records
 * (`indexNameTakenValues`; the `--sql` script reads them from the table instead).
 * SQL Server names an index per table, so another table's index of the name takes nothing from
 * QueueBox's table there: this check is PostgreSQL's only.
 */
export const INDEX_NAME_TAKEN_SQL = `SELECT CASE WHEN t.oid IS NOT NULL
              THEN 'index "' || $1 || '"."' || want.name || '" is on table "' || $1 || '"."' || replace(t.relname, '"', '""') || '", not '
              ELSE 'relation "' || $1 || '"."' || want.name || '" is a ' || holder.kind || ', not an index of ' END
       || own.qualified || ': migration ' || want.version
       || CASE WHEN own.recorded THEN ' found the name taken and skipped the index of ' || own.qualified || ', which goes without it'
               ELSE ' would find the name taken and skip the index of ' || own.qualified || ', which would go without it' END
       || '; rename or drop that ' || holder.kind || ' (ALTER ' || holder.keyword || ' "' || $1 || '"."' || want.name || '" RENAME TO ' || pg_catalog.chr(8230) || '), then '
       || CASE WHEN own.recorded THEN 'create the index (migration ' || want.version || ' is recorded, so migrate does not run it again) and migrate again: ' || want.ddl
               ELSE 'migrate again' END AS problem
  FROM unnest($2::text[], $3::text[], $4::text[], $5::text[]) WITH ORDINALITY AS want(name, table_name, version, ddl, ord)
  JOIN pg_namespace ns ON ns.nspname = $1
  JOIN pg_class c ON c.relnamespace = ns.oid AND c.relname = want.name
  LEFT JOIN pg_index i ON i.indexrelid = c.oid
  LEFT JOIN pg_class t ON t.oid = i.indrelid
  CROSS JOIN LATERAL (SELECT '"' || $1 || '"."' || want.table_name || '"' AS qualified, want.version = ANY($6::text[]) AS recorded) own
  CROSS JOIN LATERAL (SELECT CASE c.relkind WHEN 'i' THEN 'index' WHEN 'I' THEN 'index' WHEN 'r' THEN 'table' WHEN 'p' THEN 'table' WHEN 'v' THEN 'view'
                                            WHEN 'm' THEN 'materialized view' WHEN 'S' THEN 'sequence' WHEN 'f' THEN 'foreign table' WHEN 'c' THEN 'composite type' ELSE 'relation' END AS kind,
                             CASE c.relkind WHEN 'i' THEN 'INDEX' WHEN 'I' THEN 'INDEX' WHEN 'v' THEN 'VIEW' WHEN 'm' THEN 'MATERIALIZED VIEW' WHEN 'S' THEN 'SEQUENCE'
                                            WHEN 'f' THEN 'FOREIGN TABLE' WHEN 'c' THEN 'TYPE' ELSE 'TABLE' END AS keyword) holder
 WHERE t.relname IS DISTINCT FROM want.table_name
 ORDER BY want.ord`;

/**
 * The values of `INDEX_NAME_TAKEN_SQL`'s parameters: the migrations' indexes, each with its table,
 * migration and `CREATE INDEX`, and `recorded`, the versions `queuebox_migrations` records.
 */
export function indexNameTakenValues(n: PgNames, recorded: ReadonlySet<number>): [string, string[], string[], string[], string[], string[]] {
  const indexes = [...migrationIndexes(n)];
  return [
    n.schema,
    indexes.map(([name]) => name),
    indexes.map(([, index]) => index.table),
    indexes.map(([, index]) => String(index.version)),
    indexes.map(([, index]) => index.ddl),
    [...recorded].map(String),
  ];
}

/**
 * Runs `INDEX_NAME_TAKEN_SQL` (one round trip): an index of a migration whose name another
 * relation holds, one line each (none: every name free or the migration's own); `recorded` the
 * versions `queuebox_migrations` records.
 */
export async function pgIndexNameTakenProblems(db: PgQueryable, n: PgNames, recorded: ReadonlySet<number>): Promise<string[]> {
  const { rows } = await pgQuery<{ problem: string }>(db, INDEX_NAME_TAKEN_SQL, indexNameTakenValues(n, recorded));
  return rows.map((r) => r.problem);
}

/**
 * SQL: one row (`problem`) when the schema's `queuebox_migrations` records migrations while a
 * table of this configuration does not exist. The bookkeeping is per schema and keyed on the
 * version only, so a second configuration in the schema with other `tables.*` finds every version
 * recorded: `migrate` would create none of its tables, and start-up and `--check` would keep
 * asking for `migrate`. The line names the other set's tables (by their columns: an outbox, an
 * inbox, a maintenance table not of this configuration), or says none was found. `$1` the
 * schema, `$2` this configuration's tables (outbox, inbox, maintenance); the bookkeeping table
 * must exist.
 */
export function tableSetSql(n: PgNames): string {
  return `WITH recorded AS (SELECT count(*) AS count, max(version) AS last FROM ${n.migrations}),
     own AS (SELECT t.name, t.ord FROM unnest($2::text[]) WITH ORDINALITY AS t(name, ord)),
     missing AS (
       SELECT string_agg('"' || $1 || '"."' || own.name || '"', ', ' ORDER BY own.ord) AS list, count(*) AS count
         FROM own
        WHERE NOT EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace
                           WHERE ns.nspname = $1 AND c.relname = own.name AND c.relkind IN ('r', 'p'))),
     others AS (
       SELECT string_agg(found.kind || ': ' || found.relname, ', ' ORDER BY found.ord, found.relname) AS list FROM (
         SELECT c.relname::text AS relname,
                CASE WHEN bool_or(a.attname = 'topic') THEN 'tables.outbox' WHEN bool_or(a.attname = 'idempotency_key') THEN 'tables.inbox' ELSE 'tables.maintenance' END AS kind,
                CASE WHEN bool_or(a.attname = 'topic') THEN 1 WHEN bool_or(a.attname = 'idempotency_key') THEN 2 ELSE 3 END AS ord
           FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace
           JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
          WHERE ns.nspname = $1 AND c.relkind IN ('r', 'p') AND c.relname <> ALL ($2::text[])
          GROUP BY c.relname
         HAVING count(*) FILTER (WHERE a.attname IN ('topic', 'payload', 'claim_token', 'lease_expires_at', 'sequence')) = 5
             OR count(*) FILTER (WHERE a.attname IN ('source', 'idempotency_key', 'consumption', 'claim_token')) = 4
             OR (count(*) = 2 AND count(*) FILTER (WHERE a.attname IN ('name', 'last_run_at')) = 2)) found)
SELECT 'schema "' || $1 || '"''s queuebox_migrations already records migrations (up to version ' || recorded.last || ') while this configuration''s '
       || CASE WHEN missing.count = 1 THEN 'table ' ELSE 'tables ' END || missing.list || CASE WHEN missing.count = 1 THEN ' does' ELSE ' do' END || ' not exist: '
       || CASE WHEN others.list IS NOT NULL THEN 'they are the migrations of other QueueBox tables in the schema (' || others.list || '), and migrate would create none of this configuration''s'
               ELSE 'no other QueueBox table was found in the schema to name (dropped or renamed by hand?), and migrate would create none of them' END
       || '. One schema holds one QueueBox table set (queuebox_migrations records versions, not tables): use another database.schema for this configuration'
       || CASE WHEN others.list IS NOT NULL THEN ', or set its tables.* to those names if it is meant to use those tables'
               WHEN missing.count = cardinality($2::text[]) THEN ', or, if no other configuration uses this schema, DROP TABLE "' || $1 || '".queuebox_migrations and migrate again'
               ELSE '' END AS problem
  FROM recorded, missing, others
 WHERE recorded.count > 0 AND missing.count > 0`;
}

/** The values of `tableSetSql`'s parameters. */
export function tableSetValues(n: PgNames): [string, string[]] {
  return [n.schema, [n.outboxTable, n.inboxTable, n.maintenanceTable]];
}

/** Runs `tableSetSql` (one round trip; `queuebox_migrations` must exist): the problem, if any. */
export async function pgTableSetProblem(db: PgQueryable, n: PgNames): Promise<string | undefined> {
  const { rows } = await pgQuery<{ problem: string }>(db, tableSetSql(n), tableSetValues(n));
  return rows[0]?.problem;
}
