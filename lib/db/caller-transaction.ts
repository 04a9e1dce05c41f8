/**
 * The caller's transaction handle: what `enqueue`, `inboxInsert` with a transaction and pull
 * completion write through, so QueueBox's row commits or rolls back with the caller's change.
 *
 * Typed structurally (no `pg` or `mssql` types here), so applications type-check against the
 * published declarations without installing the SQL Server driver or its types.
 */
import { UsageError } from '../errors.ts';
import { writesWholeRoundTrip } from './pg-query-class.ts';
import { SQLSERVER_TRANCOUNT } from './sqlserver/caller-statements.ts';

/**
 * A `pg` client on which the caller ran `BEGIN`: a `pg.PoolClient` from `pool.connect()` or a
 * `pg.Client`. Never a `pg.Pool`: a pool runs each query on whichever connection is free, outside
 * the caller's transaction (refused by type through `totalCount`, and at run time).
 */
export interface PgTransactionClient {
  query(text: string, values?: unknown[]): Promise<unknown>;
  /** Only a `pg.Pool` has it; a client inside a transaction must not. */
  readonly totalCount?: never;
  /** TypeORM's `DataSource`, `EntityManager` and `QueryRunner` have them: pass those to `queuebox/typeorm` (refused at run time too). */
  readonly dataSource?: never;
  readonly queryRunner?: never;
  readonly manager?: never;
}

/** An `mssql` `Transaction` after `await transaction.begin()`. */
export interface MssqlTransactionHandle {
  request(): unknown;
}

/** Rows and affected-row count of one statement run through a `CallerExecutor`. */
export interface CallerExecutorResult {
  rows: Array<Record<string, unknown>>;
  rowCount: number;
}

/**
 * A data-layer library's transaction, seen through one small interface (made by
 * `queuebox/<library>`'s `queueboxTransaction(tx)`): every QueueBox write in a caller transaction
 * goes through `query`, and `inTransaction` says what the library knows of the transaction.
 */
export interface CallerExecutor {
  /** Marks an adapter-made executor (a `pg` client has no such property). */
  readonly queueboxExecutor: true;
  /** The library, for error messages (`Kysely`, `Knex`, …). */
  readonly library: string;
  /** The database behind the library's connection. */
  readonly dialect: 'postgres' | 'sqlserver';
  /** How to get that library's transaction object, quoted in the `UsageError` that refuses one. */
  readonly hint: string;
  /** Runs `text` (placeholders `$1`…`$n`, converted by the adapter) with every value bound. */
  query(text: string, values: unknown[]): Promise<CallerExecutorResult>;
  /** `true`/`false` when the library knows whether its transaction is open; `undefined` when it cannot tell (the server is asked). */
  inTransaction(): boolean | undefined;
  /**
   * `query`, with a savepoint set and released ahead of the statement in the same round trip, so
   * the server refuses both outside a transaction block (SQLSTATE 25P01) and runs nothing: for a
   * connection that cannot report its transaction (Drizzle on a `pg` older than 8.21). Unset where
   * the library offers no such round trip.
   */
  queryChecked?(text: string, values: unknown[]): Promise<CallerExecutorResult>;
}

/** A transaction handle that belongs to the caller, on either dialect. */
export type CallerTransaction = PgTransactionClient | MssqlTransactionHandle | CallerExecutor;

/** True for an executor made by a `queuebox/<library>` adapter. */
export function isCallerExecutor(tx: unknown): tx is CallerExecutor {
  return typeof tx === 'object' && tx !== null && (tx as { queueboxExecutor?: unknown }).queueboxExecutor === true;
}

/** True for a `pg.Pool` (it counts its connections; a client does not). */
export function isPgPool(tx: unknown): boolean {
  return typeof tx === 'object' && tx !== null && typeof (tx as { totalCount?: unknown }).totalCount === 'number' && typeof (tx as { connect?: unknown }).connect === 'function';
}

