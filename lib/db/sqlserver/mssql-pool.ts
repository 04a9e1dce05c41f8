/**
 * One small `mssql` ConnectionPool per container, the statement shape every query builder returns,
 * and the helpers that run statements and transactions with errors mapped.
 *
 * Connection strings: the URL form `mssql://user:pass@host:1433/db?encrypt=true&trustServerCertificate=true`
 * (also `sqlserver://`), or an ADO string `Server=host,1433;Database=db;User Id=…;Password=…;Encrypt=true`.
 */
import type sql from 'mssql';
import { mssql } from './mssql-module.ts';
import type { QueueBoxConfig } from '../../config/schema.ts';
import { ConfigError, TransientDatabaseError, UsageError } from '../../errors.ts';
import { leaseWithinBudget, requireStatementBudgetMs } from '../statement-budget.ts';
import { isDeadlockVictim, jitteredPause, retryingDeadlockVictim } from '../deadlock-victim.ts';
import { LEFTOVER_TRANSACTION, mapMssqlError } from './error-map.ts';

/** The applock wait of every claim lock, in milliseconds (seed: "waits up to 10 seconds"). */
export const APPLOCK_WAIT_MS = 10_000;
/** Lowest request timeout the driver accepts: above the applock wait with room for the claim itself. */
export const MIN_REQUEST_TIMEOUT_MS = 30_000;
/** `SET LOCK_TIMEOUT` of every QueueBox statement: a row or key lock is waited for at most this long (error 1222). */
export const LOCK_WAIT_MS = 10_000;

/**
 * The session settings every statement QueueBox runs on its own connections starts with, so
 * nothing a previous user of a pooled connection set (a pull handler's isolation level, XACT_ABORT,
 * a lock timeout, an ANSI option) changes how it runs. `mssql` sends statements through
 * `sp_executesql`, and SET options set inside it revert when it returns: nothing set here leaks
 * to the next user of the connection either. The ANSI options and QUOTED_IDENTIFIER are the ones
 * filtered and computed-column indexes require. `IMPLICIT_TRANSACTIONS OFF` (else a fenced write
 * would open a transaction that stays open, with its locks, on the pooled connection),
 * `ROWCOUNT 0` (else a claim or fenced batch would stop after that many rows) and the largest
 * `TEXTSIZE` (else payloads would come back cut) undo what a handler may have set.
 */
export const SESSION_SETTINGS = `SET TRANSACTION ISOLATION LEVEL READ COMMITTED; SET XACT_ABORT ON; SET LOCK_TIMEOUT ${LOCK_WAIT_MS};
SET ANSI_NULLS ON; SET ANSI_PADDING ON; SET ANSI_WARNINGS ON; SET ARITHABORT ON; SET CONCAT_NULL_YIELDS_NULL ON; SET QUOTED_IDENTIFIER ON; SET NUMERIC_ROUNDABORT OFF;
SET IMPLICIT_TRANSACTIONS OFF; SET ROWCOUNT 0; SET TEXTSIZE 2147483647;
`;

/**
 * What a statement on QueueBox's own connections runs right after `SESSION_SETTINGS`: a
 * transaction left open on a pooled connection by its previous user (a raw `BEGIN TRANSACTION`
 * that never ended) would take the statement in — a fenced write or a claim would hold its rows
 * until that connection happened to commit, or be rolled back with it. The guard rolls the
 * leftover transaction back and refuses the statement with error `LEFTOVER_TRANSACTION`
 * (transient: run again, on a clean connection, it goes through). `depth` is the transaction
 * count the statement expects: 0 on the pool, 1 inside a transaction QueueBox began.
 */
export function transactionGuard(depth: 0 | 1): string {
  return `IF @@TRANCOUNT > ${depth}
BEGIN
  ROLLBACK TRANSACTION;
  THROW ${LEFTOVER_TRANSACTION}, N'queuebox: a transaction left open on this pooled connection was rolled back; the statement did not run', 1;
END;
`;
}

/** Transactions QueueBox opened itself (`mssqlTransaction`), as opposed to a caller's transaction. */
const OWN_TRANSACTIONS = new WeakSet<sql.Transaction>();

/** A bound parameter: `name` without `@`, always `p_…` so it never equals a DECLAREd `@v_…`. */
export interface MssqlParam {
  name: string;
  type: sql.ISqlType | (() => sql.ISqlType);
  value: unknown;
  /**
   * A lease of an invocation, in milliseconds (`value`): bound as `leaseWithinBudget(value)`, capped
   * to the time the invocation has left when `runOnce` binds the request's inputs (`boundValue`).
   */
  lease?: true;
}

/** SQL text plus its parameters: built without a server, so tests can inspect it. */
export interface MssqlStatement {
  text: string;
  params: MssqlParam[];
}

