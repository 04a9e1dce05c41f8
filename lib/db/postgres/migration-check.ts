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
 * function of the configuration missing, another role's, or not QueueBox's definition.
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
