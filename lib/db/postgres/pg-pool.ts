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
 * `statement_timeout` is set for the statement's own transaction in that same round trip
 * (`ownStatement`), which bounds what the statement itself cannot: the wait for a lock on
 * the table (a migration's `ALTER TABLE`, `VACUUM FULL`), taken before it executes.
 *
 * Every statement and transaction of QueueBox's on the pool runs under QueueBox's settings, not
 * the role's or the database's defaults (`OWN_TRANSACTION_SETTINGS`: READ COMMITTED, no
 * `lock_timeout`, no JIT, no `transaction_timeout`), set for its transaction alone in the round
 * trip that begins it: a statement on its own is sent as `BEGIN ISOLATION LEVEL READ COMMITTED`,
 * its settings, the statement and `COMMIT`, in one round trip (`ownStatement`).
 *
 * `idle_session_timeout` (PostgreSQL 14+) is not sent as a startup parameter: PostgreSQL 13
 * refuses a connection that names it, and PgBouncer one with a parameter it does not ignore. A
 * statement whose idle connection the server closed meanwhile runs again on another connection
 * (`onConnection`, `pgTransaction`), where nothing of it can have run.
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
import { writesWholeRoundTrip } from '../pg-query-class.ts';

export type PgPool = pg.Pool;

/**
 * Whether `db` is a `pg` pool — of QueueBox's own copy of `pg` or of any other. An application on
 * another `pg` version has a copy of its own (npm nests QueueBox's), and a pool it hands in (a pull
 * worker's `pool`, a driver's) is no instance of QueueBox's `pg.Pool`: told by its shape instead,
 * that of `pg-pool` (which every copy's `Pool` is): it checks clients out (`connect`), counts its
 * connections (`totalCount`, `idleCount`, `waitingCount`) and keeps its `options`. A client has no
 * such counts, and a pooled client has `release`. Every path that sends a statement on its own
 * connection of a pool — QueueBox's settings, its one round trip, the statement budget, the
 * retry of a connection the server closed — asks this, never the class.
 */
export function isPgPool(db: unknown): db is pg.Pool {
  if (db instanceof pg.Pool) return true;
  if (typeof db !== 'object' || db === null) return false;
  const p = db as Record<string, unknown>;
  return (
    typeof p.connect === 'function' &&
    typeof p.query === 'function' &&
    typeof p.end === 'function' &&
    typeof p.release !== 'function' &&
    typeof p.totalCount === 'number' &&
    typeof p.idleCount === 'number' &&
    typeof p.waitingCount === 'number' &&
    typeof p.options === 'object' &&
    p.options !== null
  );
}

/**
 * `transaction_timeout` off for the transaction, on a server that has the setting (PostgreSQL
 * 17+): an expression for a `SELECT` of QueueBox's settings. PostgreSQL 15 and 16 refuse to set a
 * setting they do not know (`SET LOCAL`, `set_config`: "unrecognized configuration parameter"), so
 * the server is asked whether it knows it (`current_setting(…, true)` is NULL for a setting it
 * does not know) in the same statement: no round trip more, nothing known or kept on the client
 * (behind a pooler the server answering is the one that runs the transaction), and
 * transaction-local like the other settings, so nothing stays on the session (PgBouncer in
 * transaction mode). `set_config` is volatile: PostgreSQL evaluates it only when the test holds.
 */
const OWN_TRANSACTION_TIMEOUT = "CASE WHEN pg_catalog.current_setting('transaction_timeout', true) IS NOT NULL THEN pg_catalog.set_config('transaction_timeout', '0', true) END";

/**
 * What QueueBox's own transactions and statements run under, whatever the role's or database's
 * defaults (`ALTER ROLE … SET`, `ALTER DATABASE … SET`), set for each transaction alone — in the
 * round trip that begins it, never on the session:
 * - READ COMMITTED. The claims, fences and settles are written for it: a statement that meets a
 *   row another transaction changed since it began reads the row again and re-checks it. Under a
 *   default of REPEATABLE READ or SERIALIZABLE (`default_transaction_isolation`) it fails with
 *   40001 (serialization_failure) instead — a single statement in its own implicit transaction
 *   too — so passes and claims failed wherever they met. SQL Server's transactions pin it too.
 * - `lock_timeout = 0`: a lock wait of QueueBox's is bounded by `statement_timeout` — the time left
 *   in a pass, `database.statementTimeoutMs` outside one — and a fenced write's row lock wait by the
 *   lease (`fenced-writes.ts`, which sets its own). A role's `lock_timeout` cut the relay's and the
 *   pull claims' wait for the claim lock (`pg_advisory_xact_lock`), which another claim holds for
 *   the moment its statement runs, and failed the claim.
 * - `jit = off`: a claim on a grown table passes `jit_above_cost` (lower on some roles) and was
 *   compiled at every execution, which cost most of its time (`claim-functions.ts`, `PLAN_SHAPE`);
 *   QueueBox's other statements are short, and not worth a compile either.
 * - `transaction_timeout = 0` (PostgreSQL 17+, `OWN_TRANSACTION_TIMEOUT`): bounded by
 *   `statement_timeout` as `lock_timeout` is. A role's `transaction_timeout` ended the whole session
 *   (25P04) of a claim that waited for the claim lock, or of a relay forward or migrate that ran
 *   longer than it. Setting it in the transaction stops the timer its start set.
 */
const OWN_TRANSACTION_SETTINGS = `SET TRANSACTION ISOLATION LEVEL READ COMMITTED; SET LOCAL lock_timeout = 0; SET LOCAL jit = off; SELECT ${OWN_TRANSACTION_TIMEOUT}`;

/**
 * `OWN_TRANSACTION_SETTINGS` for a statement sent with a prelude (`ownStatement`): the `BEGIN` that
 * opens its transaction, `jit` off first (a utility statement, never compiled: the `SELECT` of
 * `set_config` calls after it would be planned, and compiled, under the role's `jit_above_cost`),
 * then `set_config` calls.
 */
const OWN_BEGIN = 'BEGIN ISOLATION LEVEL READ COMMITTED';
const OWN_JIT_OFF = 'SET LOCAL jit = off';
const OWN_STATEMENT_SETTINGS = `pg_catalog.set_config('lock_timeout', '0', true), ${OWN_TRANSACTION_TIMEOUT}`;

/**
 * Bind values, or a function that gives them when the statement is sent (after any wait for a
 * connection): a lease is sized from the time left at that moment (`leaseWithinBudget`).
 */
export type PgValues = unknown[] | (() => unknown[]);

const valuesNow = (values: PgValues): unknown[] => (typeof values === 'function' ? values() : values);

/**
 * One statement on a pooled connection, checked out first so that lazy values are bound after the
 * wait for it (what `pool.query` does, in that order); a client whose statement failed is discarded,
 * as `pool.query` does. A statement whose connection had ended before it was sent
 * (`endedBeforeSent`) runs again on another connection: as many times as the pool holds
 * connections, and once more (`deadIdleRetries`), since every idle connection of a container
 * frozen past the server's `idle_session_timeout` was closed, and the pool learns it of each only
 * when it hands that one out.
 */
async function onConnection<T>(pool: pg.Pool, run: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
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
      if (attempt <= deadIdleRetries(pool) && !cutClients.has(client) && endedBeforeSent(error)) continue;
      throw error;
    }
  }
}

