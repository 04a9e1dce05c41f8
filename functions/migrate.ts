/**
 * Migrate function, invoked by hand (or from a deploy pipeline): applies pending numbered
 * migrations under a transaction-scoped lock; idempotent. Builds its own driver because the
 * shared container verifies the schema first, which is what this function fixes.
 */
import type { Context } from 'aws-lambda';
import { loadConfig } from '../lib/config/load-config.ts';
import { createDriver } from '../lib/db/create-driver.ts';
import type { MigrateResult } from '../lib/db/driver.ts';
import { createLogger } from '../lib/observability/logger.ts';

export async function handler(_event: unknown, context: Context): Promise<MigrateResult> {
  const config = loadConfig({ env: process.env });
  const logger = createLogger({ serviceName: config.observability.serviceName, logLevel: config.observability.logLevel });
  logger.addContext(context);
  const driver = await createDriver(config, process.env);
  try {
    const result = await driver.migrate();
    logger.info('migrations applied', { applied: result.applied, ...(result.claimFunctions ? { claimFunctions: result.claimFunctions } : {}) });
    return result;
  } finally {
    await driver.close();
  }
}
