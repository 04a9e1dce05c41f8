/**
 * One small `pg` pool per container, with no session state.
 *
 * `statement_timeout` and `idle_in_transaction_session_timeout` are startup parameters of each
 * connection (no `SET` after connecting, so the pool works behind RDS Proxy or PgBouncer in
 * transaction mode; PgBouncer must be told to ignore the two, and the role then carries them:
 * docs/operations.md, `test/foundation/pgbouncer.test.ts`). Statements are unnamed (no prepared-statement names), unless
 * `database.preparedStatements` opts the claim statements in (`pgClaimQuery`), each sent with its
 * plan settings for its own transaction (`preludeQuery`), not set on the session.
 *
 * Inside a pass (`withStatementBudget`), a statement whose budget — the time left in the
 * invocation — is below the connection's `statement_timeout` runs in a transaction of its own
 * that first sets `statement_timeout` to that budget (`BEGIN; SET LOCAL …`, one round trip:
 * transaction-local, no session state). Statements of a QueueBox transaction (`pgTransaction`)
 * get the same setting, renewed before a later statement with the budget left then (when the
 * last one is more than `TIMEOUT_REFRESH_MS` old). With a
 * budget above the connection's timeout nothing changes: the startup parameter already ends the
 * statement in time. Fenced writes and renewals are the exception (`pgSingleTrip`): always one
 * round trip, their row lock waits bounded by the lease in the statement itself, so that no
 * transaction of theirs can be split by a freeze between two round trips; under a budget their
 * `statement_timeout` is set for the statement's own implicit transaction in that same round trip
 * (`boundedSingleTrip`), which bounds what the statement itself cannot: the wait for a lock on
 * the table (a migration's `ALTER TABLE`, `VACUUM FULL`), taken before it executes.
 *
 * The server applies that timeout only while it answers. Inside a pass the client bounds the rest
 * itself, for a server that has gone silent (a network partition, a failover that leaves the
 * connection open): the wait for a pooled connection, a new one's start-up included, ends with the
 * budget (`checkOut`: `InvocationEndedError`, nothing was sent), and a statement not answered by
 * its budget plus `NO_ANSWER_GRACE_MS` fails on the client, its connection closed and never
 * reused (`answerWithin`). Outside a pass (no budget) neither applies.
 */
import { createHash } from 'node:crypto';
import pg from 'pg';
import type { QueueBoxConfig } from '../../config/schema.ts';
import { InvocationEndedError, requireStatementBudgetMs, statementBudgetMs } from '../statement-budget.ts';
import { MAX_TIMER_MS } from '../../runtime/timer-limit.ts';
import { ANSWER_GRACE_MS } from '../../runtime/deadline.ts';
import { mapPgError } from './error-map.ts';
import { QueueBoxError } from '../../errors.ts';

export type PgPool = pg.Pool;

/**
 * Bind values, or a function that gives them when the statement is sent (after any wait for a
 * connection): a lease is sized from the time left at that moment (`leaseWithinBudget`).
 */
export type PgValues = unknown[] | (() => unknown[]);

const valuesNow = (values: PgValues): unknown[] => (typeof values === 'function' ? values() : values);

/**
 * One statement on a pooled connection, checked out first so that lazy values are bound after the
 * wait for it (what `pool.query` does, in that order); a client whose statement failed is discarded,
 * as `pool.query` does.
 */
async function onConnection<T>(pool: pg.Pool, run: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await checkOut(pool);
  const lost = watchCheckedOut(client);
  try {
    const result = await run(client);
    lost.stop();
    client.release(lost.error ?? undefined);
    return result;
  } catch (error) {
    lost.stop();
    client.release(error instanceof Error ? error : true);
    throw error;
  }
}

