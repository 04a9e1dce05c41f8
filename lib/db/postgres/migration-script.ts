/**
 * `queuebox migrate --sql` for PostgreSQL: the whole schema of a configuration as one script, for
 * a team's own migration tool (Flyway, Liquibase, Knex, node-pg-migrate) or `psql`. No connection.
 *
 * The script does what `migrate` does, in the same order, and leaves the same bookkeeping, so a
 * later `queuebox migrate` or `queuebox migrate --check` agrees with it: the refusal of a database
 * whose encoding is not UTF8, the migrate lock, the
 * schema (created only when missing), the refusal of a schema other roles may create in (or of
 * objects they own under QueueBox's names), the refusal of a schema whose `queuebox_migrations`
 * records another table set's migrations (`migration-check.ts`), of a relation of a table's name
 * that is not QueueBox's (`foreign-tables.ts`), of an index name of a migration that another
 * relation holds and of an index of a migration left invalid (`migration-check.ts`), each
 * numbered migration not yet recorded in `queuebox_migrations` (guarded by its row, so a second
 * run changes nothing), then the claim functions of `outbox.batchSize`.
 * It does not drop claim functions of other batch sizes or releases (`migrate` does; they are
 * never called). Run it in one transaction: the lock is transaction-scoped, and a failure then
 * leaves nothing half-done (`psql -v ON_ERROR_STOP=1 --single-transaction -f …`; a migration
 * tool runs each file in a transaction of its own).
 */
import type { ClaimStatement } from './claim-functions.ts';
import { claimFunctionDdl, claimFunctionName } from './claim-functions.ts';
import { FOREIGN_TABLE_SQL, foreignTableValues } from './foreign-tables.ts';
import { INDEX_NAME_TAKEN_SQL, INVALID_INDEX_SQL, indexNameTakenValues, invalidIndexValues, tableSetSql, tableSetValues } from './migration-check.ts';
import { pgMigrations } from './migrations.ts';
import { quoteIdent, type PgNames } from './names.ts';
import { PATH_BEFORE_CATALOG_SQL, PIN_CATALOG_PATH_SQL, SCHEMA_TRUST_SQL, schemaTrustValues } from './schema-trust.ts';

/** The statement that serializes `migrate` runs (transaction-scoped: released at COMMIT). */
export const PG_MIGRATE_LOCK_SQL = `SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('queuebox.migrate'))`;

/** Whether schema `$1` exists (`migrate` creates it only when not: see `createSchemaBlock`). */
export const PG_SCHEMA_EXISTS_SQL = `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname OPERATOR(pg_catalog.=) $1::pg_catalog.name) AS found`;

/**
 * The schema, created only when it is missing: `CREATE SCHEMA IF NOT EXISTS` alone checks CREATE
 * on the database before it looks for the schema, and the schema's owner that docs/security.md
 * recommends migrating as usually has none (a DBA created the schema for it).
 */
function createSchemaBlock(n: PgNames): string {
  return `DO $queuebox_schema$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = ${literal(n.schema)}) THEN
    CREATE SCHEMA IF NOT EXISTS ${quoteIdent(n.schema)};
  END IF;
END
$queuebox_schema$;`;
}

/** `CREATE TABLE` of the bookkeeping table (`queuebox_migrations`). */
export function pgMigrationsTableSql(n: PgNames): string {
  return `CREATE TABLE IF NOT EXISTS ${n.migrations} (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`;
}

function literal(value: string): string {
  return `'${value.replaceAll("'", "''")}'`;
}

function textArray(values: readonly string[]): string {
  return `ARRAY[${values.map(literal).join(', ')}]::text[]`;
}

/**
 * A query of `migrate`'s with its parameters as literals: `$1` a name, the others text arrays
 * (`$2::text[]`…). `migrate` binds them; a script has no parameters.
 */
function withLiterals(sql: string, [first, ...arrays]: readonly [string, ...Array<readonly string[]>]): string {
  let query = sql.replaceAll('$1', literal(first));
  for (const [index, values] of arrays.entries()) query = query.replaceAll(`$${index + 2}::text[]`, textArray(values));
  return query;
}

/**
 * `migrate`'s refusals of a schema whose bookkeeping records another table set's migrations, of a
 * relation of a table's name that is not QueueBox's table (before migration 1 is recorded), of an
 * index name of a migration that another relation holds and of an invalid index of a migration,
 * as a block that raises the same lines.
 */
function refusalBlock(n: PgNames): string {
  // `migrate` binds the versions it read from queuebox_migrations; the script reads them there.
  const [schema, names, tables, versions, ddl] = indexNameTakenValues(n, new Set());
  const taken = withLiterals(INDEX_NAME_TAKEN_SQL.replaceAll('$6::text[]', `ARRAY(SELECT version::text FROM ${n.migrations})`), [schema, names, tables, versions, ddl]);
  return `DO $queuebox_refusals$
DECLARE refusals text;
BEGIN
  SELECT string_agg(problem, E'\\n') INTO refusals FROM (${withLiterals(tableSetSql(n), tableSetValues(n))}) other_set;
  IF refusals IS NULL AND NOT EXISTS (SELECT 1 FROM ${n.migrations} WHERE version = 1) THEN
    SELECT string_agg(problem, E'\\n') INTO refusals FROM (${withLiterals(FOREIGN_TABLE_SQL, foreignTableValues(n))}) foreign_tables;
  END IF;
  IF refusals IS NULL THEN
    SELECT string_agg(problem, E'\\n') INTO refusals FROM (${taken}) taken;
  END IF;
  IF refusals IS NULL THEN
    SELECT string_agg(problem, E'\\n') INTO refusals FROM (${withLiterals(INVALID_INDEX_SQL, invalidIndexValues(n))}) invalid;
  END IF;
  IF refusals IS NOT NULL THEN
    RAISE EXCEPTION 'QueueBox refuses to migrate schema %: %', ${literal(n.schema)}, refusals;
  END IF;
END
$queuebox_refusals$;`;
}

