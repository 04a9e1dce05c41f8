/**
 * Dependencies built once per Lambda container (outside the handler): configuration, the
 * database driver (one small pool) and the logger. Handlers call `getContainer()` at the start
 * of every invocation; the first call builds, later calls reuse.
 */
import { redactedError } from '../claims/redact.ts';
import { loadConfig } from '../config/load-config.ts';
import type { QueueBoxConfig } from '../config/schema.ts';
import { createDriver } from '../db/create-driver.ts';
import type { Driver } from '../db/driver.ts';
import { InvocationEndedError, withStatementBudget } from '../db/statement-budget.ts';
import { TransientDatabaseError } from '../errors.ts';
import { createLogger, type Logger } from '../observability/logger.ts';
import { QueueBoxMetrics } from '../observability/metrics.ts';
import { createTracer, type Tracer } from '../observability/tracing.ts';
import type { RemainingTime } from './deadline.ts';
import { memoizeByObject } from './memo.ts';
import { isDatabaseLoginFailure, SECRET_REREAD_TIMEOUT_MS, withDatabaseUrl, withinMs } from './secrets.ts';
import { loadSourceSecrets, type SecretLookup } from './source-secrets.ts';

export interface Container {
  config: QueueBoxConfig;
  driver: Driver;
  logger: Logger;
  /** Environment the container was built from (secrets are resolved from it). */
  env: Readonly<Record<string, string | undefined>>;
  /** The inbox sources' secrets, read again when old or after a refusal; default: fixed values from `env`. */
  secrets?: SecretLookup;
  /** X-Ray tracer when `observability.tracing` is on. */
  tracer?: Tracer;
  /** EMF line writer; default standard output. Tests and the local runner capture it. */
  writeMetrics?: (line: string) => void;
}

let current: Promise<Container> | undefined;
/** Start-ups that have ended with a container: a warm invocation takes it without a race against its deadline. */
const built = new WeakSet<Promise<Container>>();
/** Set when a database login failed: the next build fetches the secret again, bypassing the cache. */
let refetchSecrets = false;
/** The database secret of the current container when it came from Secrets Manager or SSM: what it gave, when it was read. */
let databaseSecret: { url: string; readAt: number; maxAgeMs: number } | undefined;
/** When a refused login last made the database secret be read again, and how often that may happen (`secrets.minRefetchSeconds`). */
let lastForcedRead = Number.NEGATIVE_INFINITY;
let minRefetchMs = 30_000;

/**
 * Builds (once) and returns the container's dependencies; start-up fails on bad config or schema.
 * A database secret older than `secrets.maxAgeSeconds` is read again first; when it changed, the
 * container is rebuilt, so every new connection uses the new credentials.
 *
 * `context`: the invocation that asks. A start-up it begins (a cold container, or one rebuilt
 * after a rotation) ends by its deadline — the invocation's end less `lambda.deadlineMarginMs`
 * (the least margin, 1 s, until the configuration is read; half the invocation when it is shorter
 * than two margins) — as the invocation's own statements do: the database secret's read, the wait
 * for the first connection and the schema check. A database that does not answer then fails the
 * start-up with a `TransientDatabaseError` (the inbox answers 503) or `InvocationEndedError` in
 * time to answer, instead of holding the invocation until it times out.
 */
export async function getContainer(context?: RemainingTime): Promise<Container> {
  // A start-up is shared by the invocations that ask while it runs (several at once in one
  // environment: Lambda Managed Instances, the local runner). One that joins is held to its own
  // deadline, not the starter's; and when the start-up ends at the starter's deadline while the
  // one that joined still has time, it starts up again itself. Bounded: a retry is a start-up of
  // its own, never joined again.
  for (let attempt = 0; ; attempt += 1) {
    if (current !== undefined && databaseSecret !== undefined && Date.now() - databaseSecret.readAt >= databaseSecret.maxAgeMs) {
      databaseSecret.readAt = Date.now();
      current = remembered(reconnectIfRotated(current, databaseSecret.url, context));
    }
    const joined = current !== undefined;
    current ??= remembered(buildContainer(context));
    const build = current;
    if (!joined || built.has(build) || !hasBudget(context)) return build;
    try {
      return await withinOwnDeadline(build, context);
    } catch (error) {
      const cutShort = error instanceof InvocationEndedError || error instanceof TransientDatabaseError;
      if (attempt === 0 && cutShort && current !== build && startUpBudget(context).remainingMs() > 0) continue;
      throw error;
    }
  }
}

