/**
 * What the console shows of a row's payload, headers and errors: secrets redacted.
 *
 * Three layers: values under a key that names a secret (`password`, `token`, `authorization`,
 * `signature`, `apiKey`…) become `***`, whole objects and lists included; every string goes
 * through `redactSecrets`, the redactor `last_error` is stored through (URL passwords, bearer
 * tokens, secret-named pairs, AWS key ids, JWTs, provider tokens by prefix); and the values of
 * the secrets the configuration names (`*Env` keys: source secrets, tokens, keys, the database
 * URL and its password) are replaced wherever they occur — as they are, percent-encoded,
 * JSON-escaped, and in base64 and base64url at any byte offset (the stretch of a longer base64
 * text, such as a Basic credential, that only the secret's bytes determine).
 */
import { redactSecrets } from '../claims/redact.ts';

const SECRET_KEY = /pass(word|wd)?|pwd|secret|token|api[-_]?key|access[-_]?key|private[-_]?key|authorization|signature|credential|cookie|session/i;
const MASK = '***';

/** Literal secret values to mask, read from the environment variables the configuration names. */
export function configuredSecrets(config: unknown, env: Readonly<Record<string, string | undefined>>): string[] {
  const found = new Set<string>();
  const walk = (node: unknown): void => {
    if (typeof node !== 'object' || node === null) return;
    for (const [key, value] of Object.entries(node)) {
      if (key.endsWith('Env') && typeof value === 'string') {
        const secret = env[value];
        if (secret === undefined) continue;
        for (const form of [secret, urlPassword(secret)]) {
          if (form !== undefined && form.length >= MIN_SECRET_CHARS) for (const text of encodedForms(form)) found.add(text);
        }
      } else walk(value);
    }
  };
  walk(config);
  // Short values would mask ordinary words; a real secret is longer.
  return [...found].filter((s) => s.length >= MIN_SECRET_CHARS).sort((a, b) => b.length - a.length);
}

/** Characters a configured secret (or an encoded stretch of it) must have to be masked. */
const MIN_SECRET_CHARS = 6;

/** The password of a connection URL, decoded (undefined when the value is not such a URL). */
function urlPassword(value: string): string | undefined {
  try {
    const password = new URL(value).password;
    return password === '' ? undefined : decodeURIComponent(password);
  } catch {
    return undefined;
  }
}

/** A secret as it may appear in text: itself, percent-encoded (either case, `+` for spaces), JSON-escaped, and base64/base64url at each of the three byte offsets. */
function encodedForms(secret: string): string[] {
  const percent = encodeURIComponent(secret);
  const forms = [secret, percent, percent.replace(/%[0-9A-F]{2}/g, (e) => e.toLowerCase()), percent.replace(/%20/g, '+'), JSON.stringify(secret).slice(1, -1)];
  const bytes = Buffer.from(secret, 'utf8');
  for (let offset = 0; offset < 3; offset++) {
    const encoded = Buffer.concat([Buffer.alloc(offset), bytes]).toString('base64');
    // Characters whose six bits all come from the secret: they appear wherever the secret starts at this offset.
    const stable = encoded.slice(Math.ceil((offset * 8) / 6), Math.floor(((offset + bytes.length) * 8) / 6));
    forms.push(stable, stable.replace(/\+/g, '-').replace(/\//g, '_'));
  }
  return forms;
}

/** A redactor bound to the configured secrets. */
export interface Redactor {
  text(value: string | null): string;
  /**
   * `text` of a value cut short before it was redacted (the dead groups' error starts): a secret
   * the cut went through is masked too — the text's end, when it is the start of a secret
   * (`CUT_SECRET_CHARS` characters or more of it).
   */
  textCut(value: string | null): string;
  value(value: unknown): unknown;
}

/** Least characters of a secret at the end of a cut text that are masked as its start (fewer say next to nothing of it). */
export const CUT_SECRET_CHARS = 3;

/** A redactor masking `secrets` (longest first) besides the secret-named keys and the text rules. */
export function createRedactor(secrets: readonly string[]): Redactor {
  const whole = (value: string | null): string => {
    // The configured values first: a text rule (a secret-named pair) would otherwise cut a
    // passphrase with spaces at its first word and leave the rest unmatched.
    let out = value ?? '';
    for (const secret of secrets) out = out.split(secret).join(MASK);
    return redactSecrets(out);
  };
  /** `out` with its end masked when it is the start of a configured secret (a cut went through it). */
  const maskCutEnd = (out: string): string => {
    let longest = 0;
    for (const secret of secrets) {
      for (let n = Math.min(secret.length - 1, out.length); n >= CUT_SECRET_CHARS && n > longest; n--) {
        if (out.endsWith(secret.slice(0, n))) {
          longest = n;
          break;
        }
      }
    }
    return longest === 0 ? out : `${out.slice(0, out.length - longest)}${MASK}`;
  };
  // A stored `last_error` longer than its column's limit was cut, and ends in `…`
  // (`redactError`), before the configured secrets could be masked.
  const text = (value: string | null): string => {
    const out = whole(value);
    return out.endsWith(STORED_CUT) ? `${maskCutEnd(out.slice(0, -STORED_CUT.length))}${STORED_CUT}` : out;
  };
  const textCut = (value: string | null): string => maskCutEnd(whole(value));
  const value = (node: unknown): unknown => {
    if (typeof node === 'string') return text(node);
    if (Array.isArray(node)) return node.map(value);
    if (typeof node === 'object' && node !== null) {
      // Under a secret-named key everything is masked, a nested object or list included.
      return Object.fromEntries(Object.entries(node).map(([k, v]) => [k, SECRET_KEY.test(k) && v !== null ? MASK : value(v)]));
    }
    return node;
  };
  return { text, textCut, value };
}

/** How a stored text cut to its limit ends (`redactError`). */
const STORED_CUT = '…';
