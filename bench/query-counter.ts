/**
 * Counts database round trips of everything in this process that goes through `pg`.
 *
 * `pg.Client.prototype.query` is wrapped once: every call on a client is one round trip (the
 * pool's `query` checks a client out and calls it). QueueBox, pg-boss and graphile-worker all
 * use the same hoisted `pg`, so the count covers each of them alike. A client whose
 * `benchUncounted` property is true (the harness's own progress probe) is not counted.
 */
import pg from 'pg';

let count = 0;
let installed = false;

/** Installs the wrapper (idempotent). */
export function installQueryCounter(): void {
  if (installed) return;
  installed = true;
  const proto = pg.Client.prototype as unknown as { query: (...args: unknown[]) => unknown };
  const original = proto.query;
  proto.query = function countedQuery(this: { benchUncounted?: boolean }, ...args: unknown[]) {
    if (!this.benchUncounted) count++;
    return original.apply(this, args);
  };
}

/** Round trips counted since the process started. */
export function queryCount(): number {
  return count;
}

/** A plain client the counter ignores (for the harness's own probes). */
export async function uncountedClient(url: string): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: url, application_name: 'queuebox-bench-probe' });
  (client as unknown as { benchUncounted: boolean }).benchUncounted = true;
  await client.connect();
  return client;
}