/**
 * Checks a client out of `pool`. Inside a pass the wait — for a connection another statement
 * holds, or for a new connection's start-up — ends with the budget, when that comes before
 * `database.connectTimeoutMs` (the pool's `connectionTimeoutMillis`): `pg-pool` reads that option
 * when `connect()` is called, for the timer of a wait in its queue and for the one that ends a new
 * connection still starting up, so it is lowered to the budget for this call alone (and put back
 * before anything else runs). A wait the budget ended throws `InvocationEndedError`: no statement
 * was sent, as when the invocation has no time left to send one; a connection still starting up
 * then is closed, not left to finish after the invocation.
 */
async function checkOut(pool: pg.Pool): Promise<pg.PoolClient> {
  const budget = requireStatementBudgetMs();
  const options = pool.options as { connectionTimeoutMillis?: number };
  const configured = options.connectionTimeoutMillis;
  if (budget === undefined || (configured !== undefined && configured > 0 && configured <= budget)) return pool.connect();
  let connecting: Promise<pg.PoolClient>;
  options.connectionTimeoutMillis = Math.min(Math.max(1, budget), MAX_TIMER_MS);
  try {
    connecting = pool.connect();
  } finally {
    options.connectionTimeoutMillis = configured;
  }
  try {
    return await connecting;
  } catch (error) {
    // `pg-pool`'s and `pg`'s messages for a wait or a start-up cut by that timeout.
    if (error instanceof Error && /timeout/i.test(error.message)) throw new InvocationEndedError();
    throw error;
  }
}

/**
 * How long past its budget a statement's answer is still awaited on the client (ms). The server
 * cancels a statement at its budget (`statement_timeout`) and says so at once; an answer still
 * missing this much later means the server is not answering at all. Well under the least
 * `lambda.deadlineMarginMs` (1 s), the time a receiver keeps back to answer after its store
 * was cut at the deadline.
 */
export const NO_ANSWER_GRACE_MS = 250;

/** Clients whose connection `answerWithin` closed: nothing more is sent on them (no `ROLLBACK`). */
const cutClients = new WeakSet<object>();

/**
 * Sends a statement on `client` (`send`) and waits for its answer; inside a pass, no longer than
 * `budgetMs` (the time left when it is sent) plus `NO_ANSWER_GRACE_MS`. Past that the server is
 * silent: the connection is closed (`cutConnection`) and the statement fails with SQLSTATE 08006
 * (connection failure; `mapPgError` makes it a `TransientDatabaseError`), whose outcome is
 * unknown, as for any connection lost under a statement: the callers' handling of a lost
 * connection applies. One timer per statement at a time; none without a budget.
 *
 * A process frozen past the limit (a Lambda container between invocations) finds its timer due at
 * once when it is thawed, while the server may have answered meanwhile: the answers already
 * received are read first (the timer gives up only after one more turn of the event loop, once its
 * I/O is read), and a timer that fired late by more than the grace — the process was frozen or
 * held up — waits `ANSWER_GRACE_MS` more for answers still on their way, as a pass waits for its
 * statements' answers after a freeze (`answerWaitMs`).
 */
function answerWithin<T>(client: PgQueryable, send: () => Promise<T>, budgetMs: number | undefined = statementBudgetMs()): Promise<T> {
  if (budgetMs === undefined || client instanceof pg.Pool) return send();
  const limitMs = Math.max(0, budgetMs) + NO_ANSWER_GRACE_MS;
  if (!(limitMs < MAX_TIMER_MS)) return send();
  return new Promise<T>((resolve, reject) => {
    let done = false;
    const giveUp = () =>
      setImmediate(() => {
        if (done) return;
        done = true;
        cutConnection(client);
        reject(Object.assign(new Error(`no answer from the database within the statement's time (${budgetMs} ms, what was left of the invocation) and ${NO_ANSWER_GRACE_MS} ms more: the connection was closed; whether the statement took effect is unknown`), { code: '08006' }));
      });
    const armedAt = performance.now();
    let timer = setTimeout(() => {
      if (performance.now() - armedAt > limitMs + NO_ANSWER_GRACE_MS) timer = setTimeout(giveUp, ANSWER_GRACE_MS);
      else giveUp();
    }, limitMs);
    const finish = (settle: () => void) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      settle();
    };
    let sent: Promise<T>;
    try {
      sent = send();
    } catch (error) {
      finish(() => reject(error));
      return;
    }
    sent.then(
      (value) => finish(() => resolve(value)),
      (error: unknown) => finish(() => reject(error)),
    );
  });
}