/** Throws `UsageError` when `tx` is a `pg.Pool` instead of a client inside the caller's transaction. */
export function refusePool(tx: unknown, operation: string): void {
  if (isPgPool(tx)) {
    throw new UsageError(
      `${operation} needs a client inside your transaction, not a pg.Pool (a pool runs each query on any free connection, outside the transaction): ` +
        "const client = await pool.connect(); await client.query('BEGIN'); … pass client …; COMMIT; client.release()",
    );
  }
}

/**
 * Throws `UsageError` for a TypeORM `DataSource`, `EntityManager` or `QueryRunner` (each has a
 * `query` method, and one of `dataSource`, `queryRunner`, `manager`): a `DataSource` or its
 * `manager` runs each query on any pooled connection, and what TypeORM's `query` answers is not
 * a `pg` result. `queuebox/typeorm` takes them.
 */
function refuseTypeOrm(tx: unknown, operation: string): void {
  if (typeof tx !== 'object' || tx === null || !('dataSource' in tx || 'queryRunner' in tx || 'manager' in tx)) return;
  throw new UsageError(
    `${operation} was given a TypeORM object (DataSource, EntityManager or QueryRunner), which is not a pg client; nothing was written. ` +
      "Use queuebox/typeorm: import { enqueue, queueboxTransaction } from 'queuebox/typeorm', and pass the manager of dataSource.transaction(async (manager) => …) to its enqueue, or queueboxTransaction(manager) to complete.",
  );
}

/** The savepoint that proves a `pg` client is inside a transaction block (see `writeInsidePgTransaction`). */
const CHECK_SAVEPOINT = 'queuebox_inside_transaction';

/** The check as one text of two statements, sent as a simple query (no bind values). */
const CHECK_TEXT = `SAVEPOINT ${CHECK_SAVEPOINT}; RELEASE SAVEPOINT ${CHECK_SAVEPOINT}`;

/** What `writeInsidePgTransaction` uses of a `pg` client (or of what was passed as one). */
interface PgClientLike {
  getTransactionStatus?: () => string | null;
  query(text: string, values?: unknown[]): Promise<unknown>;
}

/**
 * Runs `work`, one statement written through the handle it is given (`enqueue`'s INSERT, pull
 * `complete`'s UPDATE), only if the caller's handle `tx` is inside a transaction block; otherwise
 * throws `UsageError` and writes nothing. Without `BEGIN`, each statement commits on its own: the
 * row would be published (or the message marked processed) whether or not the business change
 * commits, which is what the outbox and the inbox exist to prevent.
 *
 * `pg` reports the state the server announced after the client's last statement
 * (`getTransactionStatus()`: `T` in a block, `E` in a failed block, `I` outside one, `null` before
 * the connection is ready). `T` and `E` need no check (in `E` the write fails with the server's
 * own error), and the statement is sent at once through `tx` itself, so it reaches the server in
 * the order the caller called. `I` or `null` may still be a block: a `BEGIN` sent without waiting
 * for it is queued ahead of this write. So then a savepoint is set and released in one query
 * first — refused by the server outside a block (SQLSTATE 25P01); set and released together, it
 * never spans the caller's own statements or savepoints — one extra round trip, only on a client
 * that has not yet reported a transaction. After `work`, a client that reports `I` wrote outside a
 * block after all (its caller ended the transaction without waiting for this write): that is a
 * `UsageError` too, naming what was written.
 *
 * A handle without `getTransactionStatus` cannot tell, and nothing after the write could either: a
 * client of `pg` older than 8.21, an object whose `query` forwards to a client or a pool. There
 * the check travels in the same round trip as the statement — the savepoint set and released,
 * then the statement, on a `pg` client through its own query class (`checkedPgQuery`) — so
 * nothing the caller sends can come between them: a write not awaited before the caller's
 * `ROLLBACK` ends with that transaction, and behind a pool the server refuses the savepoint and
 * runs nothing. An object whose `query` forwards gets the same as one simple query, the values
 * written into it as dollar-quoted literals (`checkedSimpleQuery`).
 *
 * A `pg.Pool` and TypeORM's objects are refused before any statement. What has no `query` (an
 * `mssql` Transaction given to `complete`) is handed to `work` as it is.
 */