/** How many times a statement or a `BEGIN` whose connection had ended before it was sent runs again: every connection the pool may hold, and a new one. */
function deadIdleRetries(pool: pg.Pool): number {
  const max = Number((pool.options as { max?: unknown }).max);
  return (Number.isInteger(max) && max > 0 ? Math.min(max, 100) : 10) + 1;
}

/**
 * Whether a statement failed (`error`, as `pg` gave it) because its pooled connection had ended
 * before the statement reached a live session, so that nothing of it ran: the server ended the
 * session for sitting idle (`idle_session_timeout`, SQLSTATE 57P05, sent only while the session
 * is idle outside a transaction: whatever came after it was never read), or `pg` found the client
 * closed and sent nothing. In Lambda the container is frozen between invocations, so the pool
 * learns that an idle connection was closed only when the next invocation sends a statement on it.
 */
function endedBeforeSent(error: unknown): boolean {
  if (typeof error !== 'object' || error === null) return false;
  return (error as { code?: unknown }).code === '57P05' || notQueryable(error);
}

/** `pg`'s refusal to send on a client whose connection had already ended: nothing was sent. */
function notQueryable(error: unknown): boolean {
  if (typeof error !== 'object' || error === null) return false;
  const { code, message } = error as { code?: unknown; message?: unknown };
  return code === undefined && typeof message === 'string' && /^Client (has encountered a connection error|was closed) and is not queryable$/.test(message);
}

