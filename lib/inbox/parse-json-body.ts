/**
 * The body rule both receivers share: a message body is a UTF-8 JSON object (RFC 8259) that
 * PostgreSQL's `jsonb` can store, small enough in depth and keys for any JSONPath, and not made
 * larger than `inbox.maxBodyBytes` by storing it. The rule is the same on SQL Server, so a body
 * either database accepts fits both. A leading byte order mark (U+FEFF) is ignored, as RFC 8259
 * allows, whether the body comes as bytes (HTTP) or as text (SQS).
 *
 * One pass over the text runs *before* `JSON.parse` and before any JSONPath, and refuses:
 * nesting deeper than `MAX_JSON_DEPTH`, more than `MAX_JSON_KEYS` object keys, a `\u0000` escape
 * (jsonb cannot hold NUL), a lone UTF-16 surrogate (escaped or raw), a number token that is not a
 * JSON number (`007`, `1.`, `-`) or stands where no value may (`{12:1}`), a number beyond
 * PostgreSQL's `numeric` (more than 131,072 digits before the decimal point or more than 16,383
 * after it once the exponent is applied, or an exponent beyond ±1,073,741,822, which its input
 * refuses whatever the digits), and a body whose numbers, written out as `jsonb` stores them
 * (`1e1000` is 1,001 characters), make it larger than the limit given. The text `\\u0000` (an
 * escaped backslash) holds no NUL and passes. Numbers a JavaScript `number` would change (beyond
 * 2^53, `1.0`, `1e3`) are parsed as `JsonNumberText`, so an id extracted from them is the sender's
 * digits. PostgreSQL stores the payload as `jsonb` (docs/inbox.md, "What is stored"); SQL Server
 * stores the text.
 */
import { randomBytes } from 'node:crypto';
import { InboxRejectionError } from './inbox-rejection.ts';
import { JsonNumberText } from './json-number-text.ts';

/** Deepest nesting of objects and arrays a body may have. */
export const MAX_JSON_DEPTH = 64;
/** Most object keys (all levels together) a body may have. */
export const MAX_JSON_KEYS = 20_000;
/**
 * Largest decimal exponent (either sign) PostgreSQL's `numeric` input reads, whatever the digits
 * (it refuses INT_MAX / 2 and beyond). Only a zero (`0e1073741823`) reaches it: any other number
 * with such an exponent has too many digits before or after the point.
 */
export const MAX_NUMBER_EXPONENT = 1_073_741_822;
/** Most digits before the decimal point PostgreSQL's `numeric` holds (after the exponent is applied). */
export const MAX_NUMBER_INTEGER_DIGITS = 131_072;
/** Most digits after the decimal point PostgreSQL's `numeric` holds (after the exponent is applied). */
export const MAX_NUMBER_FRACTION_DIGITS = 16_383;

/** A parsed body: the text to store and the value to extract fields from. */
export interface JsonBody {
  /** The body as sent (decoded UTF-8, without a leading byte order mark). */
  text: string;
  /** The parsed object; numbers that JavaScript would change are `JsonNumberText`. */
  value: Record<string, unknown>;
}

/** The characters a number token is made of: the whole run is one token, checked against the grammar. */
const NUMBER_RUN = /[-+.\deE]+/y;
/** RFC 8259's number: no leading zeros, digits on both sides of the point, an optional exponent. */
const JSON_NUMBER = /^-?(0|[1-9]\d*)(?:\.(\d+))?(?:[eE]([+-]?\d+))?$/;

function refuse(message: string): never {
  throw new InboxRejectionError('invalid_json', message);
}

/**
 * Parses a UTF-8 JSON object body; throws `InboxRejectionError('invalid_json')` with the reason.
 * `maxStoredBytes` (the receivers pass `inbox.maxBodyBytes`) bounds the body's UTF-8 bytes
 * counted with every number as PostgreSQL's `jsonb` writes it; it is checked only when storing
 * makes the numbers longer, so a body is never refused for numbers that keep or lose length.
 */
