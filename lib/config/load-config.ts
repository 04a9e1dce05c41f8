/**
 * The only reader of the configuration file and of `QUEUEBOX_*` environment variables.
 *
 * Precedence: schema defaults < YAML file (`QUEUEBOX_CONFIG` or the given path) < environment.
 * An environment override names a key path in SCREAMING_SNAKE case with `__` between levels:
 * `QUEUEBOX_OUTBOX__BATCH_SIZE=50` sets `outbox.batchSize`. Values are parsed as YAML scalars, so
 * numbers and booleans arrive typed. `QUEUEBOX_DATABASE_URL` (and `DATABASE_URL`) set
 * `database.url` when the file does not. `POWERTOOLS_LOG_LEVEL` (any case) sets
 * `observability.logLevel` over the file, as Powertools users expect; a
 * `QUEUEBOX_OBSERVABILITY__LOG_LEVEL` override still wins over it.
 */
import { readFileSync } from 'node:fs';
import { parse as parseYaml, YAMLError } from 'yaml';
import type { z } from 'zod';
import { ConfigError } from '../errors.ts';
import { looksLikeSecret, shownVariable } from './looks-like-secret.ts';
import { configSchema, LOG_LEVELS, type ConfigInput, type QueueBoxConfig } from './schema.ts';

type Env = Readonly<Record<string, string | undefined>>;

/** Environment variables with the prefix that are not key overrides. */
const RESERVED_ENV = new Set([
  'QUEUEBOX_CONFIG',
  'QUEUEBOX_DATABASE_URL',
  'QUEUEBOX_MSSQL_URL',
  'QUEUEBOX_FAULTS_SEED',
  // Where secrets are (lib/runtime/secrets.ts), not configuration keys.
  'QUEUEBOX_DATABASE_SECRET_ID',
  'QUEUEBOX_DATABASE_URL_PARAMETER',
  'QUEUEBOX_SECRETS_PARAMETER_PATH',
]);

export interface LoadConfigOptions {
  /** Path of the YAML file; defaults to `QUEUEBOX_CONFIG`, else no file. */
  path?: string;
  /** Parsed configuration to use instead of a file (tests, embedding). */
  input?: ConfigInput;
  /** Environment to read; defaults to `process.env`. */
  env?: Env;
}

/** Loads, merges and validates configuration; throws `ConfigError` naming every bad key. */
export function loadConfig(options: LoadConfigOptions = {}): QueueBoxConfig {
  const env = options.env ?? process.env;
  let raw: unknown = options.input ?? {};
  const path = options.path ?? env.QUEUEBOX_CONFIG;
  if (options.input === undefined && path !== undefined && path !== '') {
    let text: string;
    try {
      text = readFileSync(path, 'utf8');
    } catch (error) {
      throw new ConfigError([{ key: '(file)', message: `cannot read ${path}: ${(error as Error).message}` }]);
    }
    try {
      raw = parseYaml(text) ?? {};
    } catch (error) {
      throw new ConfigError([{ key: '(file)', message: `${path} is not valid YAML: ${yamlProblem(error)}` }]);
    }
  }
  if (!isPlainObject(raw)) {
    throw new ConfigError([{ key: '(root)', message: 'must be a mapping of keys to values' }]);
  }
  const merged = structuredClone(raw);
  applyEnvOverrides(merged, env);
  return parseConfig(merged);
}

/** Validates an already merged object; throws `ConfigError`. */
export function parseConfig(input: unknown): QueueBoxConfig {
  const result = configSchema.safeParse(input);
  if (!result.success) {
    throw new ConfigError(result.error.issues.map(toIssue));
  }
  return result.data;
}

function toIssue(issue: z.core.$ZodIssue): { key: string; message: string } {
  let key = issue.path.map(String).join('.');
  if (issue.code === 'unrecognized_keys') {
    key = [...issue.path.map(String), issue.keys[0] ?? ''].filter((p) => p !== '').join('.');
    return { key, message: `unknown key${issue.keys.length > 1 ? `s ${issue.keys.join(', ')}` : ''}` };
  }
  return { key: key === '' ? '(root)' : key, message: issue.message };
}

function applyEnvOverrides(target: Record<string, unknown>, env: Env): void {
  const databaseUrl = env.QUEUEBOX_DATABASE_URL ?? env.DATABASE_URL;
  if (databaseUrl !== undefined && databaseUrl !== '') {
    const database = (target.database ??= {}) as Record<string, unknown>;
    if (isPlainObject(database) && database.url === undefined && database.urlEnv === undefined) database.url = databaseUrl;
  }
  applyPowertoolsLogLevel(target, env.POWERTOOLS_LOG_LEVEL);
  for (const [name, value] of Object.entries(env)) {
    if (!name.startsWith('QUEUEBOX_') || RESERVED_ENV.has(name) || value === undefined) continue;
    const path = name
      .slice('QUEUEBOX_'.length)
      .split('__')
      .map((segment) => camelCase(segment));
    if (path.some((segment) => segment === '')) {
      throw new ConfigError([{ key: name, message: 'is not a valid override name (use QUEUEBOX_SECTION__KEY_NAME)' }]);
    }
    let node: Record<string, unknown> = target;
    for (const segment of path.slice(0, -1)) {
      const next = node[segment];
      if (next === undefined) node[segment] = {};
      else if (!isPlainObject(next)) throw new ConfigError([{ key: path.join('.'), message: `cannot be set from ${name}: ${segment} is not a mapping` }]);
      node = node[segment] as Record<string, unknown>;
    }
    node[path[path.length - 1]!] = parseScalar(value);
  }
}

/**
 * A YAML error as its position and kind only: the parser's own message quotes the offending line,
 * which may hold a password, so that excerpt is never shown.
 */
function yamlProblem(error: unknown): string {
  if (!(error instanceof YAMLError)) return 'the file could not be parsed';
  const kind = error.message.split(' at line ')[0]!.split(':\n')[0]!;
  const at = error.linePos?.[0];
  return `${at ? `line ${at.line}, column ${at.col}: ` : ''}${kind} (${error.code})`;
}

/** `POWERTOOLS_LOG_LEVEL` → `observability.logLevel`; an unknown level stops start-up naming the variable. */
function applyPowertoolsLogLevel(target: Record<string, unknown>, value: string | undefined): void {
  if (value === undefined || value.trim() === '') return;
  const level = value.trim().toUpperCase();
  if (!(LOG_LEVELS as readonly string[]).includes(level)) {
    throw new ConfigError([{ key: 'POWERTOOLS_LOG_LEVEL', message: `is "${value}"; expected one of ${LOG_LEVELS.join(', ')}` }]);
  }
  const observability = (target.observability ??= {});
  if (!isPlainObject(observability)) throw new ConfigError([{ key: 'observability', message: 'must be a mapping of keys to values' }]);
  observability.logLevel = level;
}

function parseScalar(value: string): unknown {
  try {
    return parseYaml(value);
  } catch {
    return value;
  }
}

function camelCase(segment: string): string {
  return segment.toLowerCase().replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase());
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * Resolves a secret named by an `…Env` key; throws `ConfigError` naming `key` when it is unset
 * (the variable is named only when its name has the shape of one: `shownVariable`).
 */
export function requireSecret(env: Env, variable: string, key: string): string {
  const value = env[variable];
  if (looksLikeSecret(variable)) throw new ConfigError([{ key, message: 'holds what looks like a secret, not the name of an environment variable (not shown)' }]);
  if (value === undefined || value === '') {
    throw new ConfigError([{ key, message: `names ${shownVariable(variable)}, which is not set` }]);
  }
  return value;
}