/**
 * Closes the connection of a `pg` client whose statement got no answer, so it is never used
 * again: `end()` first, which makes the client report the close as asked for (no `'error'`
 * event, which on a client nobody listens to would end the process; a pool removes an ended
 * client when it is released), then its socket destroyed (`end()` alone waits for a pipelined
 * client's answers). The statements waiting on it fail. A client of another kind (`pg-native`)
 * is left to its pool, which ends it when it is released with the error.
 */
function cutConnection(client: PgQueryable): void {
  const c = client as { end?: () => unknown; connection?: { stream?: { destroy?: () => void } } };
  const stream = c.connection?.stream;
  if (typeof stream?.destroy !== 'function') return;
  cutClients.add(client);
  try {
    const ended = c.end?.();
    if (ended instanceof Promise) ended.catch(() => {});
  } catch {
    // ending a client that is already closing
  }
  stream.destroy();
}

/**
 * Listens for `'error'` on a client checked out of a pool until `stop()`: the server ending the
 * connection between two statements (an idle-in-transaction timeout, `pg_terminate_backend`, a
 * failover) emits it on the client, and an `'error'` event without a listener ends the process.
 * The pool may be the application's own (a pull worker's or an inbox writer's `pool`), which
 * listens for it only while the client is idle in the pool. The client's next statement fails
 * instead, and `error` says to discard the client on release.
 */
function watchCheckedOut(client: pg.PoolClient): { readonly error: Error | undefined; stop(): void } {
  let lostWith: Error | undefined;
  const onError = (error: Error) => {
    lostWith ??= error;
  };
  // A pool-like object whose clients are no event emitters has no 'error' event to listen for.
  const emitter = typeof client.on === 'function' && typeof client.removeListener === 'function';
  if (emitter) client.on('error', onError);
  return {
    get error() {
      return lostWith;
    },
    stop: () => {
      if (emitter) client.removeListener('error', onError);
    },
  };
}

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

/**
 * Clients inside a QueueBox transaction under a budget: the `statement_timeout` (ms) in force in
 * the transaction — the connection's own, or the budget last set.
 */
const boundedClients = new WeakMap<object, { timeoutMs: number }>();

/**
 * How much the time left may shrink before a statement of a transaction gets a new timeout: a
 * statement sent right after the last `SET LOCAL` needs none (it would cost a round trip), one
 * sent later (after the application's own statements in a pull worker's transaction) does.
 */
const TIMEOUT_REFRESH_MS = 50;

/**
 * Sets `statement_timeout` for the rest of a `pgTransaction`'s transaction, with `settings` (more
 * `SET LOCAL`s, written by QueueBox) in the same round trip: none outside an invocation; inside
 * one, the time left, which each later statement sent through `pgQuery` or `pgSimpleQuery`
 * renews as it shrinks (`boundStatement`), so no statement runs past the invocation's end.
 */
export async function pgSetTransactionTimeout(client: pg.PoolClient, settings: string): Promise<void> {
  const budget = requireStatementBudgetMs();
  const ms = budget === undefined ? 0 : Math.max(1, Math.floor(budget));
  await answerWithin(client, () => client.query(`SET LOCAL statement_timeout = ${ms}; ${settings}`), budget);
  if (budget !== undefined) boundedClients.set(client, { timeoutMs: ms });
}

/** `statement_timeout` for the rest of the transaction; `ms` is a positive integer we computed, not input. */
function setLocalTimeout(ms: number): string {
  return `SET LOCAL statement_timeout = ${Math.max(1, Math.floor(ms))}`;
}

