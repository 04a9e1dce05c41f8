/**
 * One small `pg` pool per container, with no session state.
 *
 * `statement_timeout` and `idle_in_transaction_session_timeout` are startup parameters of each
 * connection (no `SET` after connecting, so the pool works behind RDS Proxy or PgBouncer in
 * transaction mode). Statements are unnamed (no prepared-statement names), unless
 * `database.preparedStatements` opts the claim statements in (`pgClaimQuery`).
 */
import { createHash } from 'node:crypto';
import pg from 'pg';
import type { QueueBoxConfig } from '../../config/schema.ts';
import { mapPgError } from './error-map.ts';

export type PgPool = pg.Pool;

/** Anything that runs a parameterized query: a pool, a pooled client or a plain client. */
export interface PgQueryable {
  query<R extends pg.QueryResultRow = pg.QueryResultRow>(text: string, values?: unknown[]): Promise<pg.QueryResult<R>>;
}

/** Creates the container's pool; `url` must be resolved already. */
export function createPgPool(database: QueueBoxConfig['database'], url: string): PgPool {
  const pool = new pg.Pool({
    connectionString: url,
    max: database.poolMax,
    statement_timeout: database.statementTimeoutMs,
    idle_in_transaction_session_timeout: database.idleInTransactionTimeoutMs,
    connectionTimeoutMillis: database.connectTimeoutMs,
    idleTimeoutMillis: 30000,
    // Idle connections do not keep a finished process alive (`osls invoke local`, scripts); a
    // Lambda container is frozen between invocations, never exited, so its pool stays warm.
    allowExitOnIdle: true,
    application_name: 'queuebox',
  });
  // A pooled idle client whose connection drops emits 'error' on the pool; without a listener
  // the process would crash. The next checkout simply gets a fresh connection.
  pool.on('error', () => {});
  // The same for a client that is checked out (e.g. idle between two statements of a
  // transaction) when the server ends its connection: the event has no other listener and would
  // crash the process. The caller's next statement fails instead (mapped to a transient error)
  // and the broken client is discarded on release.
  pool.on('connect', (client) => {
    client.on('error', () => {});
  });
  return pool;
}

/** Runs one statement and maps database errors. */
export async function pgQuery<R extends pg.QueryResultRow>(db: PgQueryable, text: string, values: unknown[] = []): Promise<pg.QueryResult<R>> {
  try {
    return await db.query<R>(text, values);
  } catch (error) {
    throw mapPgError(error);
  }
}

const statementNames = new Map<string, string>();

/** A stable statement name per SQL text (the same text on every connection gets the same name). */
function statementName(text: string): string {
  let name = statementNames.get(text);
  if (name === undefined) {
    name = `queuebox_${createHash('sha1').update(text).digest('hex').slice(0, 24)}`;
    statementNames.set(text, name);
  }
  return name;
}

/**
 * Runs a claim statement: unnamed by default; with `prepared`, as a named prepared statement
 * that each connection parses and plans once (`pg` prepares it on first use per connection).
 * `text` must be the same string object or content on every call (the claim builders memoize it).
 */
export async function pgClaimQuery<R extends pg.QueryResultRow>(db: pg.Pool | pg.PoolClient, text: string, values: unknown[], prepared: boolean | undefined): Promise<pg.QueryResult<R>> {
  if (prepared !== true) return pgQuery<R>(db, text, values);
  try {
    return await db.query<R>({ name: statementName(text), text, values });
  } catch (error) {
    throw mapPgError(error);
  }
}

/** Runs `work` in a transaction on one pooled client; rolls back on error or when `work` says so. */
export async function pgTransaction<T>(pool: PgPool, work: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  let client: pg.PoolClient;
  try {
    client = await pool.connect();
  } catch (error) {
    throw mapPgError(error);
  }
  let broken = false;
  try {
    await client.query('BEGIN');
    const result = await work(client);
    await client.query('COMMIT');
    return result;
  } catch (error) {
    try {
      await client.query('ROLLBACK');
    } catch {
      broken = true;
    }
    throw mapPgError(error);
  } finally {
    client.release(broken);
  }
}
