/**
 * `queuebox migrate --check` for PostgreSQL: what the database lacks for this release and
 * configuration, one line each, without changing anything — for a deploy pipeline.
 */
import { checkClaimFunctions } from './claim-function-install.ts';
import { claimFunctionName, type ClaimStatement } from './claim-functions.ts';
import { pgExpectedColumns, pgMigrations } from './migrations.ts';
import { quoteIdent, type PgNames } from './names.ts';
import { pgQuery, type PgQueryable } from './pg-pool.ts';
import { pgSchemaTrustProblems } from './schema-trust.ts';

/**
 * The differences between the database and what `migrate` would leave (none: up to date):
 * the schema missing or open to other roles (`schema-trust.ts`), a numbered migration not
 * recorded in `queuebox_migrations`, a missing table or column (with its `ALTER TABLE`), a claim
 * function of the configuration missing, another role's, or not QueueBox's definition, and what
 * changed by hand since a recorded migration ran: an index or named constraint missing, a column
 * of another type, nullability or without its default (`changedObjects`).
 * Migrations recorded by a newer release are not differences (expand, then contract:
 * docs/upgrading.md).
 */
export async function pgMigrateCheck(db: PgQueryable, n: PgNames, statements: readonly ClaimStatement[], batchSize: number): Promise<string[]> {
  const { rows: found } = await pgQuery<{ schema: boolean; migrations: boolean }>(db, 
    `SELECT to_regnamespace($1) IS NOT NULL AS schema, to_regclass($2) IS NOT NULL AS migrations`,
    [quoteIdent(n.schema), n.migrations],
  );
  if (!found[0]!.schema) return [`schema ${quoteIdent(n.schema)} does not exist: run \`queuebox migrate\` (or apply \`queuebox migrate --sql\`)`];
  const problems = await pgSchemaTrustProblems(db, n, statements.map(claimFunctionName));
  const done = new Set<number>();
  if (found[0]!.migrations) {
    const { rows } = await pgQuery<{ version: number }>(db, `SELECT version FROM ${n.migrations}`);
    for (const row of rows) done.add(row.version);
  } else {
    problems.push(`table ${n.migrations} does not exist: no migration was applied`);
  }
  for (const migration of pgMigrations) {
    if (!done.has(migration.version)) problems.push(`migration ${migration.version} (${migration.name}) is not applied`);
  }
  for (const line of await missingColumns(db, n)) problems.push(line.startsWith('-- ') ? line.slice(3) : `a column is missing: ${line}`);
  problems.push(...(await changedObjects(db, n, done)));
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

const TYPE_NAMES: Record<string, string> = { timestamptz: 'timestamp with time zone' };

/** `format_type`'s spelling of a type as the migrations write it (`varchar(255)`, `timestamptz`). */
function catalogType(type: string): string {
  return TYPE_NAMES[type] ?? type.replace(/^varchar\(/, 'character varying(');
}

/**
 * What the recorded migrations created that is no longer as they left it: an index (with its
 * `CREATE INDEX`) or a named constraint that is missing, a column of another type, nullability or
 * without its default (with the `ALTER TABLE`). Only what migrations in `done` create counts, less
 * the indexes any migration drops; a missing table or column is `missingColumns`'s.
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
      const created = /^CREATE (?:UNIQUE )?INDEX IF NOT EXISTS "([^"]+)" /.exec(line);
      if (created && applied) indexes.set(created[1]!, line);
      const dropped = /^DROP INDEX IF EXISTS "[^"]+"\."([^"]+)";$/.exec(line);
      if (dropped) indexes.delete(dropped[1]!);
      const constraint = /^ {2}CONSTRAINT "([^"]+)" /.exec(line);
      if (constraint && applied) constraints.set(constraint[1]!, { table, version: migration.version });
    }
  }
  const { rows } = await pgQuery<{ kind: string; name: string; table_name: string; type: string; not_null: boolean; has_default: boolean }>(db,
    `SELECT 'index' AS kind, c.relname AS name, '' AS table_name, '' AS type, false AS not_null, false AS has_default
       FROM pg_class c WHERE c.relnamespace = to_regnamespace($1) AND c.relkind = 'i' AND c.relname = ANY($2::text[])
     UNION ALL
     SELECT 'constraint', con.conname, '', '', false, false
       FROM pg_constraint con WHERE con.connamespace = to_regnamespace($1) AND con.conname = ANY($3::text[])
     UNION ALL
     SELECT 'column', a.attname, c.relname, format_type(a.atttypid, a.atttypmod), a.attnotnull, a.atthasdef
       FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
      WHERE c.relnamespace = to_regnamespace($1) AND c.relkind IN ('r', 'p') AND c.relname = ANY($4::text[]) AND a.attnum > 0 AND NOT a.attisdropped`,
    [quoteIdent(n.schema), [...indexes.keys()], [...constraints.keys()], [n.outboxTable, n.inboxTable, n.maintenanceTable]],
  );
  const found = (kind: string) => new Set(rows.filter((r) => r.kind === kind).map((r) => r.name));
  const problems: string[] = [];
  const foundIndexes = found('index');
  for (const [name, ddl] of indexes) if (!foundIndexes.has(name)) problems.push(`index ${quoteIdent(n.schema)}.${quoteIdent(name)} is missing: ${ddl}`);
  const foundConstraints = found('constraint');
  for (const [name, { table, version }] of constraints) {
    if (!foundConstraints.has(name)) problems.push(`constraint ${quoteIdent(name)} of table ${table} is missing (migration ${version} creates it)`);
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
