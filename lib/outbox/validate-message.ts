/**
 * Validation of an outbox message before it is written: the same rules for `enqueue` and for the
 * inbox relay. Errors name the field (`ValidationError.field`). `topic` and `key` are counted as
 * the database's columns count them (`columnLength`): code points on PostgreSQL (`varchar(255)`:
 * an emoji is one), UTF-16 code units on SQL Server (`NVARCHAR(255)`: an emoji is two).
 */
import { columnLength, lengthUnit, type ColumnDialect } from '../db/column-length.ts';
import type { OutboxMessageInput } from '../db/driver.ts';
import { ValidationError } from '../errors.ts';

/** Longest `topic` and `key` (the outbox's 255-character columns), in the unit each dialect counts. */
export const MAX_TOPIC_LENGTH = 255;
export const MAX_OUTBOX_KEY_LENGTH = 255;

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** True for `{…}` objects (not arrays, not null, not class instances like Date). */
export function isJsonObject(value: unknown): value is Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return false;
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

/** Throws unless `value` survives a JSON round trip unchanged in shape (no undefined, functions, BigInt, cycles). */
function assertJson(field: string, value: unknown): void {
  let text: string;
  try {
    text = JSON.stringify(value);
  } catch (error) {
    throw new ValidationError(field, `must be JSON-serializable: ${(error as Error).message}`);
  }
  if (text === undefined) throw new ValidationError(field, 'must be JSON-serializable');
  if (text.includes('\\u0000')) throw new ValidationError(field, 'must not contain NUL characters (PostgreSQL jsonb cannot store them)');
}

/** Throws naming `field` when `value` is longer than `max` as `dialect`'s columns count it. */
function checkColumnLength(field: string, value: string, max: number, dialect: ColumnDialect): void {
  const length = columnLength(value, dialect);
  if (length > max) throw new ValidationError(field, `must be at most ${max} ${lengthUnit(dialect)} (got ${length})`);
}

/** Validates and normalizes a message for `dialect`'s tables (default PostgreSQL); returns a copy safe to insert. */
export function validateOutboxMessage(message: unknown, dialect: ColumnDialect = 'postgres'): OutboxMessageInput {
  if (!isJsonObject(message)) throw new ValidationError('message', 'must be an object');
  const m = message as Partial<OutboxMessageInput> & Record<string, unknown>;
  const allowed = new Set(['topic', 'payload', 'key', 'headers', 'scheduledAt', 'delayMs', 'maxAttempts', 'id']);
  for (const field of Object.keys(m)) {
    if (!allowed.has(field)) throw new ValidationError(`message.${field}`, 'is not a known field');
  }
  if (typeof m.topic !== 'string' || m.topic.trim() === '') throw new ValidationError('message.topic', 'is required and must be a non-empty string');
  checkColumnLength('message.topic', m.topic, MAX_TOPIC_LENGTH, dialect);
  if (!isJsonObject(m.payload)) throw new ValidationError('message.payload', 'must be a JSON object');
  assertJson('message.payload', m.payload);
  if (m.key !== undefined && m.key !== null) {
    if (typeof m.key !== 'string' || m.key === '') throw new ValidationError('message.key', 'must be a non-empty string or null');
    checkColumnLength('message.key', m.key, MAX_OUTBOX_KEY_LENGTH, dialect);
  }
  if (m.headers !== undefined) {
    if (!isJsonObject(m.headers)) throw new ValidationError('message.headers', 'must be an object of string values');
    for (const [name, value] of Object.entries(m.headers)) {
      if (name === '' || name.length > 256) throw new ValidationError(`message.headers.${name}`, 'names must be 1–256 characters');
      if (typeof value !== 'string') throw new ValidationError(`message.headers.${name}`, 'must be a string');
    }
    assertJson('message.headers', m.headers);
  }
  if (m.scheduledAt !== undefined && (!(m.scheduledAt instanceof Date) || Number.isNaN(m.scheduledAt.getTime()))) {
    throw new ValidationError('message.scheduledAt', 'must be a valid Date');
  }
  if (m.delayMs !== undefined && (typeof m.delayMs !== 'number' || !Number.isFinite(m.delayMs) || m.delayMs < 0)) {
    throw new ValidationError('message.delayMs', 'must be a non-negative number of milliseconds');
  }
  if (m.scheduledAt !== undefined && m.delayMs !== undefined) throw new ValidationError('message.delayMs', 'cannot be combined with scheduledAt');
  if (m.maxAttempts !== undefined && (!Number.isInteger(m.maxAttempts) || m.maxAttempts < 1 || m.maxAttempts > 1000)) {
    throw new ValidationError('message.maxAttempts', 'must be an integer from 1 to 1000');
  }
  if (m.id !== undefined && (typeof m.id !== 'string' || !UUID.test(m.id))) throw new ValidationError('message.id', 'must be a UUID');
  return {
    topic: m.topic,
    payload: m.payload,
    key: m.key ?? null,
    headers: m.headers ?? {},
    ...(m.scheduledAt !== undefined ? { scheduledAt: m.scheduledAt } : {}),
    ...(m.delayMs !== undefined ? { delayMs: m.delayMs } : {}),
    ...(m.maxAttempts !== undefined ? { maxAttempts: m.maxAttempts } : {}),
    ...(m.id !== undefined ? { id: m.id } : {}),
  };
}
