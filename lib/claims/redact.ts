/**
 * `last_error` text safe to store: secrets redacted, length bounded.
 *
 * Error messages from SDKs and HTTP clients can carry credentials (signed URLs, Authorization
 * headers, connection strings). Operators read `last_error` in dashboards and CLIs, so it is
 * scrubbed before it is written.
 */
export const LAST_ERROR_MAX_LENGTH = 2000;

const RULES: Array<[RegExp, string]> = [
  // URL user info: scheme://user:password@host → scheme://***@host. A match starts only where a
  // run of scheme characters starts, so a long run without "://" is read once, not once per character.
  [/(?<![a-z0-9+.-])([a-z0-9+.-]+:\/\/)[^\s/@:]+(?::[^\s/@]*)?@/gi, '$1***@'],
  // Authorization header values: Bearer/Basic/AWS4-HMAC-SHA256 …
  [/(authorization["']?\s*[:=]\s*["']?)(?:bearer|basic|digest|aws4-hmac-sha256)?\s*[^\s"',;]+/gi, '$1***'],
  [/\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{6,}/gi, '$1 ***'],
  // key=value / key: value pairs whose key names a secret
  [/((?:password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key(?:[_-]?id)?|secret[_-]?access[_-]?key|session[_-]?token|signature|x-amz-signature|x-amz-security-token|x-amz-credential|client[_-]?secret|private[_-]?key)["']?\s*[:=]\s*["']?)[^\s"'&,;}]+/gi, '$1***'],
  // AWS access key ids
  [/\b(AKIA|ASIA)[A-Z0-9]{16}\b/g, '***'],
  // JSON Web Tokens: a base64url JSON header ("eyJ" is `{"`), a payload and a signature (empty when
  // unsigned). A match starts only where a base64url run starts (not after "-" or "_", as `\b` would
  // allow), so a long run is read once, not once per "eyJ" inside it.
  [/(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{2,}\.[A-Za-z0-9_-]*/g, '***'],
  // Provider tokens by their documented prefixes: Stripe secret/restricted keys and webhook secrets,
  // GitHub tokens, Slack tokens, GitLab and npm tokens, Google API keys
  [/\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9_]{8,}|\bwhsec_[A-Za-z0-9+/=]{8,}/g, '***'],
  [/\bgh[pousr]_[A-Za-z0-9]{20,}|\bgithub_pat_[A-Za-z0-9_]{20,}/g, '***'],
  [/\bxox[abprse]-[A-Za-z0-9-]{8,}|\bxapp-[A-Za-z0-9-]{8,}/g, '***'],
  [/\bglpat-[A-Za-z0-9_-]{20,}|\bnpm_[A-Za-z0-9]{36}\b|\bAIza[0-9A-Za-z_-]{35}/g, '***'],
];

/** Redacts secrets (URL passwords, authorization values, secret-named pairs, AWS key ids, JWTs, provider tokens by prefix) from a text; no length bound. */
export function redactSecrets(input: string): string {
  let text = input;
  for (const [pattern, replacement] of RULES) text = text.replace(pattern, replacement);
  return text;
}

/** Redacts secrets from an error message and truncates it to 2000 characters. */
export function redactError(input: unknown): string {
  let text = redactSecrets(input instanceof Error ? `${input.name}: ${input.message}` : typeof input === 'string' ? input : safeString(input));
  if (text.length > LAST_ERROR_MAX_LENGTH) text = `${text.slice(0, LAST_ERROR_MAX_LENGTH - 1)}…`;
  return text;
}

/** Any thrown value as text, never throwing (`String` throws on an object without a prototype). */
function safeString(value: unknown): string {
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    try {
      return String(value);
    } catch {
      return Object.prototype.toString.call(value);
    }
  }
}