/** The connection-level statement timeout of a pool's connections (ms); infinite when it sets none. */
export function poolStatementTimeoutMs(pool: pg.Pool): number {
  return Number(pool.options.statement_timeout ?? 0) || Number.POSITIVE_INFINITY;
}

/**
 * Bounds the next statement by the invocation's time left: on a pool, a transaction of its own
 * (the returned runner); on a client of a QueueBox transaction, `statement_timeout` set for it.
 * Returns undefined when the connection's own timeout is already within the budget.
 */
async function boundStatement(db: PgQueryable): Promise<((run: (client: PgQueryable) => Promise<unknown>) => Promise<unknown>) | undefined> {
  const budget = requireStatementBudgetMs();
  if (budget === undefined) return undefined;
  if (db instanceof pg.Pool) {
    if (budget >= poolStatementTimeoutMs(db)) return undefined;
    return (run) => pgTransaction(db, run);
  }
  const bounded = boundedClients.get(db);
  if (bounded !== undefined && budget < bounded.timeoutMs - TIMEOUT_REFRESH_MS) {
    await answerWithin(db, () => db.query(setLocalTimeout(budget)), budget);
    bounded.timeoutMs = budget;
  }
  return undefined;
}

/**
 * Runs one statement and maps database errors; inside a pass, bounded by the invocation's time left.
 * Outside a pass, a statement on a client is handed to it at once (not after a tick), so
 * statements reach a caller's client in the order they were called: an `enqueue` called before
 * the caller's `COMMIT` is written before it, awaited or not.
 */
export function pgQuery<R extends pg.QueryResultRow>(db: PgQueryable, text: string, values: PgValues = []): Promise<pg.QueryResult<R>> {
  if (!(db instanceof pg.Pool) && statementBudgetMs() === undefined) {
    try {
      return db.query<R>(text, valuesNow(values)).catch((error: unknown) => {
        throw mapPgError(error);
      });
    } catch (error) {
      return Promise.reject(mapPgError(error));
    }
  }
  return pgQueryBounded(db, text, values);
}

async function pgQueryBounded<R extends pg.QueryResultRow>(db: PgQueryable, text: string, values: PgValues): Promise<pg.QueryResult<R>> {
  try {
    const bounded = await boundStatement(db);
    if (bounded !== undefined) return (await bounded((client) => pgQuery<R>(client, text, values))) as pg.QueryResult<R>;
    if (db instanceof pg.Pool && (typeof values === 'function' || statementBudgetMs() !== undefined)) {
      return await onConnection(db, (client) => answerWithin(client, () => client.query<R>(text, valuesNow(values))));
    }
    return await answerWithin(db, () => db.query<R>(text, valuesNow(values)));
  } catch (error) {
    throw mapPgError(error);
  }
}

/**
 * `pgQuery` of a text without bind values, sent as a simple query, so it may hold several
 * statements (their results come back as an array): the text is handed to `pg` with no values
 * argument at all — `pg`'s native client takes even an empty values array for a parameterized
 * query, which allows one statement only.
 */
export async function pgSimpleQuery(db: PgQueryable, text: string): Promise<pg.QueryResult | pg.QueryResult[]> {
  try {
    const bounded = await boundStatement(db);
    if (bounded !== undefined) return (await bounded((client) => pgSimpleQuery(client, text))) as pg.QueryResult | pg.QueryResult[];
    if (db instanceof pg.Pool && statementBudgetMs() !== undefined) return (await onConnection(db, (client) => answerWithin(client, () => client.query(text)))) as pg.QueryResult | pg.QueryResult[];
    return (await answerWithin(db, () => (db as pg.Pool).query(text))) as pg.QueryResult | pg.QueryResult[];
  } catch (error) {
    throw mapPgError(error);
  }
}

