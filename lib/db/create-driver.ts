/**
 * Builds the driver the configuration names. Call once per container (outside the handler).
 */
import type { QueueBoxConfig } from '../config/schema.ts';
import { requireSecret } from '../config/load-config.ts';
import { ConfigError } from '../errors.ts';
import { importOptional } from '../optional-package.ts';
import type { Driver } from './driver.ts';
import { PostgresDriver } from './postgres/postgres-driver.ts';

/** Resolves `database.url` / `database.urlEnv`; throws `ConfigError` naming the key when absent. */
export function resolveDatabaseUrl(config: Pick<QueueBoxConfig, 'database'>, env: Readonly<Record<string, string | undefined>> = process.env): string {
  if (config.database.url !== undefined) return config.database.url;
  if (config.database.urlEnv !== undefined) return requireSecret(env, config.database.urlEnv, 'database.urlEnv');
  throw new ConfigError([{ key: 'database.url', message: 'is required (or database.urlEnv, QUEUEBOX_DATABASE_URL, DATABASE_URL)' }]);
}

export async function createDriver(config: QueueBoxConfig, env: Readonly<Record<string, string | undefined>> = process.env): Promise<Driver> {
  const url = resolveDatabaseUrl(config, env);
  if (config.database.type === 'sqlserver') {
    const { SqlServerDriver } = await importOptional('mssql', 'database.type: sqlserver', () => import('./sqlserver/sqlserver-driver.ts'));
    return new SqlServerDriver({ config, url });
  }
  return new PostgresDriver({ config, url });
}
