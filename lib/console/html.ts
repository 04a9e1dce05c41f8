/**
 * HTML built by a tagged template that escapes every interpolated value unless it is already
 * `SafeHtml` (the output of another `html` template). Payloads, errors, topics and keys are
 * written by senders and destinations, so nothing reaches a page unescaped.
 *
 * Bidirectional formatting characters (U+202E RIGHT-TO-LEFT OVERRIDE and the other embeddings,
 * overrides, isolates and marks) are written as a visible `\uXXXX`, as the CLI's `terminalText`
 * writes them: an override in a topic would otherwise reverse the console's own text after it on
 * the page (the attempt, the times, the link), and show a value other than the one stored.
 */

/** A fragment of markup that was built by `html` (its interpolations escaped). */
export class SafeHtml {
  constructor(readonly text: string) {}
  toString(): string {
    return this.text;
  }
}

const ENTITIES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;', '`': '&#96;' };

/** The characters escaped: HTML's own, and the bidirectional formatting characters (`terminalText`'s set). */
const ESCAPED = /[&<>"'`\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;

/** Escapes text for an HTML element body or a quoted attribute value; bidirectional formatting characters become a visible `\uXXXX`. */
export function escapeHtml(value: string): string {
  return value.replace(ESCAPED, (c) => ENTITIES[c] ?? `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/** A value accepted inside `html`: text is escaped, arrays are joined, null/undefined/false render nothing. */
export type HtmlValue = SafeHtml | string | number | boolean | null | undefined | readonly HtmlValue[];

function render(value: HtmlValue): string {
  if (value === null || value === undefined || value === false) return '';
  if (value instanceof SafeHtml) return value.text;
  if (Array.isArray(value)) return (value as readonly HtmlValue[]).map(render).join('');
  return escapeHtml(String(value));
}

/** Tagged template: `html\`<td>${untrusted}</td>\`` escapes `untrusted`. */
export function html(strings: TemplateStringsArray, ...values: HtmlValue[]): SafeHtml {
  let out = strings[0]!;
  for (let i = 0; i < values.length; i++) out += render(values[i]!) + strings[i + 1]!;
  return new SafeHtml(out);
}

/** A query string from defined values, for links (`href` attributes are escaped by `html`). */
export function queryString(params: Record<string, string | number | undefined>): string {
  const search = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== '') search.set(k, String(v));
  const text = search.toString();
  return text === '' ? '' : `?${text}`;
}
