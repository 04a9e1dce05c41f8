/**
 * Migrate function, invoked by hand (or from a deploy pipeline): applies pending numbered
 * migrations under a transaction-scoped lock; idempotent. With the event `{"check": true}` it
 * changes nothing and returns `{ upToDate, problems }` (what `queuebox migrate --check` prints);
 * any other event than that, `{}` or none is refused (`isCheckEvent`).
 * Builds its own driver because the shared container verifies the schema first, which is what
 * this function fixes.
 */
import type { Context } from 'aws-lambda';
import { throwingRedacted } from '../lib/claims/redact.ts';
import { loadConfig } from '../lib/config/load-config.ts';
import { createDriver } from '../lib/db/create-driver.ts';
import type { Driver, MigrateResult } from '../lib/db/driver.ts';
import { withStatementBudget } from '../lib/db/statement-budget.ts';
import { operationBudgetMs } from '../lib/runtime/deadline.ts';
import { withDatabaseUrl } from '../lib/runtime/secrets.ts';
import { UsageError } from '../lib/errors.ts';
import { createLogger, type Logger } from '../lib/observability/logger.ts';

/** The answer of a check (`{"check": true}`): `problems` names each difference; none when up to date. */
export interface MigrateCheckResult {
  upToDate: boolean;
  problems: string[];
}

/**
 * Whether the event asks for a check. Nothing (`osls invoke` without data), `{}` and
 * `{"check": false}` apply the migrations; `{"check": true}` checks. Anything else is refused
 * before the database is reached: a misspelled check (`{"Check": true}`, `{"check": "true"}`)
 * must never migrate the schema it was meant to look at.
 */
export function isCheckEvent(event: unknown): boolean {
  if (event === undefined || event === null || event === '') return false;
  const usage = 'the migrate event is {} (apply the pending migrations) or {"check": true} (change nothing, report what is behind)';
  if (typeof event !== 'object' || Array.isArray(event)) throw new UsageError(`migrate: ${usage}; got ${JSON.stringify(event)}`);
  const unknown = Object.keys(event).filter((key) => key !== 'check');
  if (unknown.length > 0) throw new UsageError(`migrate: unknown key${unknown.length > 1 ? 's' : ''} ${unknown.map((k) => JSON.stringify(k)).join(', ')}: ${usage}`);
  const check = (event as { check?: unknown }).check;
  if (check !== undefined && typeof check !== 'boolean') throw new UsageError(`migrate: check must be true or false, got ${JSON.stringify(check)}: ${usage}`);
  return check === true;
}

/** The deployed handler; what it throws leaves it redacted (`throwingRedacted`): the runtime logs a thrown error's message and stack. */
export const handler = throwingRedacted(async function migrate(event: unknown, context: Context): Promise<MigrateResult | MigrateCheckResult> {
  const check = isCheckEvent(event);
  // The connection string from Secrets Manager or SSM when the stage names one, as the other
  // functions read it (`custom.queuebox.databaseSecretArn` / `databaseUrlParameter`).
  const env = await withDatabaseUrl(process.env);
  const config = loadConfig({ env });
  const logger = createLogger({ serviceName: config.observability.serviceName, logLevel: config.observability.logLevel });
  logger.addContext(context);
  const driver = await createDriver(config, env);
  // Every statement ends before the invocation does (a migration's statements have no other
  // timeout: migration-sized work on a large table takes longer than database.statementTimeoutMs).
  const budget = operationBudgetMs(context, config.lambda.deadlineMarginMs);
  try {
    return await withStatementBudget(budget, () => run(check, driver, logger));
  } finally {
    await driver.close();
  }
});

async function run(check: boolean, driver: Driver, logger: Logger): Promise<MigrateResult | MigrateCheckResult> {
  if (check) {
    const problems = await driver.migrateCheck();
    logger.info(problems.length === 0 ? 'schema is up to date' : 'schema is behind', { problems });
    return { upToDate: problems.length === 0, problems };
  }
  const result = await driver.migrate();
  logger.info('migrations applied', { applied: result.applied, ...(result.claimFunctions ? { claimFunctions: result.claimFunctions } : {}) });
  return result;
}
