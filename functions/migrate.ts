/**
 * Migrate function, invoked by hand (or from a deploy pipeline): applies pending numbered
 * migrations under a transaction-scoped lock; idempotent. With the event `{"check": true}` it
 * changes nothing and returns `{ upToDate, problems }` (what `queuebox migrate --check` prints).
 * Builds its own driver because the shared container verifies the schema first, which is what
 * this function fixes.
 */
import type { Context } from 'aws-lambda';
import { loadConfig } from '../lib/config/load-config.ts';
import { createDriver } from '../lib/db/create-driver.ts';
import type { MigrateResult } from '../lib/db/driver.ts';
import { createLogger } from '../lib/observability/logger.ts';

/** The answer of a check (`{"check": true}`): `problems` names each difference; none when up to date. */
export interface MigrateCheckResult {
  upToDate: boolean;
  problems: string[];
}

export async function handler(event: unknown, context: Context): Promise<MigrateResult | MigrateCheckResult> {
  const config = loadConfig({ env: process.env });
  const logger = createLogger({ serviceName: config.observability.serviceName, logLevel: config.observability.logLevel });
  logger.addContext(context);
  const driver = await createDriver(config, process.env);
  try {
    if (typeof event === 'object' && event !== null && (event as { check?: unknown }).check === true) {
      const problems = await driver.migrateCheck();
      logger.info(problems.length === 0 ? 'schema is up to date' : 'schema is behind', { problems });
      return { upToDate: problems.length === 0, problems };
    }
    const result = await driver.migrate();
    logger.info('migrations applied', { applied: result.applied, ...(result.claimFunctions ? { claimFunctions: result.claimFunctions } : {}) });
    return result;
  } finally {
    await driver.close();
  }
}
