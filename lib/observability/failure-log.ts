/**
 * Shared pieces of the failure log lines (`outbox delivery failed`, `inbox forward failed`): how
 * many topics, keys and ids a line lists, how a key is shown, and how an error is classed.
 */

/** The `destination` of an outbox row whose topic matches no route (log field and metric dimension). */
export const NO_ROUTE = '(no route)';

/**
 * The `source` dimension of an inbox row whose source is not (or no longer) in `inbox.sources`:
 * metric dimensions take configured names only, never a value read from a row. Source names are
 * lower-case letters, digits, `-` and `_`, so no configured source can take this label.
 */
export const UNKNOWN_SOURCE = '(unknown source)';

/** Distinct topics, keys and ids a failure line lists at most (the line also gives the key count). */
export const FAILURE_LOG_SAMPLE = 10;
/** Longest key a failure line shows, in characters (longer keys are cut). */
export const FAILURE_LOG_KEY_MAX = 200;

/** The first `FAILURE_LOG_SAMPLE` of `keys` in sorted order, each cut to `FAILURE_LOG_KEY_MAX` characters. */
export function shownKeys(keys: Iterable<string>): string[] {
  const shown: string[] = [];
  for (const key of [...keys].sort()) {
    if (shown.length === FAILURE_LOG_SAMPLE) break;
    shown.push(key.length > FAILURE_LOG_KEY_MAX ? `${key.slice(0, FAILURE_LOG_KEY_MAX)}…` : key);
  }
  return shown;
}

/**
 * The class of a thrown error for log lines: its name, or its string `code` when the name says
 * nothing (`Error`, or node-postgres' `error`, whose code is the SQLSTATE such as `23514`).
 */
export function errorClassOf(error: unknown): string {
  if (typeof error !== 'object' || error === null) return 'Error';
  const { name, code } = error as { name?: unknown; code?: unknown };
  const named = typeof name === 'string' && name !== '' ? name : 'Error';
  if ((named === 'Error' || named === 'error') && (typeof code === 'string' || typeof code === 'number')) return String(code);
  return named === 'error' ? 'Error' : named;
}
