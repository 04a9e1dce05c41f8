/**
 * Validation of an outbox message before it is written: the same rules for `enqueue` and for the
 * inbox relay. Errors name the field (`ValidationError.field`). `topic` and `key` are counted as
 * the database's columns count them (`columnLength`): code points on PostgreSQL (`varchar(255)`:
 * an emoji is one), UTF-16 code units on SQL Server (`NVARCHAR(255)`: an emoji is two).
 */
import { columnLength, lengthUnit, type ColumnDialect } from '../db/column-length.ts';
import type { OutboxMessageInput } from '../db/driver.ts';
import { unstorableJsonText, unstorableText } from '../db/storable-text.ts';
import { ValidationError } from '../errors.ts';

/** Longest `topic` and `key` (the outbox's 255-character columns), in the unit each dialect counts. */
export const MAX_TOPIC_LENGTH = 255;
export const MAX_OUTBOX_KEY_LENGTH = 255;
/** Highest `maxAttempts` (deliveries, the first included), of a message and of `enqueue`'s default. */
export const MAX_ATTEMPTS_LIMIT = 1000;
/**
 * Longest `delayMs`: 2^31 − 1 seconds (about 68 years). SQL Server adds the delay to its clock
 * as an INT number of seconds (`DATEADD`); PostgreSQL's interval would take more, but a message
 * valid on one database is valid on the other.
 */
export const MAX_ENQUEUE_DELAY_MS = 2_147_483_647_000;
/** `scheduledAt` range: years 1 to 9999 (UTC), what PostgreSQL reads from ISO text and SQL Server's `DATETIME2` holds. */
const EARLIEST_SCHEDULE = Date.parse('0001-01-01T00:00:00.000Z');
const LATEST_SCHEDULE = Date.parse('9999-12-31T23:59:59.999Z');

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** True for `{…}` objects (not arrays, not null, not class instances like Date). */
export function isJsonObject(value: unknown): value is Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return false;
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

/**
 * The JSON text of `value`; throws naming `field` unless it serializes (no BigInt, no cycles), to
 * a JSON object (an own `toJSON` cannot turn it into a string or an array), and holds only
 * storable text (`unstorableJsonText`: no NUL, no lone surrogate, in names or values).
 */
function jsonObjectText(field: string, value: unknown): string {
  let text: string | undefined;
  try {
    text = JSON.stringify(value);
  } catch (error) {
    throw new ValidationError(field, `must be JSON-serializable: ${(error as Error).message}`);
  }
  if (text === undefined || !text.startsWith('{')) throw new ValidationError(field, `must serialize to a JSON object (got ${text === undefined ? 'nothing' : excerpt(text)})`);
  const unstorable = unstorableJsonText(text);
  if (unstorable !== undefined) throw new ValidationError(field, `must not contain ${unstorable}: the database cannot store it`);
  return text;
}

/**
 * Throws naming `message.payload` unless the payload is a plain object (`{…}`, or of a null
 * prototype) or an object with a `toJSON` method, whose result `jsonObjectText` then checks. An
 * instance of another class is refused: `JSON.stringify` would keep its own enumerable fields and
 * drop the rest without a word (a `Map` becomes `{}`, a getter on the class is left out).
 */
function checkPayloadObject(payload: unknown): asserts payload is Record<string, unknown> {
  if (isJsonObject(payload)) return;
  if (typeof payload === 'object' && payload !== null && !Array.isArray(payload)) {
    if (typeof (payload as { toJSON?: unknown }).toJSON === 'function') return;
    const name = (payload.constructor as { name?: unknown } | undefined)?.name;
    throw new ValidationError(
      'message.payload',
      `must be a plain JSON object, or an object whose toJSON returns one (what it serializes to is stored); got ${typeof name === 'string' && name !== '' ? `an instance of ${name}` : 'an object of another prototype'}, which JSON.stringify would turn into its own fields alone: pass { ...payload } or give the class a toJSON`,
    );
  }
  throw new ValidationError('message.payload', `must be a JSON object (got ${Array.isArray(payload) ? 'an array' : payload === null ? 'null' : typeof payload})`);
}

/**
 * Throws naming the path (`message.payload.amount`, `message.payload.items[2]`) of the first
 * number in `value` that is `NaN`, `Infinity` or `-Infinity`: JSON has none of them, and
 * `JSON.stringify` would store `null` in their place. `text` is what `value` serialized to: only
 * a text holding `null` can hide one, so other payloads are not walked.
 */
export function checkFiniteNumbers(field: string, value: unknown, text: string): void {
  if (!text.includes('null')) return;
  const paths = new Map<object, string>();
  let found: string | undefined;
  // The replacer sees each value as it is serialized (`toJSON` applied) and, as `this`, the object
  // that holds it: the root's holder is JSON.stringify's own wrapper, any other one a value seen before.
  JSON.stringify(value, function (this: object, key: string, v: unknown) {
    if (found !== undefined) return undefined;
    const holder = paths.get(this);
    const path = holder === undefined ? field : `${holder}${propertyPath(this, key)}`;
    if (typeof v === 'number' && !Number.isFinite(v)) {
      found = path;
      return undefined;
    }
    if (typeof v === 'object' && v !== null) paths.set(v, path);
    return v;
  });
  if (found !== undefined) throw new ValidationError(found, 'must be a finite number: JSON has no NaN or Infinity (JSON.stringify would store null)');
}

/** `.name` or `["a name"]` for an object's key, `[2]` for an array's index. */
function propertyPath(holder: object, key: string): string {
  if (Array.isArray(holder)) return `[${key}]`;
  return /^[A-Za-z_$][\w$]*$/.test(key) ? `.${key}` : `[${JSON.stringify(key)}]`;
}

