/**
 * Structured JSON logs through Powertools Logger. One logger per container.
 */
import { Logger } from '@aws-lambda-powertools/logger';

export type { Logger };

export function createLogger(options: { serviceName: string; logLevel?: 'DEBUG' | 'INFO' | 'WARN' | 'ERROR' | 'SILENT' }): Logger {
  return new Logger({ serviceName: options.serviceName, logLevel: options.logLevel ?? 'INFO' });
}