/**
 * Runs one statement in one round trip, whatever the invocation's time left: on a pool, in an
 * implicit transaction of its own (no `BEGIN; SET LOCAL`, no `COMMIT`), which the server commits
 * before it answers, so nothing of it can stay open when the process is frozen or killed after
 * sending it. Its run time is bounded by the connection's `statement_timeout` only: the callers
 * (fenced writes and renewals) bound their lock waits in the statement itself
 * (`fenced-writes.ts`, `lockWithinLease`). Not sent when the invocation has no time left.
 */
export async function pgSingleTrip<R extends pg.QueryResultRow>(db: PgQueryable, text: string, values: PgValues): Promise<pg.QueryResult<R>> {
  try {
    requireStatementBudgetMs();
    if (db instanceof pg.Pool) {
      return await onConnection(db, (client) => {
        // The budget when the statement is sent (after any wait for a connection).
        const budget = statementBudgetMs();
        return answerWithin(
          client,
          () => (budget !== undefined && budget < poolStatementTimeoutMs(db) ? boundedSingleTrip<R>(client, text, valuesNow(values), budget) : client.query<R>(text, valuesNow(values))),
          budget,
        );
      });
    }
    // A client inside a QueueBox transaction: its `statement_timeout` follows the budget as usual.
    await boundStatement(db);
    return await answerWithin(db, () => db.query<R>(text, valuesNow(values)));
  } catch (error) {
    throw mapPgError(error);
  }
}

/** The part of a `pg` connection (`client.connection`) a statement with a prelude writes to. */
interface PgWire {
  parse(query: { text: string; name?: string }): void;
  bind(config: object): void;
  execute(config: object): void;
  /** Named statements whose Parse was sent and not yet answered (`pg` keeps it: 8.x). */
  submittedNamedStatements?: Record<string, string>;
  stream?: { cork?: () => void; uncork?: () => void };
}

/** `pg`'s query class (a "submittable"): the client hands it the connection when its turn comes, then the server's answers. */
type PgQueryClass = new (config: { text: string; values: unknown[]; name?: string; queryMode: 'extended' }, values: undefined, callback: (error: Error | null, result: unknown) => void) => {
  readonly text: string;
  readonly name?: string;
  /** Writes the statement's messages (Parse unless its name is prepared on the connection, Bind, Describe, Execute, Sync): `submit` calls it, corked. */
  prepare(connection: PgWire): void;
  hasBeenParsed(connection: PgWire): boolean;
  handleDataRow(message: unknown): void;
  handleCommandComplete(message: unknown, connection: PgWire): void;
};

/** A statement for `preludeQuery`: its text and values, and its name when it is a named prepared statement. */
interface PgStatement {
  text: string;
  values: unknown[];
  name?: string;
}

type PreludeQueryClass = new (prelude: string, statement: PgStatement, callback: (error: Error | null, result: unknown) => void) => object;

/** The subclass of each `pg` copy's query class (`Client.Query`) that sends a prelude ahead of its statement. */
const preludeQueryClasses = new WeakMap<PgQueryClass, PreludeQueryClass>();