/**
 * Whether the connection ended under a statement (`error`, as `pg` gave it), its outcome unknown:
 * the server ended the session (`pg_terminate_backend`, a restart or failover, an idle timeout),
 * or the socket closed. Harmless for a `BEGIN` (`pgTransaction`): nothing of the work was sent.
 */
function connectionEnded(error: unknown): boolean {
  if (endedBeforeSent(error)) return true;
  if (typeof error !== 'object' || error === null) return false;
  const { code, message } = error as { code?: unknown; message?: unknown };
  if (typeof code === 'string') return ['57P01', '57P02', '08000', '08003', '08006', 'ECONNRESET', 'EPIPE'].includes(code);
  return typeof message === 'string' && /Connection terminated|connection error/i.test(message);
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
  if (budgetMs === undefined || isPgPool(client)) return send();
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
  if (isPgPool(db)) {
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
  if (!isPgPool(db) && statementBudgetMs() === undefined) {
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
    if (isPgPool(db)) return await onConnection(db, (client) => answerWithin(client, () => ownStatement<R>(client, { text, values: valuesNow(values) })));
    return await answerWithin(db, () => db.query<R>(text, valuesNow(values)));
  } catch (error) {
    throw mapPgError(error);
  }
}

/**
 * `pgQuery` of a text without bind values, sent as a simple query, so it may hold several
 * statements (their results come back as an array): the text is handed to `pg` with no values
 * argument at all — `pg`'s native client takes even an empty values array for a parameterized
 * query, which allows one statement only. On the pool, QueueBox's settings (`OWN_TRANSACTION_SETTINGS`)
 * go ahead of the text in the same query string, whose statements share one implicit
 * transaction; their results are not returned.
 */
export async function pgSimpleQuery(db: PgQueryable, text: string): Promise<pg.QueryResult | pg.QueryResult[]> {
  try {
    const bounded = await boundStatement(db);
    if (bounded !== undefined) return (await bounded((client) => pgSimpleQuery(client, text))) as pg.QueryResult | pg.QueryResult[];
    if (isPgPool(db)) {
      const results = (await onConnection(db, (client) => answerWithin(client, () => client.query(`${OWN_TRANSACTION_SETTINGS}; ${text}`)))) as unknown as pg.QueryResult[];
      const own = results.slice(OWN_TRANSACTION_SETTINGS.split(';').length);
      return own.length === 1 ? own[0]! : own;
    }
    return (await answerWithin(db, () => db.query(text))) as pg.QueryResult | pg.QueryResult[];
  } catch (error) {
    throw mapPgError(error);
  }
}

/**
 * Runs one statement in one round trip, whatever the invocation's time left: on a pool, in a
 * transaction of its own that the same round trip begins and commits (`ownStatement`; no round
 * trip of its own for `BEGIN` or `COMMIT`), which the server commits before it answers, so nothing
 * of it can stay open when the process is frozen or killed after sending it. Its run time is bounded by the connection's `statement_timeout` only: the callers
 * (fenced writes and renewals) bound their lock waits in the statement itself
 * (`fenced-writes.ts`, `lockWithinLease`). Not sent when the invocation has no time left.
 */
export async function pgSingleTrip<R extends pg.QueryResultRow>(db: PgQueryable, text: string, values: PgValues): Promise<pg.QueryResult<R>> {
  try {
    requireStatementBudgetMs();
    if (isPgPool(db)) {
      return await onConnection(db, (client) => {
        // The budget when the statement is sent (after any wait for a connection).
        const budget = statementBudgetMs();
        return answerWithin(client, () => ownStatement<R>(client, { text, values: valuesNow(values) }, budget !== undefined && budget < poolStatementTimeoutMs(db) ? budget : undefined), budget);
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
  sync(): void;
  /**
   * Named statements whose Parse was sent and not yet answered: `pg` 8.23 and later keep it (and
   * skip the Parse of a name in it); before 8.23 there is none, and only an answered Parse
   * (`parsedStatements`) counts as parsed.
   */
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

type PreludeQueryClass = new (prelude: readonly string[], commit: boolean, statement: PgStatement, callback: (error: Error | null, result: unknown) => void) => object;

/** The subclass of each `pg` copy's query class (`Client.Query`) that sends a prelude ahead of its statement. */
const preludeQueryClasses = new WeakMap<PgQueryClass, PreludeQueryClass>();

function preludeQueryClass(Query: PgQueryClass): PreludeQueryClass {
  let Prelude = preludeQueryClasses.get(Query);
  if (Prelude === undefined) {
    Prelude = class extends Query {
      /** Prelude statements whose answers (a row or none, then the completion) are still to come: not part of the statement's result. */
      #preluding: number;
      /** The statement's completion came: a completion after it is the `COMMIT`'s. */
      #completed = false;
      /** The statement's Parse was written ahead of the prelude (`prepare`): `super.prepare` must not write it again. */
      #parsedAhead = false;
      readonly #prelude: readonly string[];
      readonly #commit: boolean;
      constructor(prelude: readonly string[], commit: boolean, statement: PgStatement, callback: (error: Error | null, result: unknown) => void) {
        super({ ...statement, queryMode: 'extended' }, undefined, callback);
        this.#prelude = prelude;
        this.#preluding = prelude.length;
        this.#commit = commit;
      }
      /**
       * Always the extended protocol, which the prelude is written in: `pg` before 8.12 ignores
       * `queryMode`, and sent a statement without values as a simple query (after the prelude's
       * messages, whose answers then swallowed the statement's rows).
       */
      requiresPreparation(): boolean {
        return true;
      }
      override prepare(connection: PgWire): void {
        // One write for the round trip, as `pg` 8.20 and later cork `submit`: before, each message
        // went out alone, and a connection the server had closed failed at a later message's write
        // (EPIPE, "Connection terminated unexpectedly") instead of with the server's 57P05, which
        // `endedBeforeSent` knows as a statement that never ran.
        connection.stream?.cork?.();
        try {
          this.#writeRoundTrip(connection);
        } finally {
          connection.stream?.uncork?.();
        }
      }
      #writeRoundTrip(connection: PgWire): void {
        // A named statement new to this connection is parsed before the prelude: `pg` credits every
        // ParseComplete of the round trip to this query's name, so the first one must be the
        // statement's own (a failed Parse then leaves the name unprepared, as it is on the server).
        // Parse plans nothing: the plan is made at the statement's Bind, after the prelude ran.
        // Not ahead of a prelude that opens the transaction (`BEGIN ISOLATION LEVEL …`): a Parse
        // takes the transaction's first snapshot, after which its isolation cannot be set. That
        // prelude is sent on a pooled connection of QueueBox's own, which any failure discards
        // (`onConnection`), so a name credited early is never used again.
        // `super.prepare` parses a name unless `hasBeenParsed`, which is this class's too (below):
        // with the Parse written here it says so, on every `pg` — 8.23 and later would see the name
        // in `submittedNamedStatements`, but an earlier `pg` has none and looks only at answered
        // Parses, so it sent a second Parse of the name, which the server refused (42P05, "already
        // exists") at each connection's first run. Nothing is marked parsed in `pg`'s own records
        // before the server answers: a Parse that fails leaves the name to be parsed again.
        if (!this.#commit && this.name !== undefined && !this.hasBeenParsed(connection)) {
          connection.parse({ text: this.text, name: this.name });
          this.#parsedAhead = true;
          if (connection.submittedNamedStatements !== undefined) connection.submittedNamedStatements[this.name] = this.text;
        }
        for (const text of this.#prelude) {
          connection.parse({ text });
          connection.bind({});
          connection.execute({});
        }
        // The statement (its Parse too when unnamed), then the one Sync that ends the round trip,
        // with the `COMMIT` of the transaction the prelude opened written just before it.
        if (!this.#commit) {
          super.prepare(connection);
          return;
        }
        const own = Object.getOwnPropertyDescriptor(connection, 'sync');
        const sync = connection.sync;
        connection.sync = () => {
          connection.parse({ text: 'COMMIT' });
          connection.bind({});
          connection.execute({});
          sync.call(connection);
        };
        try {
          super.prepare(connection);
        } finally {
          if (own === undefined) delete (connection as Partial<PgWire>).sync;
          else Object.defineProperty(connection, 'sync', own);
        }
      }
      override hasBeenParsed(connection: PgWire): boolean {
        return this.#parsedAhead || super.hasBeenParsed(connection);
      }
      override handleDataRow(message: unknown): void {
        if (this.#preluding > 0 || this.#completed) return;
        super.handleDataRow(message);
      }
      override handleCommandComplete(message: unknown, connection: PgWire): void {
        if (this.#preluding > 0) {
          this.#preluding -= 1;
          return;
        }
        if (this.#completed) return;
        this.#completed = true;
        super.handleCommandComplete(message, connection);
      }
    };
    preludeQueryClasses.set(Query, Prelude);
  }
  return Prelude;
}

/**
 * `statement` on `client` in one round trip, after `prelude` — statements written by QueueBox,
 * each a `SELECT` of one row (typically of `set_config(…, true)` calls), or with `commit` the
 * `BEGIN` of the statement's transaction first: in the extended protocol, with a single Sync, so
 * all run in one transaction — the implicit transaction of the round trip, the transaction
 * `client` is in, or with `commit` the one the prelude begins and a `COMMIT` after the statement
 * ends — and a setting the prelude makes is that transaction's alone (no `SET` left on the
 * session: safe behind a pooler in transaction mode). A client of another kind (`pg-native`, or
 * a `pg` whose query class lacks what this writes through, or writes its Sync later: 8.0) sends
 * the statement alone.
 */
function preludeQuery<R extends pg.QueryResultRow>(client: pg.PoolClient, prelude: readonly string[], statement: PgStatement, commit = false): Promise<pg.QueryResult<R>> {
  const Query = (client.constructor as { Query?: unknown }).Query;
  const wire = (client as unknown as { connection?: Partial<PgWire> }).connection;
  const proto = (Query as { prototype?: Partial<InstanceType<PgQueryClass>> } | undefined)?.prototype;
  if (
    typeof Query !== 'function' ||
    typeof proto?.prepare !== 'function' ||
    typeof proto.hasBeenParsed !== 'function' ||
    typeof wire?.parse !== 'function' ||
    typeof wire.bind !== 'function' ||
    typeof wire.execute !== 'function' ||
    typeof wire.sync !== 'function' ||
    !writesWholeRoundTrip(Query)
  ) {
    return client.query<R>(statement);
  }
  const Prelude = preludeQueryClass(Query as PgQueryClass);
  return new Promise((resolve, reject) => {
    const query = new Prelude(prelude, commit, statement, (error, result) => (error ? reject(error) : resolve(result as pg.QueryResult<R>)));
    (client as unknown as { query(submittable: object): unknown }).query(query);
  });
}

/**
 * One statement of QueueBox's on a pooled connection, in one round trip, in a transaction of its
 * own that the round trip begins and commits (`preludeQuery` with `commit`): `BEGIN` at READ
 * COMMITTED, QueueBox's settings for it (`OWN_STATEMENT_SETTINGS`), `statement_timeout` when
 * `budgetMs` is given (a whole number of ms, at least 1), `planSettings` when given, the
 * statement, `COMMIT`. The server commits before it answers, as it does a statement's implicit
 * transaction. The timeout counts from each message of the statement, its wait for the table's
 * lock at Parse included. A statement that failed leaves its transaction aborted, not open: the
 * connection is discarded (`onConnection`).
 */
function ownStatement<R extends pg.QueryResultRow>(client: pg.PoolClient, statement: PgStatement, budgetMs?: number, planSettings?: string): Promise<pg.QueryResult<R>> {
  const settings = budgetMs === undefined ? OWN_STATEMENT_SETTINGS : `${OWN_STATEMENT_SETTINGS}, pg_catalog.set_config('statement_timeout', '${Math.max(1, Math.floor(budgetMs))}', true)`;
  const prelude = [OWN_BEGIN, OWN_JIT_OFF, `SELECT ${settings}`];
  if (planSettings !== undefined) prelude.push(planSettings);
  return preludeQuery<R>(client, prelude, statement, true);
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
      answerWithin(client, () => {
        const statement = { name: statementName(text), text, values: valuesNow(values) };
        return isPgPool(db) ? ownStatement<R>(client, statement, undefined, planSettings) : preludeQuery<R>(client, [planSettings], statement);
      });
    return await (isPgPool(db) ? onConnection(db, send) : send(db));
  } catch (error) {
    throw mapPgError(error);
  }
}

/**
 * Runs `work` in a transaction on one pooled client; rolls back on error or when `work` says so.
 * Inside a pass, each statement `work` sends through `pgQuery` is bounded by the time left then.
 * The transaction runs under QueueBox's settings (`OWN_TRANSACTION_SETTINGS`), set in the BEGIN's
 * round trip; a pull handler's (`handler`) under the role's and database's, as the application's
 * own transaction. A BEGIN whose connection had ended (`connectionEnded`: an idle connection the
 * server closed while the container was frozen, a failover) is sent again on another connection
 * (`deadIdleRetries` times at most): nothing of the work had been sent.
 *
 * `signal` fired while the transaction is open ends it at once (below); `onForcedEnd`, given,
 * is then called, in the signal's abort event, with a promise that settles once the transaction
 * is over on the server (its process terminated and gone, or, when the signal came before the
 * BEGIN answered, rolled back), so that the caller can wait for that before it returns (a
 * Lambda container is frozen as soon as the invocation's handler returns).
 */
export async function pgTransaction<T>(pool: PgPool, work: (client: pg.PoolClient) => Promise<T>, options: PgTransactionOptions = {}): Promise<T> {
  const retries = deadIdleRetries(pool);
  for (let attempt = 1; ; attempt++) {
    try {
      return await transactionOnce(pool, work, options, attempt <= retries);
    } catch (error) {
      // The connection had ended before the transaction began (an idle session the server closed,
      // a failover): nothing of the work was sent. Again, on another connection.
      if (!(error instanceof BeginLost)) throw error;
    }
  }
}

export interface PgTransactionOptions {
  signal?: AbortSignal;
  onForcedEnd?: (ended: Promise<void>) => void;
  /**
   * A pull handler's business transaction: the application's, under the role's and database's
   * settings (its isolation, lock waits and plans), none of QueueBox's own.
   */
  handler?: boolean;
  /**
   * A pull handler's transaction only: the isolation level its `BEGIN` sets (the application's
   * choice, `pgTransactionRunner`); without it, the role's and database's default.
   */
  isolationLevel?: PgIsolationLevel;
}

/** PostgreSQL's isolation levels as `BEGIN ISOLATION LEVEL` names them, and their SQL keywords. */
export const PG_ISOLATION_LEVELS = Object.freeze({ 'read committed': 'READ COMMITTED', 'repeatable read': 'REPEATABLE READ', serializable: 'SERIALIZABLE' } as const);

/** A name of `PG_ISOLATION_LEVELS`. */
export type PgIsolationLevel = keyof typeof PG_ISOLATION_LEVELS;

/** Whether `level` is one of `PG_ISOLATION_LEVELS` (its own keys: never a prototype's). */
export function isPgIsolationLevel(level: unknown): level is PgIsolationLevel {
  return typeof level === 'string' && Object.hasOwn(PG_ISOLATION_LEVELS, level);
}

/** The SQL keywords of an isolation level (only these three: never text from elsewhere). */
function isolationKeywords(level: PgIsolationLevel): string {
  if (!isPgIsolationLevel(level)) throw new QueueBoxError(`unknown isolation level ${JSON.stringify(level)}`);
  return PG_ISOLATION_LEVELS[level];
}

/** The `BEGIN` of a `pgTransaction` failed with its connection ended (`connectionEnded`): nothing of the work was sent. */
class BeginLost extends Error {
  constructor(readonly lostWith: unknown) {
    super('the connection ended before the transaction began');
  }
}

async function transactionOnce<T>(pool: PgPool, work: (client: pg.PoolClient) => Promise<T>, options: PgTransactionOptions, retryBegin: boolean): Promise<T> {
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
  const settings = options.handler === true ? '' : `; ${OWN_TRANSACTION_SETTINGS}`;
  // In the BEGIN itself: the first thing of the transaction, before any statement takes its snapshot.
  const isolation = options.handler === true && options.isolationLevel !== undefined ? ` ISOLATION LEVEL ${isolationKeywords(options.isolationLevel)}` : '';
  let begun = false;
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
    let answer: pg.QueryResult | pg.QueryResult[];
    if (budget !== undefined && budget < ceilingMs) {
      // One round trip: BEGIN, the timeout for the transaction's first statement, the settings.
      answer = await answerWithin(client, () => client.query(`BEGIN${isolation}; ${setLocalTimeout(budget)}${settings}${pidQuery}`), budget);
      boundedClients.set(client, { timeoutMs: budget });
    } else {
      answer = await answerWithin(client, () => client.query(`BEGIN${isolation}${settings}${pidQuery}`), budget);
      if (budget !== undefined) boundedClients.set(client, { timeoutMs: ceilingMs });
    }
    begun = true;
    if (signal !== undefined) {
      const results = Array.isArray(answer) ? answer : [answer];
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
    if (retryBegin && !begun && !ended && !cutClients.has(client) && connectionEnded(error)) throw new BeginLost(error);
    // The server ended the connection between two statements (an idle-in-transaction or a
    // transaction timeout, a terminate): its own error says why, not `pg`'s "not queryable".
    throw mapPgError(lost.error !== undefined && notQueryable(error) ? lost.error : error);
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
