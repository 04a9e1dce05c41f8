/**
 * Statements whose answer is lost after the server ran them, as when a connection resets after a
 * COMMIT (a failover, a proxy restart): the pool's clients are wrapped so that a chosen statement
 * runs to its end on the server and its caller gets `ECONNRESET` instead of the result.
 */
import pg from 'pg';
import type { QueueBoxConfig } from '../../lib/config/schema.ts';
import { createPgPool } from '../../lib/db/postgres/pg-pool.ts';

export type Query = (...args: unknown[]) => Promise<unknown>;

/** The SQL text of a `client.query` call (a string, or a query object's `text`). */
export const textOf = (args: unknown[]): string | undefined => (typeof args[0] === 'string' ? args[0] : (args[0] as { text?: string } | undefined)?.text);

const reset = () => Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' });

/**
 * Runs `query(...args)` on the server and loses its answer as a reset socket does: for a query
 * object (a statement sent with its timeout in one round trip, under a budget) through its
 * callback, else through the promise.
 */
export function runAndLoseAnswer(query: Query, args: unknown[]): Promise<unknown> {
  const submitted = args[0] as { submit?: unknown; callback?: (error: Error | null, result: unknown) => void };
  if (typeof submitted.submit === 'function') {
    const answer = submitted.callback!;
    submitted.callback = (error) => answer(error ?? reset(), undefined);
    return query(...args);
  }
  return query(...args).then(() => {
    throw reset();
  });
}

/** Replaces `client.query` with `wrap(original)`. */
export function wrapQuery(client: pg.PoolClient, wrap: (query: Query) => Query): void {
  const query = client.query.bind(client) as Query;
  (client as unknown as { query: Query }).query = wrap(query);
}

/**
 * A pool (on `url`, configured as `database`) whose first statement that `matches` runs on the
 * server and loses its answer; `cuts()` tells how many answers were lost (0 or 1).
 */
export function poolLosingFirstAnswer(database: QueueBoxConfig['database'], url: string, matches: (text: string | undefined) => boolean): { pool: pg.Pool; cuts: () => number } {
  const pool = createPgPool(database, url);
  let cut = 0;
  pool.on('connect', (client: pg.PoolClient) =>
    wrapQuery(client, (query) => (...args) => {
      if (cut === 0 && matches(textOf(args))) {
        cut++;
        return runAndLoseAnswer(query, args);
      }
      return query(...args);
    }),
  );
  return { pool, cuts: () => cut };
}