export function parseJsonBody(raw: Buffer | string, maxStoredBytes = Number.POSITIVE_INFINITY): JsonBody {
  let text: string;
  try {
    // TextDecoder drops one leading byte order mark; a text body loses it the same way.
    text = typeof raw === 'string' ? raw : new TextDecoder('utf-8', { fatal: true }).decode(raw);
  } catch {
    refuse('body is not valid UTF-8');
  }
  if (typeof raw === 'string' && text.charCodeAt(0) === 0xfeff) text = text.slice(1);
  const { changed, growth } = scan(text);
  if (growth > 0) {
    const bytes = typeof raw === 'string' ? Buffer.byteLength(text) : raw.length - (raw[0] === 0xef && raw[1] === 0xbb && raw[2] === 0xbf ? 3 : 0);
    if (bytes + growth > maxStoredBytes) {
      refuse(
        `body is too large once stored: PostgreSQL writes its numbers out in full (1e1000 is 1,001 digits), which makes the body ${bytes + growth} bytes (${bytes} as sent), and a body is at most ${maxStoredBytes} bytes (inbox.maxBodyBytes)`,
      );
    }
  }
  let value: unknown;
  try {
    value = changed.length === 0 ? JSON.parse(text) : parseWithNumberTexts(text, changed);
  } catch (error) {
    // Its positions as sent: a parse of the text with the marked numbers counts the markers.
    refuse(`body is not valid JSON: ${(changed.length === 0 ? (error as Error) : parseError(text, error)).message}`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) refuse('body must be a JSON object');
  return { text, value: value as Record<string, unknown> };
}

/**
 * Checks the limits, the number tokens and storable text; returns where the number tokens
 * JavaScript would change are (`changed`: start, end, start, end…, flat: one array, not one per
 * token), and how many characters longer (or shorter, when negative) the
 * numbers are as `jsonb` writes them than as sent. Other syntax errors are left to `JSON.parse`,
 * which reports them.
 */
function scan(text: string): { changed: number[]; growth: number } {
  const changed: number[] = [];
  let growth = 0;
  /** The open objects (`{`) and arrays (`[`), innermost last. */
  const open: number[] = [];
  /** Whether the next token may be a value: at the start, after `:`, after `[`, after `,` in an array. */
  let valueNext = true;
  let keys = 0;
  let i = 0;
  while (i < text.length) {
    const c = text.charCodeAt(i);
    if (c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d) {
      i++;
      continue;
    }
    if (c === 0x2d || (c >= 0x30 && c <= 0x39)) {
      NUMBER_RUN.lastIndex = i;
      const token = NUMBER_RUN.exec(text)![0];
      if (!valueNext) refuse(`body is not valid JSON: number ${excerpt(token)} at position ${i} is not where a value may stand (object keys are strings)`);
      growth += storedNumberLength(token, i) - token.length;
      if (String(Number(token)) !== token) changed.push(i, i + token.length);
      i += token.length;
      valueNext = false;
      continue;
    }
    if (c === 0x22) {
      i = scanString(text, i + 1);
    } else if (c === 0x7b || c === 0x5b) {
      if (open.length >= MAX_JSON_DEPTH) refuse(`body nests deeper than ${MAX_JSON_DEPTH} levels`);
      open.push(c);
      i++;
      valueNext = c === 0x5b;
      continue;
    } else if (c === 0x7d || c === 0x5d) {
      open.pop();
      i++;
    } else if (c === 0x3a) {
      if (++keys > MAX_JSON_KEYS) refuse(`body has more than ${MAX_JSON_KEYS} keys`);
      i++;
      valueNext = true;
      continue;
    } else if (c === 0x2c) {
      i++;
      valueNext = open.at(-1) === 0x5b;
      continue;
    } else {
      i++;
    }
    valueNext = false;
  }
  return { changed, growth };
}

/**
 * Refuses a number token that is not a JSON number, or that PostgreSQL's `numeric` cannot hold;
 * returns the length of the token as `jsonb` writes it: no exponent, the digits before the point
 * from the first non-zero one (`0` when none), the digits after it that the token has once the
 * exponent moves the point (trailing zeros kept), and a minus sign only on a non-zero number.
 */
function storedNumberLength(token: string, at: number): number {
  const match = JSON_NUMBER.exec(token);
  if (match === null) refuse(`body is not valid JSON: ${excerpt(token)} at position ${at} is not a JSON number`);
  const [, integer = '', fraction = '', exponentText] = match;
  const exponent = exponentText === undefined ? 0 : Number(exponentText);
  if (Math.abs(exponent) > MAX_NUMBER_EXPONENT) {
    refuse(`number ${excerpt(token)} is out of range: its exponent is beyond ±${MAX_NUMBER_EXPONENT}, the largest PostgreSQL's numeric reads`);
  }
  // As PostgreSQL's numeric counts them once the exponent moves the point: digits after it
  // (trailing zeros included), and digits before it from the first non-zero one.
  const fractionDigits = Math.max(0, fraction.length - exponent);
  if (fractionDigits > MAX_NUMBER_FRACTION_DIGITS) {
    refuse(`number ${excerpt(token)} is out of range: ${fractionDigits} digits after the decimal point, PostgreSQL stores at most ${MAX_NUMBER_FRACTION_DIGITS}`);
  }
  const digits = integer + fraction;
  const leadingZeros = /^0*/.exec(digits)![0].length;
  const zero = leadingZeros === digits.length;
  const integerDigits = zero ? 0 : Math.max(0, integer.length + exponent - leadingZeros);
  if (integerDigits > MAX_NUMBER_INTEGER_DIGITS) {
    refuse(`number ${excerpt(token)} is out of range: ${integerDigits} digits before the decimal point, PostgreSQL stores at most ${MAX_NUMBER_INTEGER_DIGITS}`);
  }
  return (!zero && token.startsWith('-') ? 1 : 0) + Math.max(1, integerDigits) + (fractionDigits > 0 ? 1 + fractionDigits : 0);
}

/** The start of a long token, for a message. */
function excerpt(token: string): string {
  return token.length <= 40 ? token : `${token.slice(0, 40)}… (${token.length} characters)`;
}

/** Four hex digits, as a `\u` escape must have them. */
const HEX4 = /[0-9A-Fa-f]{4}/y;

/**
 * The code unit of the `\u` escape at `at` (the backslash). When its four characters are not
 * all hex digits (`\u00zz`) the body is not JSON, and it is refused with `JSON.parse`'s reason:
 * read as a number, such an escape would pass for another one (`parseInt('00zz', 16)` is 0, NUL).
 */
function escapedUnit(text: string, at: number): number {
  HEX4.lastIndex = at + 2;
  if (HEX4.test(text)) return parseInt(text.slice(at + 2, at + 6), 16);
  try {
    JSON.parse(text);
  } catch (error) {
    refuse(`body is not valid JSON: ${(error as Error).message}`);
  }
  // Not reached: a string holding a malformed escape is never JSON.
  refuse(`body is not valid JSON: bad \\u escape at position ${at}`);
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
      const unit = escapedUnit(text, i);
      if (unit === 0) refuse('body must not contain NUL characters (\\u0000): PostgreSQL cannot store them');
      if (unit >= 0xd800 && unit <= 0xdbff) {
        const next = text.slice(i + 6, i + 8) === '\\u' ? escapedUnit(text, i + 6) : Number.NaN;
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
 * `JSON.parse` with the number tokens at `changed` (start, end pairs) kept as `JsonNumberText`:
 * each is written into the text as a string carrying a per-call random marker (a sender cannot
 * forge it), and the strings that carry it are turned back, in place, in the tree `JSON.parse`
 * made. Nothing else of the tree is copied or visited twice. Measured on 1 MiB bodies: all `1.0`
 * 0.4 s; 350,000 empty objects and one `1.0` no more than without the `1.0` plus one walk of the
 * tree. (A copy of the tree cost 1.1 s and 160 MB for the first; `JSON.parse`'s reviver, which
 * builds a context for every value of the body, 0.8–2.6 s and 100 MB for the second.)
 */
function parseWithNumberTexts(text: string, changed: readonly number[]): unknown {
  const marker = `${randomBytes(12).toString('base64url')}#`;
  const parts: string[] = [];
  let at = 0;
  for (let i = 0; i < changed.length; i += 2) {
    parts.push(text.slice(at, changed[i]), '"', marker, text.slice(changed[i], changed[i + 1]), '"');
    at = changed[i + 1]!;
  }
  parts.push(text.slice(at));
  const value: unknown = JSON.parse(parts.join(''));
  const restore = (node: unknown): unknown => {
    if (typeof node === 'string') return node.startsWith(marker) ? new JsonNumberText(node.slice(marker.length)) : node;
    if (Array.isArray(node)) {
      for (let i = 0; i < node.length; i++) {
        const item: unknown = node[i];
        if (typeof item === 'string' || (typeof item === 'object' && item !== null)) node[i] = restore(item);
      }
    } else if (typeof node === 'object' && node !== null) {
      const record = node as Record<string, unknown>;
      // Own data properties, as JSON.parse makes them ("__proto__" among them): assigned in place.
      for (const key of Object.keys(record)) {
        const item = record[key];
        if (typeof item === 'string' || (typeof item === 'object' && item !== null)) record[key] = restore(item);
      }
    }
    return node;
  };
  return restore(value);
}

/** The error `JSON.parse` gives for `text` itself (a syntax error of the marked text is one of the text). */
function parseError(text: string, fallback: unknown): Error {
  try {
    JSON.parse(text);
  } catch (error) {
    return error as Error;
  }
  return fallback as Error;
}

/** Replaces what PostgreSQL cannot store (NUL, lone surrogates) by U+FFFD; reports whether it did. */
export function storableText(text: string): { text: string; replaced: boolean } {
  const fixed = text.replace(/\u0000|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g, '\uFFFD');
  return { text: fixed, replaced: fixed !== text };
}