export async function writeInsidePgTransaction<H extends CallerTransaction, T>(
  tx: H,
  operation: string,
  work: (db: H extends { query: unknown } ? Pick<H, 'query'> : H) => Promise<T>,
  written: (result: T) => string,
): Promise<T> {
  const run = work as (db: unknown) => Promise<T>;
  if (isCallerExecutor(tx)) return insideExecutorTransaction(tx, operation, run, written);
  // Said as what they are, not as a client outside BEGIN (which the check would find them to be).
  refusePool(tx, operation);
  refuseTypeOrm(tx, operation);
  const client = tx as PgClientLike;
  // Not a `pg` client at all (an `mssql` Transaction given to `complete`): `work` refuses it or
  // takes it (SQL Server's own path).
  if (typeof client.query !== 'function') return run(tx);
  const reports = typeof client.getTransactionStatus === 'function';
  const status = reports ? client.getTransactionStatus!() : undefined;
  const outside = () =>
    new UsageError(
      `${operation} ran outside a transaction: the client has not run BEGIN, so its write would commit on its own, apart from your change; nothing was written. ` +
        "await client.query('BEGIN'); … pass client …; await client.query('COMMIT')",
    );
  if (status !== 'T' && status !== 'E') {
    const checked = reports ? undefined : (checkedPgQuery(client) ?? checkedSimpleQuery(client));
    if (checked !== undefined) {
      // The check goes with the statement; nothing to ask afterwards either.
      try {
        return await run(checkedOnce(client, checked));
      } catch (error) {
        if (noTransaction(error)) throw outside();
        throw error;
      }
    }
    // One query of two statements (the simple protocol runs them in order and stops at the first
    // refusal): two queries queued on the caller's client would be a query sent while another
    // runs, which `pg` 8 warns of and `pg` 9 refuses.
    try {
      await client.query(CHECK_TEXT);
    } catch (error) {
      if (noTransaction(error)) throw outside();
      throw error;
    }
  }
  const result = await run(tx);
  if (reports && client.getTransactionStatus!() === 'I') {
    throw new UsageError(
      `${operation} wrote ${written(result)} after its transaction had ended (COMMIT or ROLLBACK was sent before ${operation} finished), so it committed on its own, apart from your change. ` +
        `Await ${operation} before ending the transaction.`,
    );
  }
  return result;
}

/** `client` whose first query goes through `checked` (the one `work` is for); any later one is the client's own. */
function checkedOnce(client: PgClientLike, checked: (text: string, values: unknown[]) => Promise<unknown>): PgClientLike {
  let first = true;
  return {
    query: (text, values = []) => {
      if (!first) return client.query(text, values);
      first = false;
      return checked(text, values);
    },
  };
}

/** The part of a `pg` connection (`client.connection`) a checked query writes to. */
interface PgWire {
  parse(query: { text: string }): void;
  bind(config: object): void;
  execute(config: object): void;
  stream?: { cork?: () => void; uncork?: () => void };
}

/** A `pg` query (`pg.Query`, a "submittable"): the client hands it the connection when its turn comes, then the server's answers. */
interface PgSubmittable {
  submit(connection: PgWire): Error | null | undefined;
  handleCommandComplete(message: unknown, connection: PgWire): void;
}

type PgQueryClass = new (config: { text: string; values: unknown[]; queryMode: 'extended' }, values: undefined, callback: (error: Error | null, result: unknown) => void) => PgSubmittable;

