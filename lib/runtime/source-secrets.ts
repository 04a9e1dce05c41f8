/**
 * The secrets of the inbox sources (`secretEnv`, `tokenEnv`, `keyEnv`), kept fresh so that a
 * rotation takes effect in warm containers.
 *
 * A secret set in the function's environment is fixed for the container's life (a new value
 * needs a deploy). A secret read from the SSM path `QUEUEBOX_SECRETS_PARAMETER_PATH` is read at
 * cold start, read again once it is `secrets.maxAgeSeconds` old, and read again when a request
 * fails verification with it — at most once per `secrets.minRefetchSeconds` per secret, whatever
 * the reason of the read, so a flood of forged requests makes at most one SSM call per secret
 * per interval. A read again that fails, or gets no answer within `SECRET_REREAD_TIMEOUT_MS`,
 * keeps the value held. There is no grace window: once the new value is read, only it verifies.
 */
import { redactedError } from '../claims/redact.ts';
import { shownVariable } from '../config/looks-like-secret.ts';
import { ConfigError } from '../errors.ts';
import type { QueueBoxConfig } from '../config/schema.ts';
import type { Logger } from '../observability/logger.ts';
import { SECRET_REREAD_TIMEOUT_MS, secretEnvNames, secretStores, withinMs, type SecretStores } from './secrets.ts';

type Env = Readonly<Record<string, string | undefined>>;

/** What an authenticator needs of the secrets: the value now, and a fresh read after a refusal. */
export interface SecretLookup {
  /** Throws `ConfigError` naming `key` when `name` has no value (checked when the receiver is built). */
  require(name: string, key: string): void;
  /** The value to verify with now; read again from the store first when it is too old. */
  current(name: string): Promise<string>;
  /**
   * After a verification with `used` failed: reads the secret again unless it was read less than
   * `minRefetchSeconds` ago; returns the value when it differs from `used`, else undefined.
   */
  refreshAfterFailure(name: string, used: string): Promise<string | undefined>;
}

/** A value that must not be used as a secret: unset, blank, or short enough to guess. */
export const MIN_SECRET_LENGTH = 16;

/** Checks the value of secret `variable`; throws `ConfigError` naming `key` and never showing the value. */
export function checkSecretValue(value: string | undefined, key: string, variable: string): string {
  if (value === undefined || value === '') throw new ConfigError([{ key, message: `names ${shownVariable(variable)}, which is not set` }]);
  if (value.trim() === '') throw new ConfigError([{ key, message: 'names a secret that is blank (only spaces)' }]);
  if (value.length < MIN_SECRET_LENGTH) throw new ConfigError([{ key, message: `names a secret shorter than ${MIN_SECRET_LENGTH} characters: use a random value (e.g. openssl rand -hex 32)` }]);
  return value;
}

/** Secrets that never change: the environment of a test or of the local runner. */
export function staticSecrets(env: Env): SecretLookup {
  return {
    require: (name, key) => void checkSecretValue(env[name], key, name),
    current: (name) => Promise.resolve(env[name] ?? ''),
    refreshAfterFailure: () => Promise.resolve(undefined),
  };
}

export interface SourceSecretsOptions {
  /** The function's environment (secrets set here are fixed; the SSM path is read from it). */
  env: Env;
  config: Pick<QueueBoxConfig, 'inbox' | 'secrets'>;
  stores?: SecretStores;
  /** Clock in ms since the epoch; default `Date.now`. */
  now?: () => number;
  logger?: Pick<Logger, 'warn'>;
}

interface Entry {
  value: string;
  readAt: number;
  reading?: Promise<string>;
}

/**
 * Reads every source secret the environment does not set from the SSM path (cold start) and
 * returns a lookup that keeps them fresh. A read that fails fails the cold start (a parameter that
 * does not exist: a `ConfigError` naming the key); a value that is blank or too short is refused
 * when the receiver is built, naming its key.
 */
