/**
 * `queuebox migrate --sql`: the DDL `migrate` applies for a configuration, printed for a team's own
 * migration tool, computed without a database connection (PostgreSQL or SQL Server by
 * `database.type`).
 */
import { outboxRowsPerKey, type QueueBoxConfig } from '../config/schema.ts';
import { pgMigrationScript } from './postgres/migration-script.ts';
import { pgNames } from './postgres/names.ts';
import { pgClaimStatements } from './postgres/postgres-driver.ts';
import { mssqlMigrationScript } from './sqlserver/migration-script.ts';
import { MSSQL_DEFAULT_SCHEMA, mssqlNames } from './sqlserver/names.ts';

/** The script for `config`; `header` lines become comments at its top. */
export function migrationScript(config: Pick<QueueBoxConfig, 'database' | 'tables' | 'outbox'>, header: readonly string[] = []): string {
  if (config.database.type === 'sqlserver') {
    return mssqlMigrationScript(mssqlNames(config.database.schema ?? MSSQL_DEFAULT_SCHEMA, config.tables), header);
  }
  const names = pgNames(config.database.schema ?? 'public', config.tables);
  const rowsPerKey = outboxRowsPerKey(config);
  const statements = pgClaimStatements(names, { claimFunctions: config.database.claimFunctions !== false, batchSize: config.outbox.batchSize, rowsPerKey });
  return pgMigrationScript(names, statements, [...header, `PostgreSQL schema ${names.schema}, outbox.batchSize ${config.outbox.batchSize}, outbox.rowsPerKey ${rowsPerKey}`]);
}
