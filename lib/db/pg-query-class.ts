/**
 * What a copy of `pg`'s query class (`Client.Query`) does with the messages of a statement, for the
 * two places that write messages of their own into its round trip (`preludeQuery` in
 * postgres/pg-pool.ts, `checkedPgQuery` in caller-transaction.ts). An application's pool or client
 * may come from any copy of `pg` 8 (npm nests QueueBox's when the versions differ).
 */

/** A query class, loosely: constructed from a statement, its `prepare` writes the statement's messages to a connection. */
type QueryClass = new (config: { text: string; values: unknown[]; queryMode: 'extended' }, values: undefined, callback: (error: Error | null, result: unknown) => void) => {
  prepare(connection: object): void;
};

const known = new WeakMap<object, boolean>();

/**
 * Whether `Query` writes a statement's Sync from `prepare`, right after its Execute: `pg` 8.1 and
 * later, whose connection writes each message whole (`pg-protocol`). `pg` 8.0 wrote the Sync only
 * once the statement's completion came, after the round trip was sent — a `COMMIT` written just
 * before it could not go there — and its connection assembled messages across calls, so messages
 * written between its own were malformed ("invalid frontend message type"). Found once per class,
 * by a `prepare` written to a recorder; false for anything that is not such a class.
 */
export function writesWholeRoundTrip(Query: unknown): boolean {
  if (typeof Query !== 'function') return false;
  let writes = known.get(Query);
  if (writes === undefined) {
    const written: string[] = [];
    const record = (message: string) => () => void written.push(message);
    const recorder = {
      parse: record('parse'),
      bind: record('bind'),
      describe: record('describe'),
      execute: record('execute'),
      flush: record('flush'),
      sync: record('sync'),
      close: record('close'),
      parsedStatements: {},
      submittedNamedStatements: {},
    };
    try {
      new (Query as QueryClass)({ text: 'SELECT 1', values: [], queryMode: 'extended' }, undefined, () => {}).prepare(recorder);
      writes = written.at(-1) === 'sync' && written.includes('execute');
    } catch {
      writes = false;
    }
    known.set(Query, writes);
  }
  return writes;
}