/** `start`, marked as built once it resolves. */
function remembered(start: Promise<Container>): Promise<Container> {
  start.then(() => built.add(start), () => {});
  return start;
}

function hasBudget(context: RemainingTime | undefined): context is RemainingTime {
  return typeof context?.getRemainingTimeInMillis === 'function';
}

/** `build`, or `InvocationEndedError` when `context`'s start-up budget ends first (the start-up goes on for the others). */
function withinOwnDeadline(build: Promise<Container>, context: RemainingTime): Promise<Container> {
  return withinMs(build, startUpBudget(context).remainingMs(), () => new InvocationEndedError());
}

/** The least margin (`lambda.deadlineMarginMs`), used for a start-up's budget until the configuration is read. */
const START_UP_MARGIN_MS = 1000;

/** What a start-up keeps back from its invocation; the configured margin once known (`set`). */
interface StartUpBudget {
  /** Milliseconds left for the start-up's statements and reads (never negative). */
  remainingMs(): number;
  /** The margin of the configuration read. */
  setMarginMs(ms: number): void;
}

function startUpBudget(context: RemainingTime): StartUpBudget {
  const total = context.getRemainingTimeInMillis();
  let marginMs = START_UP_MARGIN_MS;
  return {
    remainingMs: () => Math.max(0, context.getRemainingTimeInMillis() - (total > 2 * marginMs ? marginMs : total / 2)),
    setMarginMs: (ms) => void (marginMs = ms),
  };
}

/** `build()`, its statements bounded by `budget` when there is one. */
function withinStartUp<T>(budget: StartUpBudget | undefined, build: () => Promise<T>): Promise<T> {
  return budget === undefined ? build() : withStatementBudget(budget.remainingMs, build);
}

/**
 * `read` (of the secret stores: `what`), or a `TransientDatabaseError` once the start-up's time is
 * gone: without its secrets the container cannot reach the database. The read is abandoned.
 */
function readWithin<T>(budget: StartUpBudget | undefined, what: string, read: Promise<T>): Promise<T> {
  if (budget === undefined) return read;
  return withinMs(read, budget.remainingMs(), () => new TransientDatabaseError(`${what} not read from the secret store before the invocation's deadline`, undefined));
}

/** `previous`, or a new container when the database secret no longer holds `url`; a read that fails or gets no answer within `SECRET_REREAD_TIMEOUT_MS` keeps `previous`. */
async function reconnectIfRotated(previous: Promise<Container>, url: string, context: RemainingTime | undefined): Promise<Container> {
  const container = await previous;
  let fresh: string | undefined;
  try {
    fresh = (await withinMs(withDatabaseUrl(process.env, { forceFetch: true }), SECRET_REREAD_TIMEOUT_MS, 'database secret')).QUEUEBOX_DATABASE_URL;
  } catch (error) {
    container.logger.warn('database secret could not be read again; the connection string held is kept', { error: redactedError(error) });
    return container;
  }
  if (fresh === undefined || fresh === url) return container;
  container.logger.info('database secret changed: reconnecting with the new one');
  await container.driver.close().catch(() => {});
  return buildContainer(context);
}

/**
 * Builds the container from `process.env` plus the secrets it names (lib/runtime/secrets.ts).
 * A refused database login at start-up fetches the secrets again once (a rotation since they
 * were cached); a login refused later discards the container, so the next invocation does so.
 * Either read bypasses the cache at most once per `secrets.minRefetchSeconds`, so a wrong
 * password cannot turn every invocation into a Secrets Manager call.
 */