/** Something that makes requests: the pool, or a transaction (the caller's or QueueBox's own). */
export type MssqlRunner = sql.ConnectionPool | sql.Transaction;

/** Builds a parameter; refuses names outside the `p_` convention (spec §8: parameters ≠ variables). */
export function param(name: string, type: MssqlParam['type'], value: unknown): MssqlParam {
  if (!/^p_[a-z0-9_]+$/.test(name)) throw new Error(`parameter name ${name} must match p_[a-z0-9_]+`);
  return { name, type, value };
}

/**
 * A lease parameter (BIGINT milliseconds, see `msValue`) of a claim or renewal: `value` keeps the
 * lease asked for; the request binds it capped to the invocation's time left (`MssqlParam.lease`).
 */
export function leaseParam(name: string, leaseMs: number): MssqlParam {
  return { ...param(name, mssql().BigInt, msValue('leaseMs', leaseMs)), lease: true };
}

/**
 * The value a request binds for `p`: a lease capped to the time the invocation has left now (as
 * PostgreSQL does when it binds a claim's parameters), anything else as built.
 */
export function boundValue(p: MssqlParam): unknown {
  return p.lease === true ? leaseWithinBudget(p.value as number) : p.value;
}

/** The mssql pool options for this configuration; pure, so the timeouts can be checked without a server. */
export function mssqlPoolConfig(database: QueueBoxConfig['database'], url: string): sql.config {
  const base = /^(mssql|sqlserver):\/\//i.test(url) ? parseMssqlUrl(url) : parseAdo(url);
  return {
    ...base,
    requestTimeout: Math.max(database.requestTimeoutMs, MIN_REQUEST_TIMEOUT_MS),
    connectionTimeout: database.connectTimeoutMs,
    pool: { max: database.poolMax, min: 0, idleTimeoutMillis: 30_000 },
    // A socket check on checkout, not a `SELECT 1` round trip before every statement.
    validateConnection: 'socket',
    options: {
      ...base.options,
      // Dates travel as UTC; the columns hold UTC (SYSUTCDATETIME()).
      useUTC: true,
      appName: 'queuebox',
      // The SET options filtered indexes require; these are tedious's defaults, stated explicitly.
      enableQuotedIdentifier: true,
      enableAnsiNull: true,
      enableAnsiPadding: true,
      enableAnsiWarnings: true,
      enableArithAbort: true,
      enableConcatNullYieldsNull: true,
      enableNumericRoundabort: false,
    },
  };
}

