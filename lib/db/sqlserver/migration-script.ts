/**
 * `queuebox migrate --sql` for SQL Server: the whole schema of a configuration as one `sqlcmd`
 * script (batches separated by `GO`), for a team's own migration tool. No connection.
 *
 * Same order and bookkeeping as `migrate`, in one transaction of its own (`SET XACT_ABORT ON`,
 * `BEGIN TRANSACTION` … `COMMIT`; inside a migration tool's transaction it nests): the migrate
 * lock (owned by the transaction), the schema and `queuebox_migrations`, then each
 * statement of each numbered migration, run only while that migration is not recorded (so a
 * second run changes nothing), and its row. Each statement runs through `EXEC` as a batch of its
 * own, as `migrate` runs it.
 */
import { MIGRATE_LOCK_SQL, migrationsTableSql, mssqlMigrations } from './migrations.ts';
import type { MssqlNames } from './names.ts';

function nliteral(text: string): string {
  return `N'${text.replaceAll("'", "''")}'`;
}

/** The script (see the module comment), each batch followed by `GO`. */
export function mssqlMigrationScript(n: MssqlNames, header: readonly string[] = []): string {
  const batches: string[] = [`SET XACT_ABORT ON;\nBEGIN TRANSACTION;\n${MIGRATE_LOCK_SQL}`, ...migrationsTableSql(n)];
  for (const migration of mssqlMigrations) {
    const pending = `NOT EXISTS (SELECT 1 FROM ${n.migrations} WHERE version = ${migration.version})`;
    for (const statement of migration.statements(n)) batches.push(`-- migration ${migration.version}: ${migration.name}\nIF ${pending}\n  EXEC(${nliteral(statement)});`);
    batches.push(`IF ${pending}\n  INSERT INTO ${n.migrations} (version, name) VALUES (${migration.version}, ${nliteral(migration.name)});`);
  }
  batches.push('COMMIT TRANSACTION;');
  return `${header.map((line) => `-- ${line}\n`).join('')}${batches.map((batch) => `${batch}\nGO\n`).join('\n')}`;
}