export async function loadSourceSecrets(options: SourceSecretsOptions): Promise<SecretLookup> {
  const { env, config } = options;
  const path = nonEmpty(env.QUEUEBOX_SECRETS_PARAMETER_PATH)?.replace(/\/+$/, '');
  const fromStore = path === undefined ? [] : secretEnvNames(config).filter((name) => nonEmpty(env[name]) === undefined);
  if (path === undefined || fromStore.length === 0) return staticSecrets(env);
  const now = options.now ?? Date.now;
  const maxAgeMs = config.secrets.maxAgeSeconds * 1000;
  const minRefetchMs = config.secrets.minRefetchSeconds * 1000;
  const store = options.stores ?? (await secretStores());
  const entries = new Map<string, Entry>();

  const read = async (name: string): Promise<string> => {
    const value = await store.ssm.get(`${path}/${name}`, { forceFetch: true, decrypt: true });
    return typeof value === 'string' ? value : '';
  };
  /** One read at a time per secret; a failed or unanswered read keeps the value held (an SSM outage is not a rotation). */
  const reread = (name: string, entry: Entry): Promise<string> => {
    if (entry.reading !== undefined) return entry.reading;
    // A late answer still replaces the value held; only the wait for it is bounded.
    const answer = read(name).then((value) => {
      if (usable(value)) entry.value = value;
      else options.logger?.warn('source secret read again is unset, blank or too short; the value held is kept', { secret: name });
    });
    entry.reading = withinMs(answer, SECRET_REREAD_TIMEOUT_MS, `SSM parameter for ${name}`)
      .then(() => entry.value)
      .catch((error: unknown) => {
        options.logger?.warn('source secret could not be read again; the value held is kept', { secret: name, error: redactedError(error) });
        return entry.value;
      })
      .finally(() => {
        entry.readAt = now();
        entry.reading = undefined;
      });
    return entry.reading;
  };

  for (const name of fromStore) {
    const value = await read(name).catch((error: unknown) => {
      if (!isParameterNotFound(error)) throw error;
      const where = shownVariable(name).startsWith('environment variable ') ? `${path}/${name}` : `for it under ${path}`;
      throw new ConfigError([{ key: secretKeyOf(config, name), message: `names ${shownVariable(name)}, which is not set, and SSM holds no parameter ${where}` }]);
    });
    entries.set(name, { value, readAt: now() });
  }

  return {
    require(name, key) {
      checkSecretValue(entries.get(name)?.value ?? env[name], key, name);
    },
    async current(name) {
      const entry = entries.get(name);
      if (entry === undefined) return env[name] ?? '';
      if (now() - entry.readAt >= maxAgeMs) return reread(name, entry);
      return entry.reading ?? entry.value;
    },
    async refreshAfterFailure(name, used) {
      const entry = entries.get(name);
      if (entry === undefined) return undefined;
      const value = entry.reading !== undefined ? await entry.reading : now() - entry.readAt >= minRefetchMs ? await reread(name, entry) : entry.value;
      return value !== used ? value : undefined;
    },
  };
}

/** The first key that names secret variable `name` (`inbox.sources.<source>.auth.secretEnv`…). */
function secretKeyOf(config: Pick<QueueBoxConfig, 'inbox'>, name: string): string {
  for (const [source, { auth }] of Object.entries(config.inbox.sources)) {
    if (auth === undefined || auth.type === 'none') continue;
    const [field, variable] = auth.type === 'bearer' ? ['tokenEnv', auth.tokenEnv] : auth.type === 'api-key' ? ['keyEnv', auth.keyEnv] : ['secretEnv', auth.secretEnv];
    if (variable === name) return `inbox.sources.${source}.auth.${field}`;
  }
  return 'inbox.sources';
}

/** True when `error` (or a cause) is SSM's answer for a parameter that does not exist. */
function isParameterNotFound(error: unknown): boolean {
  for (let current: unknown = error, depth = 0; depth < 5 && typeof current === 'object' && current !== null; depth++) {
    if ((current as { name?: unknown }).name === 'ParameterNotFound') return true;
    current = (current as { cause?: unknown }).cause;
  }
  return false;
}

function usable(value: string): boolean {
  try {
    checkSecretValue(value, '', '');
    return true;
  } catch {
    return false;
  }
}

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value === '' ? undefined : value;
}
