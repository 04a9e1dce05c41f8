/**
 * Structured JSON logs through Powertools Logger. One logger per container; each handler calls
 * `logger.addContext(context)` first, so every line carries the request id and the
 * cold-start flag, as Powertools' `injectLambdaContext` does.
 */
import { Logger } from '@aws-lambda-powertools/logger';
import type { QueueBoxConfig } from '../config/schema.ts';

export type { Logger };

/** A Powertools log level as the configuration names it (`observability.logLevel`). */
export type LogLevel = QueueBoxConfig['observability']['logLevel'];

/** A logger at `logLevel` (default `INFO`); `AWS_LAMBDA_LOG_LEVEL` may raise it, as in Powertools. */
export function createLogger(options: { serviceName: string; logLevel?: LogLevel }): Logger {
  return new Logger({ serviceName: options.serviceName, logLevel: options.logLevel ?? 'INFO' });
}

