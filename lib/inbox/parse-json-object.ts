/**
 * The body rule both receivers share: a message body is a UTF-8 JSON object that jsonb can store.
 */
import { InboxRejectionError } from './inbox-rejection.ts';

/** Parses a UTF-8 JSON object; throws `InboxRejectionError('invalid_json')`. */
export function parseJsonObject(raw: Buffer | string): Record<string, unknown> {
  let text: string;
  try {
    text = typeof raw === 'string' ? raw : new TextDecoder('utf-8', { fatal: true }).decode(raw);
  } catch {
    throw new InboxRejectionError('invalid_json', 'body is not valid UTF-8');
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new InboxRejectionError('invalid_json', `body is not valid JSON: ${(error as Error).message}`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new InboxRejectionError('invalid_json', 'body must be a JSON object');
  }
  if (text.includes('\\u0000')) throw new InboxRejectionError('invalid_json', 'body must not contain NUL characters (\\u0000)');
  return value as Record<string, unknown>;
}
