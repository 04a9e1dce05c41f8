/**
 * The body rule both receivers share: a message body is a UTF-8 JSON object that PostgreSQL's
 * `jsonb` can store, small enough in depth and keys for any JSONPath, kept as the text sent.
 *
 * One pass over the text runs *before* `JSON.parse` and before any JSONPath, and refuses:
 * nesting deeper than `MAX_JSON_DEPTH`, more than `MAX_JSON_KEYS` object keys, a `\u0000` escape
 * (jsonb cannot hold NUL), a lone UTF-16 surrogate (escaped or raw), and a number beyond
 * jsonb's range. The text `\\u0000` (an escaped backslash) holds no NUL and passes. Numbers a
 * JavaScript `number` would change (beyond 2^53, `1.0`, `1e3`) are parsed as `JsonNumberText`, so
 * an id extracted from them is the sender's digits; the stored payload is the text itself.
 */
import { randomUUID } from 'node:crypto';
import { InboxRejectionError } from './inbox-rejection.ts';
import { JsonNumberText } from './json-number-text.ts';

/** Deepest nesting of objects and arrays a body may have. */
export const MAX_JSON_DEPTH = 64;
/** Most object keys (all levels together) a body may have. */
export const MAX_JSON_KEYS = 20_000;
/** Largest decimal exponent of a number (jsonb's numeric holds far more; this keeps it cheap). */
const MAX_EXPONENT = 1000;

/** A parsed body: the text to store and the value to extract fields from. */
export interface JsonBody {
  /** The body exactly as sent (decoded UTF-8). */
  text: string;
  /** The parsed object; numbers that JavaScript would change are `JsonNumberText`. */
  value: Record<string, unknown>;
}

const NUMBER = /-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?/y;

function refuse(message: string): never {
  throw new InboxRejectionError('invalid_json', message);
}

/** Parses a UTF-8 JSON object body; throws `InboxRejectionError('invalid_json')` with the reason. */
export function parseJsonBody(raw: Buffer | string): JsonBody {
  let text: string;
  try {
    text = typeof raw === 'string' ? raw : new TextDecoder('utf-8', { fatal: true }).decode(raw);
  } catch {
    refuse('body is not valid UTF-8');
  }
  const numbers = scan(text);
  let value: unknown;
  try {
    value = numbers.length === 0 ? JSON.parse(text) : parseWithNumberTexts(text, numbers);
  } catch (error) {
    refuse(`body is not valid JSON: ${(error as Error).message}`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) refuse('body must be a JSON object');
  return { text, value: value as Record<string, unknown> };
}

/** Checks the limits and storable text; returns the [start, end) of number tokens JavaScript would change. */
function scan(text: string): Array<[number, number]> {
  const numbers: Array<[number, number]> = [];
  let depth = 0;
  let keys = 0;
  let i = 0;
  while (i < text.length) {
    const c = text.charCodeAt(i);
    if (c === 0x22) {
      i = scanString(text, i + 1);
    } else if (c === 0x7b || c === 0x5b) {
      if (++depth > MAX_JSON_DEPTH) refuse(`body nests deeper than ${MAX_JSON_DEPTH} levels`);
      i++;
    } else if (c === 0x7d || c === 0x5d) {
      depth--;
      i++;
    } else if (c === 0x3a) {
      if (++keys > MAX_JSON_KEYS) refuse(`body has more than ${MAX_JSON_KEYS} keys`);
      i++;
    } else if (c === 0x2d || (c >= 0x30 && c <= 0x39)) {
      NUMBER.lastIndex = i;
      const match = NUMBER.exec(text);
      if (match === null) return numbers; // not a number: JSON.parse reports the syntax error
      const token = match[0];
      const exponent = /[eE]([+-]?\d+)$/.exec(token);
      if (exponent !== null && Math.abs(Number(exponent[1])) > MAX_EXPONENT) refuse(`number ${token.slice(0, 40)} is out of range`);
      if (String(Number(token)) !== token) numbers.push([i, i + token.length]);
      i += token.length;
    } else {
      i++;
    }
  }
  return numbers;
}

/** Scans a string body from `i` (after the quote) to after the closing quote; refuses NUL and lone surrogates. */
function scanString(text: string, start: number): number {
  let i = start;
  while (i < text.length) {
    const c = text.charCodeAt(i);
    if (c === 0x22) return i + 1;
    if (c === 0x5c) {
      if (text[i + 1] !== 'u') {
        i += 2;
        continue;
      }
      const unit = parseInt(text.slice(i + 2, i + 6), 16);
      if (unit === 0) refuse('body must not contain NUL characters (\\u0000): PostgreSQL cannot store them');
      if (unit >= 0xd800 && unit <= 0xdbff) {
        const next = text.slice(i + 6, i + 8) === '\\u' ? parseInt(text.slice(i + 8, i + 12), 16) : Number.NaN;
        if (!(next >= 0xdc00 && next <= 0xdfff)) refuse('body contains a lone UTF-16 surrogate escape (\\ud800-\\udbff without its pair), which PostgreSQL cannot store');
        i += 12;
        continue;
      }
      if (unit >= 0xdc00 && unit <= 0xdfff) refuse('body contains a lone UTF-16 surrogate escape (\\udc00-\\udfff without its pair), which PostgreSQL cannot store');
      i += 6;
      continue;
    }
    if (c >= 0xd800 && c <= 0xdbff) {
      const next = text.charCodeAt(i + 1);
      if (!(next >= 0xdc00 && next <= 0xdfff)) refuse('body contains a lone UTF-16 surrogate, which PostgreSQL cannot store');
      i += 2;
      continue;
    }
    if (c >= 0xdc00 && c <= 0xdfff) refuse('body contains a lone UTF-16 surrogate, which PostgreSQL cannot store');
    if (c === 0) refuse('body must not contain NUL characters: PostgreSQL cannot store them');
    i++;
  }
  return i;
}

/**
 * `JSON.parse` with the given number tokens turned into `JsonNumberText`: each token is rewritten
 * as a string carrying a per-call random marker (a sender cannot forge it), then restored.
 */
function parseWithNumberTexts(text: string, numbers: Array<[number, number]>): unknown {
  const marker = `${randomUUID()}#`;
  let rewritten = '';
  let at = 0;
  for (const [start, end] of numbers) {
    rewritten += `${text.slice(at, start)}"${marker}${text.slice(start, end)}"`;
    at = end;
  }
  rewritten += text.slice(at);
  const restore = (value: unknown): unknown => {
    if (typeof value === 'string') return value.startsWith(marker) ? new JsonNumberText(value.slice(marker.length)) : value;
    if (Array.isArray(value)) return value.map(restore);
    if (typeof value === 'object' && value !== null) {
      const out: Record<string, unknown> = {};
      for (const [k, v] of Object.entries(value)) Object.defineProperty(out, k, { value: restore(v), enumerable: true, writable: true, configurable: true });
      return out;
    }
    return value;
  };
  return restore(JSON.parse(rewritten));
}

/** Replaces what PostgreSQL cannot store (NUL, lone surrogates) by U+FFFD; reports whether it did. */
export function storableText(text: string): { text: string; replaced: boolean } {
  const fixed = text.replace(/\u0000|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g, '\uFFFD');
  return { text: fixed, replaced: fixed !== text };
}
