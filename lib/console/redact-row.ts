/**
 * What the console shows of a row's payload, headers and errors: secrets redacted.
 *
 * Three layers: values under a key that names a secret (`password`, `token`, `authorization`,
 * `signature`, `apiKey`…) become `***`, whole objects and lists included; every string goes
 * through `redactSecrets` (URL passwords, bearer tokens, secret-named pairs, AWS key ids); and
 * the values of the secrets the configuration names (`*Env` keys: source secrets, tokens, keys,
 * the database URL) are replaced wherever they occur.
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
        // Short values would mask ordinary words; a real secret is longer.
        if (secret !== undefined && secret.length >= 6) found.add(secret);
      } else walk(value);
    }
  };
  walk(config);
  return [...found].sort((a, b) => b.length - a.length);
}

/** A redactor bound to the configured secrets. */
export interface Redactor {
  text(value: string | null): string;
  value(value: unknown): unknown;
}

/** A redactor masking `secrets` (longest first) besides the secret-named keys and the text rules. */
export function createRedactor(secrets: readonly string[]): Redactor {
  const text = (value: string | null): string => {
    let out = redactSecrets(value ?? '');
    for (const secret of secrets) out = out.split(secret).join(MASK);
    return out;
  };
  const value = (node: unknown): unknown => {
    if (typeof node === 'string') return text(node);
    if (Array.isArray(node)) return node.map(value);
    if (typeof node === 'object' && node !== null) {
      // Under a secret-named key everything is masked, a nested object or list included.
      return Object.fromEntries(Object.entries(node).map(([k, v]) => [k, SECRET_KEY.test(k) && v !== null ? MASK : value(v)]));
    }
    return node;
  };
  return { text, value };
}
