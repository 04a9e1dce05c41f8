/**
 * A logger that keeps what it is told, for asserting on errors and warnings.
 */
import type { PassLogger } from '../../lib/outbox/pass-context.ts';

export interface LogEntry {
  level: 'debug' | 'info' | 'warn' | 'error';
  message: string;
  extra: Record<string, unknown>;
}

export class RecordingLogger implements PassLogger {
  readonly entries: LogEntry[] = [];
  debug(message: string, ...extra: Array<Record<string, unknown>>): void {
    this.#add('debug', message, extra);
  }
  info(message: string, ...extra: Array<Record<string, unknown>>): void {
    this.#add('info', message, extra);
  }
  warn(message: string, ...extra: Array<Record<string, unknown>>): void {
    this.#add('warn', message, extra);
  }
  error(message: string, ...extra: Array<Record<string, unknown>>): void {
    this.#add('error', message, extra);
  }
  /** Entries of one level. */
  at(level: LogEntry['level']): LogEntry[] {
    return this.entries.filter((e) => e.level === level);
  }
  #add(level: LogEntry['level'], message: string, extra: Array<Record<string, unknown>>): void {
    this.entries.push({ level, message, extra: Object.assign({}, ...extra) });
  }
}
