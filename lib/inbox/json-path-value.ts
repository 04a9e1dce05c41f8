/**
 * Reads one scalar out of a message body with a JSONPath expression (`jsonpath-plus`).
 */
import { JSONPath } from 'jsonpath-plus';
import { InboxRejectionError } from './inbox-rejection.ts';
import { JsonNumberText } from './json-number-text.ts';

/**
 * The first value `path` selects in `json`, as a string: strings as they are, numbers as the
 * sender wrote them (a `JsonNumberText`) or in their decimal form. Scripts never run (`eval: false`). `undefined` when the path selects nothing, `null` or an empty string.
 * Throws `InboxRejectionError('invalid_field')` when it selects an object, array or boolean;
 * `field` names the config key in that message.
 */
export function jsonPathText(json: unknown, path: string, field: string): string | undefined {
  const matches = JSONPath({ path, json: json as object, wrap: true, eval: false }) as unknown[];
  const value = matches[0];
  if (value === undefined || value === null || value === '') return undefined;
  if (typeof value === 'string') return value;
  if (value instanceof JsonNumberText) return value.text;
  if (typeof value === 'number' && Number.isFinite(value)) return String(value);
  throw new InboxRejectionError('invalid_field', `${field} ${path} must select a string or a number, but selected ${Array.isArray(value) ? 'an array' : typeof value}`);
}
