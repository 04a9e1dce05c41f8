/**
 * Build-time truth: what the plugin refuses to package, and what it warns about, for one
 * configuration and `custom.queuebox`. Pure, so each rule is tested without packaging.
 */
import { MIN_TIME_TO_CLAIM_MS } from '../claims/lease.ts';
import type { QueueBoxConfig } from '../config/schema.ts';
import type { PluginOptions } from './options.ts';

/** Why this stage must not be packaged, or `undefined` when it may. */
export function deployRefusal(options: PluginOptions, config: QueueBoxConfig, stage: string): string | undefined {
  if (config.database.url !== undefined) {
    return `${options.config} sets database.url: every function package would carry the connection string (and its password). Remove it, and set custom.queuebox.databaseSecretArn or custom.queuebox.databaseUrlParameter (or database.urlEnv naming a variable the functions get)`;
  }
  if (!hasDatabaseLocation(options, config) && !options.allowMissingDatabase) {
    return `stage ${stage} has no database location: set custom.queuebox.databaseSecretArn (a Secrets Manager secret) or custom.queuebox.databaseUrlParameter (an SSM SecureString), or custom.queuebox.allowMissingDatabase: true to package without one (offline checks only: the functions would find no database)`;
  }
  const tooShort = timeoutRefusals(options, config);
  return tooShort.length > 0 ? tooShort.join('\n') : undefined;
}

/**
 * The poller and the relay claim only while more than `lambda.deadlineMarginMs` plus their claim
 * window is left of the invocation: with a timeout no longer than that, every invocation claims
 * nothing, yet finishes its pass, so the heartbeat alarm stays OK while nothing is delivered.
 */
function timeoutRefusals(options: PluginOptions, config: QueueBoxConfig): string[] {
  const marginMs = config.lambda.deadlineMarginMs;
  return (['outboxPoller', 'inboxRelay'] as const).flatMap((name) => {
    const timeoutSeconds = options.functions[name].timeout;
    const windowMs = MIN_TIME_TO_CLAIM_MS[name];
    if (timeoutSeconds * 1000 > marginMs + windowMs) return [];
    const key = `custom.queuebox.functions.${name}.timeout`;
    // At most 900 s: the configuration refuses a margin that leaves Lambda's longest timeout nothing.
    const leastSeconds = Math.floor((marginMs + windowMs) / 1000) + 1;
    return [
      `${name}: its timeout (${key}: ${timeoutSeconds} s) is not above lambda.deadlineMarginMs (${marginMs} ms) plus the ${windowMs} ms a pass needs to claim: ` +
        `every invocation would claim nothing while its heartbeat reports a finished pass. Raise ${key} to at least ${leastSeconds} s or lower lambda.deadlineMarginMs in ${options.config} below ${timeoutSeconds * 1000 - windowMs} ms`,
    ];
  });
}

/** True when the functions are told where the connection string is. */
export function hasDatabaseLocation(options: PluginOptions, config: QueueBoxConfig): boolean {
  return options.databaseSecretArn !== '' || options.databaseUrlParameter !== '' || config.database.urlEnv !== undefined;
}

/** Warnings for a package that may be deployed but should be looked at: public routes without authentication. */
export function deployWarnings(config: QueueBoxConfig): string[] {
  return Object.entries(config.inbox.sources)
    .filter(([, source]) => source.type === 'http' && source.auth?.type === 'none')
    .map(([name, source]) => `inbox source ${name} has auth: none: its route POST ${config.inbox.basePath}${source.path ?? ''} accepts requests from anyone`);
}
