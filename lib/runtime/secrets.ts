/**
 * The one place where a function's secrets come from: the database connection string and the
 * secrets that inbox sources name (`secretEnv`, `tokenEnv`, `keyEnv`).
 *
 * Nothing secret lives in the template. The template only names where a secret is:
 * - `QUEUEBOX_DATABASE_SECRET_ID`: a Secrets Manager secret holding the connection string, or an
 *   RDS secret (`{"engine","host","port","username","password","dbname"}`);
 * - `QUEUEBOX_DATABASE_URL_PARAMETER`: an SSM SecureString holding the connection string;
 * - `QUEUEBOX_SECRETS_PARAMETER_PATH`: an SSM path under which each source secret is a
 *   SecureString named like its variable (`/queuebox/prod/STRIPE_WEBHOOK_SECRET`).
 * A variable already set in the environment wins (local runs, tests). Values are fetched with
 * Powertools Parameters; `forceFetch` bypasses its cache. When to read again (age, a refused
 * login or signature) is decided by the container (database) and lib/runtime/source-secrets.ts.
 */
import type { SecretsProvider } from '@aws-lambda-powertools/parameters/secrets';
import type { SSMProvider } from '@aws-lambda-powertools/parameters/ssm';
import type { QueueBoxConfig } from '../config/schema.ts';

/** Powertools' own cache age for a read without `forceFetch`, in seconds (the default of `secrets.maxAgeSeconds`). */
export const SECRET_MAX_AGE_SECONDS = 300;

/**
 * Longest wait for a secret read again while a value is held (an age or a refusal, not the cold
 * start): past it the value held is used, so a store that does not answer delays a request by at
 * most this, never until the function times out.
 */
export const SECRET_REREAD_TIMEOUT_MS = 2_000;

/** How long the secret stores' SDK clients wait for a connection (ms). */
export const SECRET_CONNECT_TIMEOUT_MS = 1_000;
/** How long the secret stores' SDK clients wait for one request's answer (ms) before ending it (the SDK then retries, up to 3 attempts). */
export const SECRET_REQUEST_TIMEOUT_MS = 5_000;

/**
 * `read`, or a rejection once it has taken `ms` (the read itself is abandoned, not cancelled):
 * with `late()`'s error, or one naming `late` as what was read.
 */
export function withinMs<T>(read: Promise<T>, ms: number, late: string | (() => Error)): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const tooLate = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(typeof late === 'string' ? new Error(`${late}: no answer within ${ms} ms`) : late()), ms);
  });
  return Promise.race([read, tooLate]).finally(() => clearTimeout(timer));
}

/** Environment variables that say where secrets are (names, never values). */
export const SECRET_LOCATION_ENV = ['QUEUEBOX_DATABASE_SECRET_ID', 'QUEUEBOX_DATABASE_URL_PARAMETER', 'QUEUEBOX_SECRETS_PARAMETER_PATH'] as const;

type Env = Readonly<Record<string, string | undefined>>;

/** The secret stores; tests pass providers whose clients talk to a local endpoint. */
export interface SecretStores {
  secrets: Pick<SecretsProvider, 'get'>;
  ssm: Pick<SSMProvider, 'get'>;
}

let defaultStores: Promise<SecretStores> | undefined;
/** The Powertools providers, loaded on first use: a function whose secrets are all in its environment never loads the SDK clients. */
export function secretStores(): Promise<SecretStores> {
  // A request the store does not answer is ended by the SDK: a read that QueueBox stopped waiting
  // for (a re-read past SECRET_REREAD_TIMEOUT_MS, a start-up past its deadline) must not keep its
  // socket, or the client's 50 would fill up and every later read wait for one.
  const clientConfig = { requestHandler: { connectionTimeout: SECRET_CONNECT_TIMEOUT_MS, requestTimeout: SECRET_REQUEST_TIMEOUT_MS, throwOnRequestTimeout: true } };
  defaultStores ??= Promise.all([import('@aws-lambda-powertools/parameters/secrets'), import('@aws-lambda-powertools/parameters/ssm')]).then(([secrets, ssm]) => ({
    secrets: new secrets.SecretsProvider({ clientConfig }),
    ssm: new ssm.SSMProvider({ clientConfig }),
  }));
  return defaultStores;
}

