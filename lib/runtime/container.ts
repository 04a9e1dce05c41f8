/**
 * Dependencies built once per Lambda container (outside the handler): configuration, the
 * database driver (one small pool) and the logger. Handlers call `getContainer()` at the start
 * of every invocation; the first call builds, later calls reuse.
 */
import { loadConfig } from '../config/load-config.ts';
import type { QueueBoxConfig } from '../config/schema.ts';
import { createDriver } from '../db/create-driver.ts';
import type { Driver } from '../db/driver.ts';
import { createLogger, type Logger } from '../observability/logger.ts';
import { QueueBoxMetrics } from '../observability/metrics.ts';
import { createTracer, type Tracer } from '../observability/tracing.ts';
import { memoizeByObject } from './memo.ts';
import { isDatabaseLoginFailure, withDatabaseUrl, withSourceSecrets } from './secrets.ts';

export interface Container {
  config: QueueBoxConfig;
  driver: Driver;
  logger: Logger;
  /** Environment the container was built from (secrets are resolved from it). */
  env: Readonly<Record<string, string | undefined>>;
  /** X-Ray tracer when `observability.tracing` is on. */
  tracer?: Tracer;
  /** EMF line writer; default standard output. Tests and the local runner capture it. */
  writeMetrics?: (line: string) => void;
}

let current: Promise<Container> | undefined;
/** Set when a database login failed: the next build fetches the secret again, bypassing the cache. */
let refetchSecrets = false;

/** Builds (once) and returns the container's dependencies; start-up fails on bad config or schema. */
export function getContainer(): Promise<Container> {
  current ??= buildContainer().catch((error: unknown) => {
    current = undefined; // a later invocation retries the start-up
    throw error;
  });
  return current;
}

/**
 * Builds the container from `process.env` plus the secrets it names (lib/runtime/secrets.ts).
 * A refused database login at start-up fetches the secrets again once (a rotation since they
 * were cached); a login refused later discards the container, so the next invocation does so.
 */
async function buildContainer(): Promise<Container> {
  try {
    return await buildWithSecrets(refetchSecrets);
  } catch (error) {
    if (!isDatabaseLoginFailure(error)) throw error;
    return await buildWithSecrets(true);
  } finally {
    refetchSecrets = false;
  }
}

async function buildWithSecrets(forceFetch: boolean): Promise<Container> {
  const withUrl = await withDatabaseUrl(process.env, { forceFetch });
  const config = loadConfig({ env: withUrl });
  const env = await withSourceSecrets(withUrl, config, { forceFetch });
  const built = await createDriver(config, env);
  try {
    await built.schemaVerify();
  } catch (error) {
    await built.close().catch(() => {});
    throw error;
  }
  const logger = createLogger({ serviceName: config.observability.serviceName, logLevel: config.observability.logLevel });
  built.useLogger?.(logger);
  const tracer = await createTracer(config);
  const container: Container = { config, driver: discardOnLoginFailure(built), logger, env, ...(tracer ? { tracer } : {}) };
  return container;
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
  current = container === undefined ? undefined : Promise.resolve(container);
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