/** `pg.Query` subclasses that send the check ahead of their statement, one per `pg` copy (its `Client.Query`). */
const checkedQueryClasses = new WeakMap<PgQueryClass, PgQueryClass>();

function checkedQueryClass(Query: PgQueryClass): PgQueryClass {
  let Checked = checkedQueryClasses.get(Query);
  if (Checked === undefined) {
    Checked = class extends Query {
      /** Command completions still to come from the check (`SAVEPOINT`, `RELEASE`), not part of the statement's result. */
      #checkAnswers = 2;

      /**
       * Always the extended protocol, which the check is written in: `pg` before 8.12 ignores
       * `queryMode`, and would send a statement without values as a simple query.
       */
      requiresPreparation(): boolean {
        return true;
      }

      override submit(connection: PgWire): Error | null | undefined {
        connection.stream?.cork?.();
        try {
          for (const text of [`SAVEPOINT ${CHECK_SAVEPOINT}`, `RELEASE SAVEPOINT ${CHECK_SAVEPOINT}`]) {
            connection.parse({ text });
            connection.bind({});
            connection.execute({});
          }
          // The statement, then the one Sync that ends the round trip.
          return super.submit(connection);
        } finally {
          connection.stream?.uncork?.();
        }
      }

      override handleCommandComplete(message: unknown, connection: PgWire): void {
        if (this.#checkAnswers > 0) {
          this.#checkAnswers -= 1;
          return;
        }
        super.handleCommandComplete(message, connection);
      }
    };
    checkedQueryClasses.set(Query, Checked);
  }
  return Checked;
}

/**
 * For a `pg` client that cannot report its transaction (`pg` before 8.21): runs one statement with
 * the check in the same round trip — `SAVEPOINT`, `RELEASE SAVEPOINT`, then the statement, in the
 * extended protocol with a single Sync, through `pg`'s own query class of that client. Outside a
 * transaction block PostgreSQL refuses the savepoint (SQLSTATE 25P01) and skips the rest up to
 * the Sync, so the statement never runs; inside one, all three run in the caller's transaction.
 * Queued on the client like any query, nothing the caller sends afterwards (a `ROLLBACK` of an
 * enqueue not awaited) can come between the check and the statement. Undefined for what is not
 * such a client (a wrapper, `pg-native`): for a wrapper, see `checkedSimpleQuery`.
 */
export function checkedPgQuery(client: unknown): ((text: string, values: unknown[]) => Promise<unknown>) | undefined {
  if (typeof client !== 'object' || client === null || isPgPool(client)) return undefined;
  const Query = (client.constructor as { Query?: unknown } | undefined)?.Query;
  const wire = (client as { connection?: Partial<PgWire> }).connection;
  if (typeof Query !== 'function' || typeof wire?.parse !== 'function' || typeof wire.bind !== 'function' || typeof wire.execute !== 'function' || !writesWholeRoundTrip(Query)) return undefined;
  if (typeof (client as { query?: unknown }).query !== 'function') return undefined;
  const Checked = checkedQueryClass(Query as PgQueryClass);
  return (text, values) =>
    new Promise((resolve, reject) => {
      const query = new Checked({ text, values, queryMode: 'extended' }, undefined, (error, result) => (error ? reject(error) : resolve(result)));
      (client as { query(submittable: PgSubmittable): unknown }).query(query);
    });
}

/** A bind parameter `$n` of a statement of QueueBox's, outside its quoted literals, quoted names and comments. */
const PARAMETER = /'(?:[^']|'')*'|"(?:[^"]|"")*"|--[^\n]*|(?<![\w$])\$(\d+)(?!\d)/g;

