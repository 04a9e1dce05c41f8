/**
 * Text every QueueBox table can hold. PostgreSQL refuses a NUL character (U+0000) in `text`,
 * `varchar` and `jsonb`. A lone UTF-16 surrogate (U+D800–U+DFFF without the other half of its
 * pair) has no UTF-8 form: `jsonb` refuses its `\ud800` escape, and a `text` value reaches the
 * database with U+FFFD in its place, so two different keys could become one. SQS and
 * EventBridge refuse both as well. The inbox applies the same rule to what senders post,
 * `enqueue` to what the application writes, on every database.
 */

const NUL_WORDS = 'a NUL character (U+0000)';
const SURROGATE_WORDS = 'a lone UTF-16 surrogate (half of a surrogate pair)';
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
/** An escape of a NUL or of a surrogate whose backslash is not itself escaped (preceded by an even run of backslashes). */
const UNSTORABLE_ESCAPE = /(?<!\\)(?:\\\\)*\\u(0000|d[89a-f][0-9a-f]{2})/i;

/** What in `value` no QueueBox table can hold, in words for an error message; undefined when it can be stored. */
export function unstorableText(value: string): string | undefined {
  if (value.includes('\u0000')) return NUL_WORDS;
  if (LONE_SURROGATE.test(value)) return SURROGATE_WORDS;
  return undefined;
}

/**
 * `unstorableText` for the JSON text `JSON.stringify` produced. It writes a NUL as the escape
 * `\u0000` and a lone surrogate as an escape `\ud800`…`\udfff` (a whole pair stays as it is), so
 * an escape counts only when its backslash is not itself escaped: the text `\\u0000` (a
 * backslash, then `u0000`) holds no NUL and passes.
 */
export function unstorableJsonText(text: string): string | undefined {
  if (!text.includes('\\u')) return undefined;
  const found = UNSTORABLE_ESCAPE.exec(text);
  if (found === null) return undefined;
  return found[1] === '0000' ? NUL_WORDS : SURROGATE_WORDS;
}