function preludeQueryClass(Query: PgQueryClass): PreludeQueryClass {
  let Prelude = preludeQueryClasses.get(Query);
  if (Prelude === undefined) {
    Prelude = class extends Query {
      /** Answers still to come from the prelude (its row, its completion): not part of the statement's result. */
      #preluding = 2;
      readonly #prelude: string;
      constructor(prelude: string, statement: PgStatement, callback: (error: Error | null, result: unknown) => void) {
        super({ ...statement, queryMode: 'extended' }, undefined, callback);
        this.#prelude = prelude;
      }
      override prepare(connection: PgWire): void {
        // A named statement new to this connection is parsed before the prelude: `pg` credits every
        // ParseComplete of the round trip to this query's name, so the first one must be the
        // statement's own (a failed Parse then leaves the name unprepared, as it is on the server).
        // Parse plans nothing: the plan is made at the statement's Bind, after the prelude ran.
        if (this.name !== undefined && !this.hasBeenParsed(connection)) {
          connection.parse({ text: this.text, name: this.name });
          if (connection.submittedNamedStatements !== undefined) connection.submittedNamedStatements[this.name] = this.text;
        }
        connection.parse({ text: this.#prelude });
        connection.bind({});
        connection.execute({});
        // The statement (its Parse too when unnamed), then the one Sync that ends the round trip.
        super.prepare(connection);
      }
      override handleDataRow(message: unknown): void {
        if (this.#preluding === 2) return;
        super.handleDataRow(message);
      }
      override handleCommandComplete(message: unknown, connection: PgWire): void {
        if (this.#preluding > 0) {
          this.#preluding = 0;
          return;
        }
        super.handleCommandComplete(message, connection);
      }
    };
    preludeQueryClasses.set(Query, Prelude);
  }
  return Prelude;
}

/**
 * `statement` on `client` in one round trip, after `prelude` — a `SELECT` of one row, written by
 * QueueBox, typically of `set_config(…, true)` calls: in the extended protocol, with a single Sync,
 * so both run in one transaction — the implicit transaction of the round trip, or the
 * transaction `client` is in — and a setting the prelude makes is that transaction's alone (no
 * `SET` left on the session: safe behind a pooler in transaction mode). A client of another
 * kind (`pg-native`, or a `pg` whose query class lacks what this writes through) sends the
 * statement alone.
 */
function preludeQuery<R extends pg.QueryResultRow>(client: pg.PoolClient, prelude: string, statement: PgStatement): Promise<pg.QueryResult<R>> {
  const Query = (client.constructor as { Query?: unknown }).Query;
  const wire = (client as unknown as { connection?: Partial<PgWire> }).connection;
  const proto = (Query as { prototype?: Partial<InstanceType<PgQueryClass>> } | undefined)?.prototype;
  if (
    typeof Query !== 'function' ||
    typeof proto?.prepare !== 'function' ||
    typeof proto.hasBeenParsed !== 'function' ||
    typeof wire?.parse !== 'function' ||
    typeof wire.bind !== 'function' ||
    typeof wire.execute !== 'function'
  ) {
    return client.query<R>(statement);
  }
  const Prelude = preludeQueryClass(Query as PgQueryClass);
  return new Promise((resolve, reject) => {
    const query = new Prelude(prelude, statement, (error, result) => (error ? reject(error) : resolve(result as pg.QueryResult<R>)));
    (client as unknown as { query(submittable: object): unknown }).query(query);
  });
}

/**
 * One statement on `client` in one round trip, bounded by `budgetMs` (a whole number of ms, at
 * least 1): `SELECT set_config('statement_timeout', …, true)` as the prelude of the statement
 * (`preludeQuery`), so the timeout is the statement's implicit transaction's alone. The timeout
 * counts from each message of the statement, its wait for the table's lock at Parse included.
 */
function boundedSingleTrip<R extends pg.QueryResultRow>(client: pg.PoolClient, text: string, values: unknown[], budgetMs: number): Promise<pg.QueryResult<R>> {
  return preludeQuery<R>(client, `SELECT set_config('statement_timeout', '${Math.max(1, Math.floor(budgetMs))}', true) IS NULL`, { text, values });
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
 * that each connection parses once (`pg` prepares it on first use per connection), and that —
 * when its text carries its batch size — PostgreSQL plans for the values of its first five
 * executions and then plans no more, keeping a generic plan until the table's statistics change
 * (or the connection's plan cache is reset). `text` must be the same string object or content on
 * every call (the claim builders memoize it).
 *
 * `planSettings` (sent only with `prepared`): a `SELECT` of `set_config(…, true)` calls, sent
 * ahead of the claim in its round trip (`preludeQuery`), so that every plan PostgreSQL makes for
 * it — made at the claim's Bind, after them — is made under them: the claim functions' plan
 * settings (`PINNED_CLAIM_PLAN`), which keep a plan made on a few rows right for a backlog. No
 * round trip more; they hold for the claim's transaction alone — its implicit one, or the
 * QueueBox transaction it ends (the relay and pull claims, a claim bounded by the time left) —
 * and leave nothing on the session. Unprepared, the statement is planned for its values at every
 * execution, as any unnamed statement is, and the settings are not sent.
 */
export async function pgClaimQuery<R extends pg.QueryResultRow>(
  db: pg.Pool | pg.PoolClient,
  text: string,
  values: PgValues,
  prepared: boolean | undefined,
  planSettings: string,
): Promise<pg.QueryResult<R>> {
  if (prepared !== true) return pgQuery<R>(db, text, values);
  try {
    const bounded = await boundStatement(db);
    if (bounded !== undefined) return (await bounded((client) => pgClaimQuery<R>(client as pg.PoolClient, text, values, prepared, planSettings))) as pg.QueryResult<R>;
    const send = (client: pg.PoolClient) =>
      answerWithin(client, () => preludeQuery<R>(client, planSettings, { name: statementName(text), text, values: valuesNow(values) }));
    return await (db instanceof pg.Pool ? onConnection(db, send) : send(db));
  } catch (error) {
    throw mapPgError(error);
  }
}

/**
 * Runs `work` in a transaction on one pooled client; rolls back on error or when `work` says so.
 * Inside a pass, each statement `work` sends through `pgQuery` is bounded by the time left then.
 *
 * `signal` fired while the transaction is open ends it at once (below); `onForcedEnd`, given,
 * is then called, in the signal's abort event, with a promise that settles once the transaction
 * is over on the server (its process terminated and gone, or, when the signal came before the
 * BEGIN answered, rolled back), so that the caller can wait for that before it returns (a
 * Lambda container is frozen as soon as the invocation's handler returns).
 */
export async function pgTransaction<T>(pool: PgPool, work: (client: pg.PoolClient) => Promise<T>, options: { signal?: AbortSignal; onForcedEnd?: (ended: Promise<void>) => void } = {}): Promise<T> {
  let client: pg.PoolClient;
  try {
    client = await checkOut(pool);
  } catch (error) {
    throw mapPgError(error);
  }
  const lost = watchCheckedOut(client);
  let broken = false;
  // `signal` fired while the transaction is open: end its server process, which rolls it back.
  // The process is the one the transaction runs on, as the server names it (`pg_backend_pid()`
  // read in the BEGIN's round trip), not the id the connection reported when it opened: behind
  // a pooler (PgBouncer) that id is the pooler's, and could name another client's process.
  // The transaction is named by its process and its start (`now()`): a terminate that arrives
  // after the transaction ended (a COMMIT already on its way) matches nothing, even when the
  // pooler has handed the process to another client meanwhile.
  const { signal, onForcedEnd } = options;
  let server: { pid: number; startedAt: string } | undefined;
  let ended = false;
  let terminating: Promise<void> | undefined;
  // Settles when the connection goes back to the pool (rolled back, or terminated): the transaction is over by then.
  let released!: () => void;
  const over = new Promise<void>((resolve) => (released = resolve));
  const end = () => {
    broken = true;
    ended = true;
    if (server !== undefined) terminating = terminateBackend(pool, server.pid, server.startedAt);
    // Before the BEGIN answered there is no process to terminate: the answer makes the
    // transaction roll back (below), without running `work`.
    onForcedEnd?.(terminating ?? over);
  };
  signal?.addEventListener('abort', end, { once: true });
  try {
    if (signal?.aborted) throw new QueueBoxError('transaction not begun: the work it was for was given up');
    const budget = requireStatementBudgetMs();
    const ceilingMs = poolStatementTimeoutMs(pool);
    // The start as epoch microseconds (exact, whatever the session's TimeZone and DateStyle).
    const pidQuery = signal === undefined ? '' : '; SELECT pg_backend_pid() AS pid, (extract(epoch FROM now()) * 1000000)::bigint::text AS started_at';
    let begun: pg.QueryResult | pg.QueryResult[];
    if (budget !== undefined && budget < ceilingMs) {
      // One round trip: BEGIN and the timeout for the transaction's first statement.
      begun = await answerWithin(client, () => client.query(`BEGIN; ${setLocalTimeout(budget)}${pidQuery}`), budget);
      boundedClients.set(client, { timeoutMs: budget });
    } else {
      begun = await answerWithin(client, () => client.query(`BEGIN${pidQuery}`), budget);
      if (budget !== undefined) boundedClients.set(client, { timeoutMs: ceilingMs });
    }
    if (signal !== undefined) {
      const results = Array.isArray(begun) ? begun : [begun];
      const row = results[results.length - 1]?.rows[0] as { pid?: number; started_at?: string } | undefined;
      if (typeof row?.pid === 'number' && typeof row.started_at === 'string') server = { pid: row.pid, startedAt: row.started_at };
      if (ended) throw new QueueBoxError('transaction ended: the work it was for was given up');
    }
    const result = await work(client);
    // Given up while the work ran: its transaction must not commit.
    if (ended) throw new QueueBoxError('transaction ended: the work it was for was given up');
    // Sent whatever the time left (not committing is no way to end in time), bounded like any
    // statement: by the budget, none left counting as 0, plus `NO_ANSWER_GRACE_MS`.
    await answerWithin(client, () => client.query('COMMIT'));
    return result;
  } catch (error) {
    // A connection closed for want of an answer takes its transaction with it (the server rolls
    // it back when it notices): no ROLLBACK is sent on it.
    if (cutClients.has(client)) broken = true;
    else {
      try {
        await answerWithin(client, () => client.query('ROLLBACK'));
      } catch {
        broken = true;
      }
    }
    throw mapPgError(error);
  } finally {
    signal?.removeEventListener('abort', end);
    // The connection goes back (destroyed) only once the terminate has landed or failed.
    await terminating;
    boundedClients.delete(client);
    lost.stop();
    released();
    client.release(broken || lost.error !== undefined);
  }
}

/** How long `terminateBackend` waits for a terminated process to be gone (ms). */
const TERMINATED_EXIT_WAIT_MS = 5000;

/**
 * Terminates the server process `pid` while it still runs the transaction that began at
 * `startedAt`, from a connection of its own (not the pool's: every pooled
 * connection may be busy with the very work being ended). The server rolls back its open
 * transaction and frees its locks at once, even while a statement runs or the connection sits
 * idle in the transaction. `pg_terminate_backend` only signals the process: the promise resolves
 * once it is gone from `pg_stat_activity` (it rolled back and freed its locks before), checked
 * every 10 ms for up to `TERMINATED_EXIT_WAIT_MS` (the two-argument form that waits is
 * PostgreSQL 14's). A failure (no right to signal the process) is logged to stderr, not thrown:
 * the transaction then ends when its work does.
 */
async function terminateBackend(pool: PgPool, pid: number, startedAt: string): Promise<void> {
  const admin = new pg.Client((pool as unknown as { options: pg.ClientConfig }).options);
  try {
    await admin.connect();
    const { rows } = await admin.query<{ signalled: boolean }>(
      'SELECT pg_terminate_backend(pid) AS signalled FROM pg_stat_activity WHERE pid = $1 AND (extract(epoch FROM xact_start) * 1000000)::bigint = $2::bigint',
      [pid, startedAt],
    );
    if (rows[0]?.signalled !== true) return;
    const until = performance.now() + TERMINATED_EXIT_WAIT_MS;
    while ((await admin.query('SELECT 1 FROM pg_stat_activity WHERE pid = $1', [pid])).rowCount !== 0 && performance.now() < until) {
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  } catch (error) {
    console.error(JSON.stringify({ level: 'WARN', message: 'could not end an abandoned transaction; it ends when its work does', pid, error: String(error) }));
  } finally {
    await admin.end().catch(() => {});
  }
}