/**
 * `value` as a literal PostgreSQL reads as it reads the same value bound as a text parameter of
 * unknown type (what `pg` sends): `NULL`, or its text between dollar quotes whose tag the text
 * does not hold (`$q$…$q$`, `$qq$…$qq$`, …). Nothing inside dollar quotes is an escape — not a
 * quote, not a backslash — whatever `standard_conforming_strings`, `backslash_quote` or the
 * session's `client_encoding` say: in the multibyte client encodings PostgreSQL accepts (GBK,
 * BIG5, SJIS, UHC, GB18030) a character's later bytes can be a backslash but never a `$`, so
 * no byte of the text can end the literal early. Undefined for a value of any other kind, and for
 * text holding NUL (the simple protocol ends a query's text at a NUL; a bound value holding one
 * is refused by the server anyway).
 */
function literalOf(value: unknown): string | undefined {
  if (value === null || value === undefined) return 'NULL';
  let text: string;
  if (typeof value === 'string') text = value;
  else if (typeof value === 'number' && Number.isFinite(value)) text = String(value);
  else if (typeof value === 'boolean') text = String(value);
  else return undefined;
  if (text.includes('\0')) return undefined;
  let tag = '$q$';
  // The literal ends at the first tag after the opening one: the text followed by the tag must hold it only at its end.
  while ((text + tag).indexOf(tag) !== text.length) tag = `$${'q'.repeat(tag.length - 1)}$`;
  return `${tag}${text}${tag}`;
}

/**
 * `text` with each `$n` replaced by value `n` as a literal (`literalOf`). Undefined when a value
 * cannot be written so, or a `$n` has no value.
 */
function withLiterals(text: string, values: readonly unknown[]): string | undefined {
  const literals = values.map(literalOf);
  if (literals.includes(undefined)) return undefined;
  let complete = true;
  const written = text.replace(PARAMETER, (match, n: string | undefined) => {
    if (n === undefined) return match;
    const literal = literals[Number(n) - 1];
    if (literal === undefined) complete = false;
    return literal ?? match;
  });
  return complete ? written : undefined;
}

/**
 * For an object whose `query` forwards to a client or a pool: no `pg` connection to send the
 * check on ahead of the statement in the extended protocol (`checkedPgQuery`), so the check and
 * the statement go as one simple query — `SAVEPOINT`, `RELEASE SAVEPOINT`, then the statement with
 * its values written in as literals (`withLiterals`), sent with no values, so the simple protocol
 * runs them in order and stops at the first refusal: outside a transaction block PostgreSQL
 * refuses the savepoint (SQLSTATE 25P01, a query of several statements is an implicit block, not
 * one of the caller's), and the statement never runs. Answers the statement's result (the last of
 * the three). A value that cannot be written as a literal (not text, a number, a boolean or null;
 * text holding NUL) makes the check a query of its own ahead of the statement.
 */
function checkedSimpleQuery(client: PgClientLike): (text: string, values: unknown[]) => Promise<unknown> {
  return async (text, values) => {
    const written = withLiterals(text, values);
    if (written === undefined) {
      await client.query(CHECK_TEXT);
      return client.query(text, values);
    }
    const results = await client.query(`${CHECK_TEXT}; ${written}`);
    if (Array.isArray(results)) return results[results.length - 1];
    return isReadableResult(results) ? results : unreadableResult();
  };
}

/** Whether `result` is read as `pg`'s result of one statement (it has its `rows`). */
function isReadableResult(result: unknown): boolean {
  return typeof result === 'object' && result !== null && Array.isArray((result as { rows?: unknown }).rows);
}

/**
 * The answer of an object whose `query` did not return `pg`'s array of results for a query of
 * several statements (it read `rows` of the array, say): the statement ran, in the caller's
 * transaction, but its result is lost. Reading the result throws a `UsageError` that says so;
 * `enqueue`, which chose its row's id itself, does not read it.
 */
function unreadableResult(): unknown {
  const refuse = (): never => {
    throw new UsageError(
      "the object passed as the transaction answered a query of several statements without pg's array of results, so the statement's result cannot be read; the statement ran in your transaction: roll it back. " +
        'Make its query return what the pg client returns.',
    );
  };
  return Object.defineProperties({}, { rows: { get: refuse }, rowCount: { get: refuse } });
}