/** Every environment variable the inbox sources of `config` read a secret from, sorted. */
export function secretEnvNames(config: Pick<QueueBoxConfig, 'inbox'>): string[] {
  const names = new Set<string>();
  for (const source of Object.values(config.inbox.sources)) {
    const auth = source.auth;
    if (auth === undefined || auth.type === 'none') continue;
    names.add(auth.type === 'bearer' ? auth.tokenEnv : auth.type === 'api-key' ? auth.keyEnv : auth.secretEnv);
  }
  return [...names].sort();
}

/**
 * `env` with the database connection string (`QUEUEBOX_DATABASE_URL`) filled from Secrets
 * Manager or SSM when the environment names one and does not already carry a URL.
 */
export async function withDatabaseUrl(env: Env, options: { forceFetch?: boolean; stores?: SecretStores } = {}): Promise<Env> {
  if (nonEmpty(env.QUEUEBOX_DATABASE_URL) || nonEmpty(env.DATABASE_URL)) return env;
  const secretId = nonEmpty(env.QUEUEBOX_DATABASE_SECRET_ID);
  const parameter = nonEmpty(env.QUEUEBOX_DATABASE_URL_PARAMETER);
  if (secretId === undefined && parameter === undefined) return env;
  const store = options.stores ?? (await secretStores());
  const fetchOptions = { maxAge: SECRET_MAX_AGE_SECONDS, forceFetch: options.forceFetch === true };
  if (secretId !== undefined) {
    const value = await store.secrets.get(secretId, fetchOptions);
    return { ...env, QUEUEBOX_DATABASE_URL: connectionString(typeof value === 'string' ? value : Buffer.from(value as Uint8Array).toString('utf8'), secretId) };
  }
  if (parameter !== undefined) {
    const value = await store.ssm.get(parameter, { ...fetchOptions, decrypt: true });
    // Without the white space around it, as a secret's: a parameter written from a file ends in a line break.
    const text = typeof value === 'string' ? value.trim() : '';
    if (text === '') throw new Error(`SSM parameter ${parameter} holds no connection string`);
    return { ...env, QUEUEBOX_DATABASE_URL: text };
  }
  return env;
}

/** True when `error` (or a cause) is a refused database login: the password was rotated or is wrong. */
export function isDatabaseLoginFailure(error: unknown): boolean {
  let current: unknown = error;
  for (let depth = 0; depth < 5 && typeof current === 'object' && current !== null; depth++) {
    const code = (current as { code?: unknown }).code;
    if (code === '28P01' || code === '28000' || code === 'ELOGIN') return true;
    current = (current as { cause?: unknown }).cause;
  }
  return false;
}

/** A connection string from a secret: the string itself, or built from an RDS secret's JSON. */
function connectionString(value: string, secretId: string): string {
  const text = value.trim();
  if (!text.startsWith('{')) return text;
  let secret: Record<string, unknown>;
  try {
    secret = JSON.parse(text) as Record<string, unknown>;
  } catch {
    throw new Error(`secret ${secretId} is neither a connection string nor JSON`);
  }
  const part = (key: string) => {
    const v = secret[key];
    if (v === undefined || v === null || v === '') throw new Error(`secret ${secretId} has no "${key}"`);
    return encodeURIComponent(String(v));
  };
  const engine = String(secret.engine ?? 'postgres');
  const scheme = engine === 'sqlserver' || engine.startsWith('sqlserver') ? 'mssql' : 'postgres';
  const port = secret.port !== undefined ? `:${String(secret.port)}` : '';
  const db = secret.dbname !== undefined ? `/${part('dbname')}` : '';
  return `${scheme}://${part('username')}:${part('password')}@${part('host')}${port}${db}`;
}

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value === '' ? undefined : value;
}
