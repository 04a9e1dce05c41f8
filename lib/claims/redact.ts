/**
 * Error text safe to store or log: secrets redacted, length bounded.
 *
 * Error messages from SDKs, drivers and HTTP clients can carry credentials (signed URLs,
 * Authorization headers, connection strings). Operators read `last_error` in dashboards and CLIs,
 * and log lines in CloudWatch, so an error is scrubbed before it is written to either: as text
 * (`redactError`: `last_error`, a log line's `error` string), as an error for a log line that
 * carries one (`redactedError`), and as the error a Lambda handler throws, which the runtime logs
 * (`redactThrown`, `throwingRedacted`).
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
  return bounded(redactSecrets(input instanceof Error ? `${input.name}: ${input.message}` : typeof input === 'string' ? input : safeString(input)));
}

/** Causes of an error that `redactedError` and `redactThrown` follow (a chain can be a cycle). */
const MAX_CAUSE_DEPTH = 3;

/**
 * An error to hand a logger in place of `input` (Powertools Logger writes an error's `name`,
 * `message`, `stack`, `cause` and enumerable fields): a new Error with `input`'s name, its message
 * redacted and bounded as `redactError`'s text is (without the name, which the line carries
 * apart), its stack's frames (the lines that name code, not data) under that redacted header, its
 * `code` when it has one (a SQLSTATE, an SDK or system error code), and its cause made the same
 * way (`MAX_CAUSE_DEPTH` deep). Nothing else of `input` is kept: a driver's other fields (pg's
 * `detail`, `where`) can quote row values. `input` is not changed; a value that is not an Error
 * gives an Error of its text, without a stack. Never throws.
 */
export function redactedError(input: unknown): Error {
  return redactedCopy(input, 0);
}

function redactedCopy(input: unknown, depth: number): Error {
  try {
    const error = input instanceof Error ? input : undefined;
    const name = typeof error?.name === 'string' && error.name !== '' ? error.name : 'Error';
    const message = bounded(redactSecrets(error === undefined ? (typeof input === 'string' ? input : safeString(input)) : typeof error.message === 'string' ? error.message : safeString(error.message)));
    const cause: unknown = error?.cause;
    const copy = new Error(message, cause === undefined || depth >= MAX_CAUSE_DEPTH ? undefined : { cause: cause instanceof Error ? redactedCopy(cause, depth + 1) : redactError(cause) });
    copy.name = name;
    const header = message === '' ? name : `${name}: ${message}`;
    const frames = error === undefined ? '' : framesOf(error.stack);
    copy.stack = frames === '' ? header : `${header}\n${frames}`;
    const code = (error as { code?: unknown } | undefined)?.code;
    if (typeof code === 'number' || typeof code === 'string') Object.assign(copy, { code: typeof code === 'string' ? bounded(redactSecrets(code)) : code });
    return copy;
  } catch {
    // A getter that throws, a revoked proxy: nothing of it is read again.
    return new Error('(an error whose fields could not be read)');
  }
}

/** The frames of a V8 stack (its lines from the first `    at `), redacted and bounded; '' when it has none. */
function framesOf(stack: unknown): string {
  if (typeof stack !== 'string') return '';
  const at = stack.search(/^ {4}at /m);
  return at < 0 ? '' : bounded(redactSecrets(stack.slice(at)));
}

/**
 * `error`, about to leave a Lambda handler, with its secrets redacted: the runtime logs a thrown
 * error's name, message and stack (and writes them in the invocation's error response), a line
 * as public as QueueBox's own. An Error keeps its identity, class and data (a caller still tests
 * `instanceof` and reads its fields); its message and stack, and those of its causes
 * (`MAX_CAUSE_DEPTH` deep), are redacted in place, not bounded: a `ConfigError` keeps every issue,
 * a `SchemaMismatchError` every statement. A string comes back redacted; any other value, or an
 * Error that cannot be changed (frozen), as `redactedError`'s copy. Never throws.
 */
export function redactThrown(error: unknown): unknown {
  if (typeof error === 'string') return redactSecrets(error);
  if (!(error instanceof Error)) return redactedError(error);
  try {
    redactInPlace(error, 0);
    return error;
  } catch {
    return redactedError(error);
  }
}

function redactInPlace(error: Error, depth: number): void {
  for (const key of ['message', 'stack'] as const) {
    const text: unknown = error[key];
    if (typeof text === 'string' && redactSecrets(text) !== text) replaceOwn(error, key, redactSecrets(text));
  }
  const cause: unknown = error.cause;
  if (depth >= MAX_CAUSE_DEPTH) return;
  if (cause instanceof Error) redactInPlace(cause, depth + 1);
  else if (typeof cause === 'string' && redactSecrets(cause) !== cause) replaceOwn(error, 'cause', redactSecrets(cause));
}

/** Sets `error[key]` to `value` as an own data property, as enumerable as it was (a frozen error throws). */
function replaceOwn(error: Error, key: 'message' | 'stack' | 'cause', value: string): void {
  const enumerable = Object.getOwnPropertyDescriptor(error, key)?.enumerable ?? false;
  Object.defineProperty(error, key, { value, writable: true, configurable: true, enumerable });
}

/**
 * `handler` (a Lambda entry point), except that what it throws leaves it through `redactThrown`:
 * the error the runtime logs carries no secret, and keeps its class and a useful message.
 */
export function throwingRedacted<A extends unknown[], R>(handler: (...args: A) => Promise<R>): (...args: A) => Promise<R> {
  return async function redactingHandler(...args: A): Promise<R> {
    try {
      return await handler(...args);
    } catch (error) {
      throw redactThrown(error);
    }
  };
}

/** `text` cut to `LAST_ERROR_MAX_LENGTH` characters, its last one an ellipsis when cut. */
function bounded(text: string): string {
  return text.length > LAST_ERROR_MAX_LENGTH ? `${text.slice(0, LAST_ERROR_MAX_LENGTH - 1)}…` : text;
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
