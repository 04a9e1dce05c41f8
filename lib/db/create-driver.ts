/**
 * Builds the driver the configuration names. Call once per container (outside the handler). A
 * PostgreSQL driver runs the start-up check (`schemaVerify`) before its first claim, unless it
 * passed already.
 */
import { databaseUrlProblem, type QueueBoxConfig } from '../config/schema.ts';
import { requireSecret } from '../config/load-config.ts';
import { shownVariable } from '../config/looks-like-secret.ts';
import { ConfigError } from '../errors.ts';
import { importOptional } from '../optional-package.ts';
import type { Driver } from './driver.ts';
import { PostgresDriver } from './postgres/postgres-driver.ts';

/**
 * Resolves `database.url` / `database.urlEnv`; throws `ConfigError` naming the key when absent, and
 * when the variable `urlEnv` names holds no connection string of `database.type`
 * (`databaseUrlProblem`; `database.url` was checked when the configuration loaded).
 */
export function resolveDatabaseUrl(config: Pick<QueueBoxConfig, 'database'>, env: Readonly<Record<string, string | undefined>> = process.env): string {
  if (config.database.url !== undefined) return config.database.url;
  if (config.database.urlEnv !== undefined) {
    const url = requireSecret(env, config.database.urlEnv, 'database.urlEnv');
    const problem = databaseUrlProblem(url, config.database.type);
    if (problem !== undefined) throw new ConfigError([{ key: 'database.urlEnv', message: `names ${shownVariable(config.database.urlEnv)}, whose value ${problem}` }]);
    return url;
  }
  throw new ConfigError([{ key: 'database.url', message: 'is required (or database.urlEnv, QUEUEBOX_DATABASE_URL, DATABASE_URL)' }]);
}

export async function createDriver(config: QueueBoxConfig, env: Readonly<Record<string, string | undefined>> = process.env): Promise<Driver> {
  const url = resolveDatabaseUrl(config, env);
  if (config.database.type === 'sqlserver') {
    const { SqlServerDriver } = await importOptional('mssql', 'database.type: sqlserver', () => import('./sqlserver/sqlserver-driver.ts'));
    return new SqlServerDriver({ config, url });
  }
  // An application's own claims (a pull worker on this driver) refuse what the functions refuse at
  // start-up (`schemaVerify`: the encoding, the schema's trust, row-level security), once, before
  // the first claim; a start-up that ran `schemaVerify` already is not checked again.
  return new PostgresDriver({ config, url, verifyBeforeClaims: true });
}