function buildContainer(context?: RemainingTime): Promise<Container> {
  const budget = hasBudget(context) ? startUpBudget(context) : undefined;
  const forceNow = () => {
    if (Date.now() - lastForcedRead < minRefetchMs) return false;
    lastForcedRead = Date.now();
    return true;
  };
  const build = async () => {
    try {
      return await buildWithSecrets(refetchSecrets && forceNow(), budget);
    } catch (error) {
      if (!isDatabaseLoginFailure(error) || !forceNow()) throw error;
      return await buildWithSecrets(true, budget);
    } finally {
      refetchSecrets = false;
    }
  };
  return withinStartUp(budget, build).catch((error: unknown) => {
    current = undefined; // a later invocation retries the start-up
    throw error;
  });
}

async function buildWithSecrets(forceFetch: boolean, budget: StartUpBudget | undefined): Promise<Container> {
  const withUrl = await readWithin(budget, 'the database connection string was', withDatabaseUrl(process.env, { forceFetch }));
  const config = loadConfig({ env: withUrl });
  budget?.setMarginMs(config.lambda.deadlineMarginMs);
  minRefetchMs = config.secrets.minRefetchSeconds * 1000;
  const logger = createLogger({ serviceName: config.observability.serviceName, logLevel: config.observability.logLevel });
  const secrets = await readWithin(budget, "the inbox sources' secrets were", loadSourceSecrets({ env: withUrl, config, logger }));
  const built = await createDriver(config, withUrl);
  try {
    await built.schemaVerify();
  } catch (error) {
    await built.close().catch(() => {});
    throw error;
  }
  built.useLogger?.(logger);
  const tracer = await createTracer(config);
  const fromStore = withUrl.QUEUEBOX_DATABASE_URL !== undefined && withUrl.QUEUEBOX_DATABASE_URL !== process.env.QUEUEBOX_DATABASE_URL;
  databaseSecret = fromStore ? { url: withUrl.QUEUEBOX_DATABASE_URL!, readAt: Date.now(), maxAgeMs: config.secrets.maxAgeSeconds * 1000 } : undefined;
  return { config, driver: discardOnLoginFailure(built), logger, env: withUrl, secrets, ...(tracer ? { tracer } : {}) };
}

/** The driver, except that a refused login discards the container (the secret was rotated). */
function discardOnLoginFailure(driver: Driver): Driver {
  const mine = current;
  return new Proxy(driver, {
    get(target, property) {
      const value = Reflect.get(target, property) as unknown;
      if (typeof value !== 'function') return value;
      return (...args: unknown[]) => {
        const result = (value as (...a: unknown[]) => unknown).apply(target, args);
        if (!(result instanceof Promise)) return result;
        return result.catch((error: unknown) => {
          if (isDatabaseLoginFailure(error) && current === mine) {
            current = undefined;
            refetchSecrets = true;
          }
          throw error;
        });
      };
    },
  });
}

/** Replaces the container (tests, local runner). `undefined` resets it. */
export function setContainer(container: Container | undefined): void {
  current = container === undefined ? undefined : remembered(Promise.resolve(container));
  databaseSecret = undefined;
  lastForcedRead = Number.NEGATIVE_INFINITY;
}

/** A metrics buffer for one pass, writing where the container says. */
export function passMetrics(container: Container): QueueBoxMetrics {
  return new QueueBoxMetrics({
    namespace: container.config.observability.namespace,
    serviceName: container.config.observability.serviceName,
    ...(container.writeMetrics ? { write: container.writeMetrics } : {}),
  });
}

/**
 * Memoizes `build(container)` per container: handlers build their receivers, destinations and
 * routers once per Lambda container, not per invocation.
 */
export function perContainer<T>(build: (container: Container) => T): (container: Container) => T {
  return memoizeByObject(build);
}
