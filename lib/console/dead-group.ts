/**
 * One dead-row group exactly, as the dead page's "rows and replay…" link selects it.
 *
 * A group is the dead rows of one topic (outbox) or source and consumption (inbox) whose last
 * errors share their first `DEAD_GROUPS.errorChars` characters, or that have no last error. No
 * replay filter says that: "last error starts with" also matches longer errors (other groups), a
 * group without an error has no error filter at all, and a topic or error that holds a masked
 * secret must not travel in an address. So the link carries, besides the filters that narrow the
 * search and show nothing the page masks (the topic or source, the consumption, the error up to
 * its first masked character), the group's digest: an HMAC of its topic or source, consumption
 * and error start under a key of this console process (a digest without a key would let anyone
 * who reads the address test guesses of a secret in the error). The preview reads the rows those
 * filters match and keeps the ones of the group; its confirm moves exactly the rows it listed.
 */
import { createHmac, randomBytes } from 'node:crypto';
import type { Driver } from '../db/driver.ts';

/** Groups shown, the newest dead rows they are made of, and the characters of the last error a group shares. */
export const DEAD_GROUPS = { limit: 50, scanLimit: 10_000, errorChars: 120 } as const;

/** The query parameter that carries a group's digest. */
export const GROUP_PARAM = 'group';

/** A group's digest as a link carries it. */
export const GROUP_DIGEST = /^[0-9a-f]{32}$/;

/** What makes a dead row one of a group. */
export interface DeadGroupKey {
  table: 'outbox' | 'inbox';
  /** Topic (outbox) or source (inbox). */
  label: string;
  /** Inbox: `push` or `pull`; outbox: null. */
  consumption: string | null;
  /** The last error as stored (or a group's error start); null when the row has none. */
  error: string | null;
}

/**
 * The error start that groups a row, as the database cuts and compares it: PostgreSQL counts code
 * points (`left(last_error, n)`); SQL Server counts UTF-16 code units and compares without the
 * trailing spaces (`LEFT`, `=` and `GROUP BY` on `NVARCHAR`).
 */
export function groupErrorStart(dialect: Driver['dialect'], error: string | null, chars: number = DEAD_GROUPS.errorChars): string | null {
  if (error === null) return null;
  if (dialect === 'sqlserver') return error.slice(0, chars).replace(/ +$/, '');
  // The first `chars` code points lie within the first `2 * chars` code units.
  return Array.from(error.slice(0, 2 * chars)).slice(0, chars).join('');
}

/** The digests of one console process's group links. */
export class DeadGroupDigests {
  readonly #key = randomBytes(32);
  readonly #dialect: Driver['dialect'];

  constructor(dialect: Driver['dialect']) {
    this.#dialect = dialect;
  }

  /** The digest of the group a row (or a group, by its error start) belongs to. */
  digest(key: DeadGroupKey): string {
    const error = groupErrorStart(this.#dialect, key.error);
    return createHmac('sha256', this.#key).update(JSON.stringify([key.table, key.label, key.consumption, error])).digest('hex').slice(0, 32);
  }
}