/**
 * `writeInsidePgTransaction` for a library's transaction (`CallerExecutor`): refused when the
 * library says its transaction is not open; when it cannot tell, the server is asked (PostgreSQL:
 * through an executor with `queryChecked`, in the same round trip as the statement; through
 * another, a savepoint set and released in one query, refused outside a block; SQL Server:
 * `@@TRANCOUNT`). After `work`, a library that now reports its transaction ended gets the same
 * `UsageError` as a `pg` client.
 */
async function insideExecutorTransaction<T>(tx: CallerExecutor, operation: string, work: (db: unknown) => Promise<T>, written: (result: T) => string): Promise<T> {
  const outside = () =>
    new UsageError(`${operation} ran outside a transaction: pass ${tx.library}'s transaction object (${tx.hint}), not the connection or client it came from; nothing was written.`);
  const state = tx.inTransaction();
  if (state === false) throw outside();
  let db: CallerExecutor = tx;
  if (state === undefined) {
    if (tx.dialect === 'sqlserver') {
      const { rows } = await tx.query(SQLSERVER_TRANCOUNT, []);
      if (Number(rows[0]?.depth ?? 0) === 0) throw outside();
    } else if (tx.queryChecked !== undefined) {
      const checked = tx.queryChecked;
      let first = true;
      db = {
        ...tx,
        query: (text, values) => {
          if (!first) return tx.query(text, values);
          first = false;
          return checked(text, values);
        },
      };
    } else {
      // One query of two statements, as on a `pg` client: a statement of the caller's (a
      // postgres.js reserved connection runs its queries as they come) cannot run between them.
      try {
        await tx.query(CHECK_TEXT, []);
      } catch (error) {
        if (noTransaction(error)) throw outside();
        throw error;
      }
    }
  }
  let result: T;
  try {
    result = await work(db);
  } catch (error) {
    if (db !== tx && noTransaction(error)) throw outside();
    throw error;
  }
  if (tx.inTransaction() === false) {
    // The library reports its transaction ended once its COMMIT or ROLLBACK has been sent, so a
    // write sent just before it (an enqueue not awaited) ended with it: which of the two cannot be
    // told from here.
    throw new UsageError(
      `${operation} wrote ${written(result)} while ${tx.library}'s transaction was ending or after it had ended: the row either ended with the transaction (committed with your change, or rolled back with it) or committed on its own, apart from your change. Await ${operation} before ending the transaction.`,
    );
  }
  return result;
}

/** SQLSTATE 25P01: no_active_sql_transaction. */
function noTransaction(error: unknown): boolean {
  return sqlState(error) === '25P01';
}

/**
 * The SQLSTATE of a driver error, also when a library wraps it: `cause` (Drizzle), `original`
 * (Sequelize), `driverError` (TypeORM), `originalCode`, Prisma's `meta.code` and Prisma 7's
 * driver adapter error (`meta.driverAdapterError.cause`). Prisma's own codes (`P1000`–`P6999`,
 * e.g. `P2010` for any failed raw query) are not SQLSTATEs and are passed over; PL/pgSQL's
 * `P0001`… are.
 */
export function sqlState(error: unknown, depth = 0): string | undefined {
  if (typeof error !== 'object' || error === null || depth > 4) return undefined;
  const e = error as { code?: unknown; meta?: { code?: unknown; driverAdapterError?: unknown }; cause?: unknown; original?: unknown; driverError?: unknown; originalCode?: unknown };
  for (const code of [e.code, e.originalCode, e.meta?.code]) if (typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) && !/^P[1-9]\d{3}$/.test(code)) return code;
  for (const inner of [e.cause, e.original, e.driverError, e.meta?.driverAdapterError]) {
    const code = sqlState(inner, depth + 1);
    if (code !== undefined) return code;
  }
  return undefined;
}