/** The start of a long text, for a message. */
function excerpt(text: string): string {
  return text.length <= 40 ? text : `${text.slice(0, 40)}…`;
}

/** Throws naming `field` when `value` holds text no QueueBox table can store (`unstorableText`). */
function checkStorable(field: string, value: string): void {
  const unstorable = unstorableText(value);
  if (unstorable !== undefined) throw new ValidationError(field, `must not contain ${unstorable}: the database cannot store it`);
}

/** Throws naming `field` unless `value` is an integer from 1 to `MAX_ATTEMPTS_LIMIT`. */
export function checkMaxAttempts(field: string, value: unknown): void {
  if (!Number.isInteger(value) || (value as number) < 1 || (value as number) > MAX_ATTEMPTS_LIMIT) {
    throw new ValidationError(field, `must be an integer from 1 to ${MAX_ATTEMPTS_LIMIT}`);
  }
}

/** Throws naming `field` when `value` is longer than `max` as `dialect`'s columns count it. */
function checkColumnLength(field: string, value: string, max: number, dialect: ColumnDialect): void {
  const length = columnLength(value, dialect);
  if (length > max) throw new ValidationError(field, `must be at most ${max} ${lengthUnit(dialect)} (got ${length})`);
}

/** Validates and normalizes a message for `dialect`'s tables (default PostgreSQL); returns a copy safe to insert. */
export function validateOutboxMessage(message: unknown, dialect: ColumnDialect = 'postgres'): OutboxMessageInput {
  if (Array.isArray(message)) throw new ValidationError('message', 'must be one message object, not an array: enqueue takes one message per call (call it once for each message, in the same transaction)');
  if (!isJsonObject(message)) throw new ValidationError('message', 'must be an object');
  const m = message as Partial<OutboxMessageInput> & Record<string, unknown>;
  const allowed = new Set(['topic', 'payload', 'key', 'headers', 'scheduledAt', 'delayMs', 'maxAttempts', 'id']);
  for (const field of Object.keys(m)) {
    if (!allowed.has(field)) throw new ValidationError(`message.${field}`, 'is not a known field');
  }
  if (typeof m.topic !== 'string' || m.topic.trim() === '') throw new ValidationError('message.topic', 'is required and must be a non-empty string');
  checkColumnLength('message.topic', m.topic, MAX_TOPIC_LENGTH, dialect);
  checkStorable('message.topic', m.topic);
  checkPayloadObject(m.payload);
  const payloadText = jsonObjectText('message.payload', m.payload);
  if (m.key !== undefined && m.key !== null) {
    if (typeof m.key !== 'string' || m.key === '') throw new ValidationError('message.key', 'must be a non-empty string or null');
    checkColumnLength('message.key', m.key, MAX_OUTBOX_KEY_LENGTH, dialect);
    checkStorable('message.key', m.key);
  }
  if (m.headers !== undefined) {
    if (!isJsonObject(m.headers)) throw new ValidationError('message.headers', 'must be an object of string values');
    for (const [name, value] of Object.entries(m.headers)) {
      if (name === '' || name.length > 256) throw new ValidationError(`message.headers.${name}`, 'names must be 1–256 characters');
      if (typeof value !== 'string') throw new ValidationError(`message.headers.${name}`, 'must be a string');
      const unstorable = unstorableText(name) ?? unstorableText(value);
      if (unstorable !== undefined) throw new ValidationError(`message.headers.${name}`, `must not contain ${unstorable} in its name or value: the database cannot store it`);
    }
  }
  if (m.scheduledAt !== undefined) {
    const at = m.scheduledAt instanceof Date ? m.scheduledAt.getTime() : Number.NaN;
    if (Number.isNaN(at)) throw new ValidationError('message.scheduledAt', 'must be a valid Date');
    if (at < EARLIEST_SCHEDULE || at > LATEST_SCHEDULE) throw new ValidationError('message.scheduledAt', 'must be within the years 1 to 9999 (UTC)');
  }
  if (m.delayMs !== undefined && (typeof m.delayMs !== 'number' || !Number.isFinite(m.delayMs) || m.delayMs < 0 || m.delayMs > MAX_ENQUEUE_DELAY_MS)) {
    throw new ValidationError('message.delayMs', `must be a number of milliseconds from 0 to ${MAX_ENQUEUE_DELAY_MS} (2^31 − 1 seconds, about 68 years)`);
  }
  if (m.scheduledAt !== undefined && m.delayMs !== undefined) throw new ValidationError('message.delayMs', 'cannot be combined with scheduledAt');
  if (m.maxAttempts !== undefined) checkMaxAttempts('message.maxAttempts', m.maxAttempts);
  if (m.id !== undefined && (typeof m.id !== 'string' || !UUID.test(m.id))) throw new ValidationError('message.id', 'must be a UUID');
  return {
    topic: m.topic,
    payload: m.payload,
    // The text checked is the text stored: a second JSON.stringify could differ (toJSON, getters).
    payloadText,
    key: m.key ?? null,
    headers: m.headers ?? {},
    ...(m.scheduledAt !== undefined ? { scheduledAt: m.scheduledAt } : {}),
    ...(m.delayMs !== undefined ? { delayMs: m.delayMs } : {}),
    ...(m.maxAttempts !== undefined ? { maxAttempts: m.maxAttempts } : {}),
    ...(m.id !== undefined ? { id: m.id } : {}),
  };
}
