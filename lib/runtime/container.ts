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

/** Builds (once) and returns the container's dependencies; start-up fails on bad config or schema. */
export function getContainer(): Promise<Container> {
  current ??= buildContainer().catch((error: unknown) => {
    current = undefined; // a later invocation retries the start-up
    throw error;
  });
  return current;
}

async function buildContainer(): Promise<Container> {
  const env = process.env;
  const config = loadConfig({ env });
  const driver = await createDriver(config, env);
  await driver.schemaVerify();
  const logger = createLogger({ serviceName: config.observability.serviceName, logLevel: config.observability.logLevel });
  const tracer = await createTracer(config);
  return { config, driver, logger, env, ...(tracer ? { tracer } : {}) };
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
