/**
 * The JSON limits `PutEvents` documents for `Detail`, checked on the text QueueBox sends:
 *
 * - an integer (a JSON number without fraction or exponent) must lie within a signed 64-bit long,
 *   -9,223,372,036,854,775,808 to 9,223,372,036,854,775,807;
 * - JSON is processed only up to 1,000 levels deep (older versions of the API reference said
 *   1,100; the stricter value is used). The `Detail` object itself is level 1, so a payload inside
 *   the envelope may nest 999 levels.
 *
 * A number with a fraction or an exponent (`1.5`, `1e21`, `12345678901234567890.0`) is a JSON
 * number, not an integer: AWS states no range for it, and it is sent as is.
 *
 * One pass over the text, skipping strings (escapes included); it runs for every EventBridge row,
 * so a text with no run of 19 digits and too short to nest 1,001 levels is not scanned at all.
 */

/** Deepest nesting of `Detail` that `PutEvents` processes (objects and arrays, `Detail` itself is 1). */
export const EVENTBRIDGE_MAX_DETAIL_DEPTH = 1000;

const INT64_MAX_DIGITS = '9223372036854775807';
const INT64_MIN_DIGITS = '9223372036854775808';
/** Integers of up to 18 digits always fit; 19 may not. */
const LONG_DIGIT_RUN = /\d{19}/;

/** Why `PutEvents` would refuse this `Detail` text, or `undefined` when it is within both limits. */
export interface DetailLimitError {
  error: string;
  errorClass: 'IntegerOutOfRange' | 'DetailTooDeep';
}

/** Checks the integers and the nesting of a `Detail` JSON text (assumed to be valid JSON). */
export function eventBridgeDetailLimitError(detail: string): DetailLimitError | undefined {
  const checkIntegers = LONG_DIGIT_RUN.test(detail);
  // Each level takes an opening and a closing bracket.
  if (!checkIntegers && detail.length <= 2 * EVENTBRIDGE_MAX_DETAIL_DEPTH) return undefined;
  const n = detail.length;
  let depth = 0;
  for (let i = 0; i < n; i++) {
    const c = detail.charCodeAt(i);
    if (c === 0x22 /* " */) {
      for (i++; i < n; i++) {
        const s = detail.charCodeAt(i);
        if (s === 0x5c /* \ */) i++;
        else if (s === 0x22) break;
      }
    } else if (c === 0x7b /* { */ || c === 0x5b /* [ */) {
      if (++depth > EVENTBRIDGE_MAX_DETAIL_DEPTH) {
        return {
          error: `event detail nests deeper than ${EVENTBRIDGE_MAX_DETAIL_DEPTH} levels (the envelope is the first, so the payload may nest ${EVENTBRIDGE_MAX_DETAIL_DEPTH - 1}); EventBridge PutEvents processes JSON up to ${EVENTBRIDGE_MAX_DETAIL_DEPTH} levels deep`,
          errorClass: 'DetailTooDeep',
        };
      }
    } else if (c === 0x7d /* } */ || c === 0x5d /* ] */) {
      depth--;
    } else if (checkIntegers && (c === 0x2d /* - */ || (c >= 0x30 && c <= 0x39))) {
      const start = i;
      let integer = true;
      for (; i + 1 < n; i++) {
        const d = detail.charCodeAt(i + 1);
        if (d === 0x2e /* . */ || d === 0x65 /* e */ || d === 0x45 /* E */ || d === 0x2b /* + */) integer = false;
        else if (d !== 0x2d && (d < 0x30 || d > 0x39)) break;
      }
      if (integer && !fitsInt64(detail.slice(start, i + 1))) {
        const token = detail.slice(start, i + 1);
        const shown = token.length > 40 ? `${token.slice(0, 40)}… (${token.length} characters)` : token;
        return {
          error: `event detail has the integer ${shown}, outside the signed 64-bit range EventBridge PutEvents accepts (-9223372036854775808 to 9223372036854775807)`,
          errorClass: 'IntegerOutOfRange',
        };
      }
    }
  }
  return undefined;
}

/** True when an integer token (`-?digits`) lies within a signed 64-bit long. */
function fitsInt64(token: string): boolean {
  const negative = token.startsWith('-');
  let digits = negative ? token.slice(1) : token;
  if (digits.length < 19) return true;
  digits = digits.replace(/^0+(?=\d)/, '');
  if (digits.length !== 19) return digits.length < 19;
  return digits <= (negative ? INT64_MIN_DIGITS : INT64_MAX_DIGITS);
}