/**
 * The refusal of a `search_path` that puts another schema before `pg_catalog`, before anything
 * else runs: each later block calls functions and operators that such a schema could stand in for.
 * Every call in it is `pg_catalog.`-qualified.
 */
function pathCheckBlock(n: PgNames): string {
  return `DO $queuebox_path$
DECLARE before pg_catalog.text;
BEGIN
  -- First and alone: a schema before pg_catalog could stand in for the functions the check calls.
  SELECT pg_catalog.string_agg(schema, ', ') INTO before FROM (${PATH_BEFORE_CATALOG_SQL}) path;
  IF before IS NOT NULL THEN
    RAISE EXCEPTION 'QueueBox refuses to use schema %: the search_path puts % before pg_catalog, so a function or operator there would stand in for PostgreSQL''s own; put pg_catalog first (or leave it out of the search_path)', ${literal(n.schema)}, before;
  END IF;
END
$queuebox_path$;`;
}

/** The schema trust check (`schema-trust.ts`) as a block that raises when it finds a problem. */
function trustCheckBlock(n: PgNames, functionNames: readonly string[]): string {
  // The query binds $1..$4 in `migrate`; here they are literals (validated identifiers, quoted).
  // The session's search_path is read first, into `session_path` ($5), then pinned to
  // pg_catalog for the check (`schema-trust.ts`, withCatalogPath), and put back after it.
  const query = withLiterals(SCHEMA_TRUST_SQL, schemaTrustValues(n, functionNames)).replace('$5::name[]', 'session_path');
  return `DO $queuebox_check$
DECLARE
  problems pg_catalog.text;
  session_path pg_catalog.name[] := pg_catalog.current_schemas(false);
  old_path pg_catalog.text := pg_catalog.current_setting('search_path');
BEGIN
  PERFORM ${PIN_CATALOG_PATH_SQL.slice('SELECT '.length)};
  SELECT string_agg(problem, E'\\n') INTO problems FROM (${query}) checked;
  PERFORM pg_catalog.set_config('search_path', old_path, true);
  IF problems IS NOT NULL THEN
    RAISE EXCEPTION 'QueueBox refuses to use schema %: another role could plant objects that run with QueueBox''s rights (see docs/security.md, "Schema ownership")', ${literal(n.schema)}
      USING DETAIL = problems;
  END IF;
END
$queuebox_check$;`;
}

/**
 * The refusal of a database whose encoding is not UTF8 (`serverEncodingProblem`), first: such a
 * database would take the schema and then fail on a statement whose text or values it cannot
 * hold (LATIN1), or store bodies it garbles (SQL_ASCII).
 */
function encodingCheckBlock(): string {
  return `DO $queuebox_encoding$
BEGIN
  IF pg_catalog.current_setting('server_encoding') OPERATOR(pg_catalog.<>) 'UTF8' THEN
    RAISE EXCEPTION 'migrate refused, nothing changed: the database''s encoding is % (server_encoding), and QueueBox needs UTF8: it stores message bodies (JSON) and names of any Unicode text; create the database with ENCODING ''UTF8'' (CREATE DATABASE <name> ENCODING ''UTF8'' TEMPLATE template0) and run the script there',
      pg_catalog.current_setting('server_encoding');
  END IF;
END
$queuebox_encoding$;`;
}

/** The script (see the module comment); `statements` are the configuration's claim statements. */
export function pgMigrationScript(n: PgNames, statements: readonly ClaimStatement[], header: readonly string[] = []): string {
  const parts = [
    ...header.map((line) => `-- ${line}`),
    pathCheckBlock(n),
    encodingCheckBlock(),
    `DO $queuebox_lock$ BEGIN PERFORM ${PG_MIGRATE_LOCK_SQL.slice('SELECT '.length)}; END $queuebox_lock$;`,
    createSchemaBlock(n),
    trustCheckBlock(n, statements.map(claimFunctionName)),
    `${pgMigrationsTableSql(n)};`,
    refusalBlock(n),
  ];
  for (const migration of pgMigrations) {
    const sql = migration.sql(n);
    if (sql.includes('$queuebox_sql$')) throw new Error(`migration ${migration.version} cannot contain the script's quote`);
    parts.push(`-- migration ${migration.version}: ${migration.name}
DO $queuebox_migration$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM ${n.migrations} WHERE version = ${migration.version}) THEN
    EXECUTE $queuebox_sql$${sql}$queuebox_sql$;
    INSERT INTO ${n.migrations} (version, name) VALUES (${migration.version}, ${literal(migration.name)});
  END IF;
END
$queuebox_migration$;`);
  }
  if (statements.length > 0) parts.push('-- claim functions of this configuration (docs/operations.md, "Claim functions")');
  for (const statement of statements) parts.push(claimFunctionDdl(n, statement));
  return `${parts.join('\n\n')}\n`;
}
