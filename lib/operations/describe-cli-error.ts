/**
 * How the CLI reports a failure: one line without a stack for anything expected or environmental
 * (a refused request, an unreachable database, a database error), the stack only with `--debug`.
 *
 * A `QueueBoxError` prints its own message (configuration and schema errors span several lines on
 * purpose: one per offending key or statement). Anything else prints its first message line, its
 * code when it has one, and a hint to rerun with `--debug`.
 */
import { QueueBoxError } from '../errors.ts';

const CONNECTION_CODES = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'ETIMEDOUT', 'ECONNRESET', 'EHOSTUNREACH', 'ENETUNREACH', 'ESOCKET', 'ELOGIN']);

/** The text after `queuebox: ` for `error`; with `debug`, the stack (and the causes' stacks). */
export function describeCliError(error: unknown, debug: boolean): string {
  if (debug) return stackOf(error);
  if (error instanceof QueueBoxError && !(error.cause !== undefined && isConnectionError(error.cause))) return error.message;
  const root = innermost(error);
  const code = codeOf(root);
  const message = firstLine(messageOf(root)) || code || 'unknown error';
  const prefix = isConnectionError(root) ? 'cannot reach the database: ' : error instanceof QueueBoxError ? `${firstLine(error.message)}: ` : '';
  const detail = prefix !== '' && prefix.startsWith(message) ? '' : message;
  return `${prefix}${detail}${code && !message.includes(code) ? ` (${code})` : ''} (run with --debug for the stack)`;
}

function innermost(error: unknown): unknown {
  let current = error;
  for (let depth = 0; depth < 5; depth++) {
    if (current instanceof AggregateError && current.errors.length > 0 && !messageOf(current)) current = current.errors[0];
    else if (current instanceof QueueBoxError && current.cause !== undefined) current = current.cause;
    else break;
  }
  return current;
}

function isConnectionError(error: unknown): boolean {
  const root = error instanceof AggregateError && error.errors.length > 0 ? error.errors[0] : error;
  return CONNECTION_CODES.has(codeOf(root) ?? '') || CONNECTION_CODES.has(codeOf(error) ?? '');
}

function codeOf(error: unknown): string | undefined {
  const code = typeof error === 'object' && error !== null ? (error as { code?: unknown }).code : undefined;
  return typeof code === 'string' && code !== '' ? code : undefined;
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

function firstLine(text: string): string {
  return text.split('\n')[0]!.trim();
}

function stackOf(error: unknown): string {
  const parts: string[] = [];
  let current: unknown = error;
  for (let depth = 0; current !== undefined && depth < 5; depth++) {
    parts.push(current instanceof Error ? (current.stack ?? current.message) : String(current));
    current = current instanceof Error ? current.cause : undefined;
  }
  return parts.join('\ncaused by: ');
}
