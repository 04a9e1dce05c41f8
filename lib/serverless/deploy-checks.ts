/**
 * Build-time truth: what the plugin refuses to package, and what it warns about, for one
 * configuration and `custom.queuebox`. Pure, so each rule is tested without packaging.
 */
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
  return undefined;
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