function parseMssqlUrl(url: string): sql.config {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new ConfigError([{ key: 'database.url', message: 'is not a valid mssql:// URL' }]);
  }
  const q = u.searchParams;
  const flag = (name: string, fallback: boolean) => (q.has(name) ? q.get(name) === 'true' : fallback);
  const database = decodeURIComponent(u.pathname.replace(/^\//, ''));
  return {
    server: decodeURIComponent(u.hostname),
    port: u.port ? Number(u.port) : 1433,
    ...(database ? { database } : {}),
    ...(u.username ? { user: decodeURIComponent(u.username) } : {}),
    ...(u.password ? { password: decodeURIComponent(u.password) } : {}),
    options: {
      encrypt: flag('encrypt', true),
      trustServerCertificate: flag('trustServerCertificate', false),
      ...(q.get('instanceName') ? { instanceName: q.get('instanceName')! } : {}),
    },
  };
}

function parseAdo(connectionString: string): sql.config {
  const scheme = /^([a-z][a-z0-9+.-]*):\/\//i.exec(connectionString)?.[1];
  if (scheme !== undefined) {
    // A URL of another database (postgres://…) parses as an ADO string of no server.
    throw new ConfigError([{ key: 'database.url', message: `is a ${scheme}:// URL, but database.type is sqlserver: give an mssql://user:password@host:port/database URL or an ADO connection string (Server=…;Database=…)` }]);
  }
  let config: sql.config;
  try {
    config = mssql().ConnectionPool.parseConnectionString(connectionString);
  } catch (error) {
    throw new ConfigError([{ key: 'database.url', message: `is neither an mssql:// URL nor an ADO connection string (${String(error)})` }]);
  }
  if (typeof config.server !== 'string' || config.server === '') {
    throw new ConfigError([{ key: 'database.url', message: 'names no server: give an mssql://user:password@host:port/database URL or an ADO connection string with Server=…' }]);
  }
  return config;
}

/** Creates the container's pool (connects lazily on first use). */
export function createMssqlPool(database: QueueBoxConfig['database'], url: string): sql.ConnectionPool {
  const pool = new (mssql().ConnectionPool)(mssqlPoolConfig(database, url));
  // A dropped idle connection emits 'error'; without a listener the process would crash.
  pool.on('error', () => {});
  return pool;
}

/** Connects the pool when it is not connected yet (shared by concurrent callers). */
export async function ensureConnected(pool: sql.ConnectionPool, state: { connecting?: Promise<unknown> }): Promise<void> {
  if (pool.connected) return;
  state.connecting ??= pool.connect().catch((error: unknown) => {
    state.connecting = undefined;
    throw mapMssqlError(error);
  });
  await state.connecting;
}

/** True when `runner` is QueueBox's own: the pool or a transaction `mssqlTransaction` opened. */
function isOwnRunner(runner: MssqlRunner): boolean {
  return runner instanceof mssql().ConnectionPool || OWN_TRANSACTIONS.has(runner);
}

/**
 * The text sent for `statement` on `runner`: `SESSION_SETTINGS` first on QueueBox's own
 * connections (then `transactionGuard`), the caller's transaction untouched.
 */
export function statementText(runner: MssqlRunner, statement: MssqlStatement): string {
  if (!isOwnRunner(runner)) return statement.text;
  return `${SESSION_SETTINGS}${transactionGuard(runner instanceof mssql().ConnectionPool ? 0 : 1)}${statement.text}`;
}

/** Statements never run a second time after a dead socket (`runOnceOnly`). */
const ONCE_ONLY = new WeakSet<MssqlStatement>();

/**
 * Marks `statement` to run at most once even after a freeze: a replay is not conditional on its
 * own effect (a replayed row delivered again at once matches the filter again), so its error is
 * reported instead. Returns the statement.
 */
export function runOnceOnly(statement: MssqlStatement): MssqlStatement {
  ONCE_ONLY.add(statement);
  return statement;
}

/** When each pool's last statement ended (ms since the epoch, the host clock): how long its connections sat idle. */
const LAST_USE = new WeakMap<sql.ConnectionPool, number>();

/**
 * Error codes (as `mapMssqlError` reports them) of a socket found dead: reset, closed or a broken
 * pipe. Not a timeout: a statement that timed out may have run.
 */
const DEAD_SOCKET_CODES = new Set(['ECONNRESET', 'ESOCKET', 'ECONNCLOSED', 'EPIPE']);

/**
 * True when every connection of `pool` sat idle longer than the pool's idle timeout: connections
 * the pool would have closed, had its timer run — it does not while a Lambda container is frozen,
 * and after the thaw the first statements find sockets the network dropped meanwhile.
 */
function idlePastReap(pool: sql.ConnectionPool): boolean {
  const last = LAST_USE.get(pool);
  const reapMs = (pool as { config?: sql.config }).config?.pool?.idleTimeoutMillis ?? 30_000;
  return last !== undefined && Date.now() - last > reapMs;
}

/**
 * Runs one statement (one round trip) on a pool or a transaction; maps database errors. Inside a
 * pass (`withStatementBudget`) the request times out — and is cancelled on the server — when the
 * invocation's time runs out, if that comes before the pool's request timeout, and its lease
 * parameters are capped to the time left when they are bound (`boundValue`).
 *
 * A stale connection after a freeze: on the pool, a statement sent after the pool sat idle past its
 * idle timeout that fails because the socket was found dead runs again, once per connection the
 * pool may hold (each may be stale). The request never reached the server (the network dropped
 * the socket while it sat idle), and every statement QueueBox sends on its pool is conditional
 * (claims, fenced writes, the inbox insert with its id chosen once, reclaim, retention) — except
 * replays, marked `runOnceOnly`. Inside a transaction nothing runs again: the transaction died
 * with its connection.
 */
export async function runStatement<R>(runner: MssqlRunner, statement: MssqlStatement): Promise<sql.IResult<R>> {
  if (!(runner instanceof mssql().ConnectionPool)) return runOnce<R>(runner, statement);
  const stale = !ONCE_ONLY.has(statement) && idlePastReap(runner);
  const attempts = 1 + (stale ? Math.max(1, (runner as { config?: sql.config }).config?.pool?.max ?? 1) : 0);
  try {
    for (let attempt = 1; ; attempt += 1) {
      try {
        return await runOnce<R>(runner, statement);
      } catch (error) {
        if (attempt >= attempts || !isDeadSocket(error)) throw error;
      }
    }
  } finally {
    LAST_USE.set(runner, Date.now());
  }
}

function isDeadSocket(error: unknown): boolean {
  return error instanceof TransientDatabaseError && error.code !== undefined && DEAD_SOCKET_CODES.has(error.code);
}

async function runOnce<R>(runner: MssqlRunner, statement: MssqlStatement): Promise<sql.IResult<R>> {
  const budget = requireStatementBudgetMs();
  // `request(overrides)` takes a per-request timeout (mssql ≥ 11; not in its type definitions).
  const request = budget === undefined ? runner.request() : (runner as unknown as { request(overrides: { requestTimeout: number }): sql.Request }).request({ requestTimeout: Math.min(budget, poolRequestTimeoutMs(runner)) });
  // The latest point QueueBox controls: `mssql` takes a pool connection inside `query`, after it.
  for (const p of statement.params) request.input(p.name, p.type, boundValue(p));
  try {
    return await request.query<R>(statementText(runner, statement));
  } catch (error) {
    throw mapMssqlError(error);
  }
}

/** The request timeout of the pool a runner belongs to (a transaction's parent pool). */
function poolRequestTimeoutMs(runner: MssqlRunner): number {
  const pool = (runner instanceof mssql().Transaction ? (runner as unknown as { parent: sql.ConnectionPool }).parent : runner) as { config?: sql.config };
  return pool.config?.requestTimeout ?? MIN_REQUEST_TIMEOUT_MS;
}

/**
 * Runs `work` in a READ COMMITTED transaction; rolls back on error. `overrides.requestTimeout`
 * applies to every request of the transaction (0: none, for `migrate`'s index builds).
 */
export async function mssqlTransaction<T>(pool: sql.ConnectionPool, work: (tx: sql.Transaction) => Promise<T>, overrides?: { requestTimeout: number }): Promise<T> {
  // `transaction(overrides)` cascades the overrides to every request (mssql ≥ 11; not in its type definitions).
  const tx = (pool as unknown as { transaction(overrides?: { requestTimeout: number }): sql.Transaction }).transaction(overrides);
  OWN_TRANSACTIONS.add(tx);
  try {
    await tx.begin(mssql().ISOLATION_LEVEL.READ_COMMITTED);
  } catch (error) {
    throw mapMssqlError(error);
  }
  try {
    const result = await work(tx);
    await tx.commit();
    return result;
  } catch (error) {
    // An aborted transaction (XACT_ABORT, severe error) is already rolled back by the server.
    await tx.rollback().catch(() => {});
    throw mapMssqlError(error);
  }
}

export { DEADLOCK_ATTEMPTS } from '../deadlock-victim.ts';

/**
 * Runs `work` again when SQL Server chose it as a deadlock victim (error 1205: the victim's
 * statement or transaction was rolled back whole), up to `DEADLOCK_ATTEMPTS` times with a short
 * random pause; also when the statement was refused for a leftover transaction on its pooled
 * connection (`transactionGuard`: it did not run). Only for idempotent work on QueueBox's own
 * connections: fenced writes (the fence decides again), a relay forward, an inbox insert.
 */
export async function retryDeadlocks<T>(work: () => Promise<T>): Promise<T> {
  return retryingDeadlockVictim(work, { retryable: isDeadlock, pauseMs: jitteredPause });
}

/** A deadlock victim (1205), or a statement refused because its pooled connection held a leftover transaction (it did not run). */
function isDeadlock(error: unknown): boolean {
  return isDeadlockVictim(error) || (error instanceof TransientDatabaseError && error.code === String(LEFTOVER_TRANSACTION));
}

/**
 * A lease, delay or age in milliseconds as a BIGINT parameter value (a lease beyond 24.8 days no
 * longer overflows an INT); refuses what is not a finite number, or a negative one unless
 * `signed` (a delay may point into the past).
 */
export function msValue(name: string, ms: number, signed = false): number {
  if (!Number.isFinite(ms) || (!signed && ms < 0)) throw new UsageError(`${name} must be a finite number of milliseconds${signed ? '' : ' >= 0'}, not ${String(ms)}`);
  return Math.round(ms);
}

/** Accepts the caller's `mssql` Transaction (anything that makes requests on its connection). */
export function isMssqlTransaction(tx: unknown): tx is sql.Transaction {
  return typeof tx === 'object' && tx !== null && typeof (tx as { request?: unknown }).request === 'function' && typeof (tx as { begin?: unknown }).begin === 'function';
}

/** UUIDs come back upper-case from SQL Server; QueueBox reports them lower-case like PostgreSQL. */
export function lowerUuid<T extends string | null>(value: T): T {
  return (typeof value === 'string' ? value.toLowerCase() : value) as T;
}

export { dbNowPlusMs } from './caller-statements.ts';

/** Runs parameterless text as a plain SQL batch (DDL whose parse-time SET options must apply). */
export async function runBatch(runner: MssqlRunner, text: string): Promise<void> {
  try {
    await runner.request().batch(text);
  } catch (error) {
    throw mapMssqlError(error);
  }
}
