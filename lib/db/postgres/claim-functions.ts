/**
 * Claim statements as server-side functions: planned once per database connection, not at
 * every batch, without any session state on the client's side.
 *
 * A claim statement is long (retries, the window of the oldest rows, the loose scan of key heads)
 * and PostgreSQL plans an unnamed statement at every execution: about 0.7–0.9 ms of database CPU
 * per claim, close to half of what a keyless claim of 100 rows costs in all. A named prepared
 * statement avoids that, but it is session state: RDS Proxy pins the session that prepares one,
 * and PgBouncer before 1.21 in transaction mode fails it (`database.preparedStatements` opts in).
 * A PL/pgSQL function that runs the same statement with `RETURN QUERY` gets the same saving on
 * any connection: PL/pgSQL keeps the plans of a function's statements in the server process, and
 * the client sends a plain `SELECT * FROM fn($1)`. Measured alone on a 20,000-row keyless table
 * (PostgreSQL 15, `BEGIN` + claim of 100 + `ROLLBACK`): 2.1 ms unnamed, 1.4 ms prepared, 1.4–1.6 ms
 * as a function.
 *
 * `queuebox migrate` creates one function per claim statement the configuration uses: the outbox
 * window and full claims at `outbox.batchSize`. The batch size is a literal of each text, so that
 * the cached plan is the generic plan of that size. A function is named after its table and a
 * digest of its definition (`outbox_claim_1a2b3c4d5e6f`); `migrate` creates the missing ones and
 * drops QueueBox's functions of statements no longer used. A driver calls the function of a
 * statement and, when it is unusable (code deployed before `migrate` ran, or a batch size the
 * migration did not see), sends the statement itself — the same rows, planned at every batch —
 * and calls the function again `CLAIM_FUNCTION_RETRY_MS` later. The relay claim is not one of
 * them: its plan joins the heads of the aggregates to the table in an order no plan setting
 * pinned, so a plan kept from a small table would scan the table per head; the pull claim's batch
 * size is a parameter (`LIMIT $n`).
 */
import { createHash } from 'node:crypto';
import type pg from 'pg';
import type { MigrateResult } from '../driver.ts';
import { quoteIdent, type PgNames } from './names.ts';

/** A claim statement that may run as a function. */
export interface ClaimStatement {
  /** Unquoted name of the table it claims from: the function's name starts with it. */
  readonly table: string;
  /** The statement, with its bind parameters as `$1`, `$2`…. */
  readonly text: string;
  /** SQL types of `$1`, `$2`…. */
  readonly params: readonly string[];
  /** The `RETURNS TABLE` column list: the statement's result columns, names and types. */
  readonly returns: string;
}

/** The comment each claim function carries: `migrate` drops only stale functions that have it. */
export const CLAIM_FUNCTION_COMMENT = 'QueueBox claim statement (created by queuebox migrate; replaced when the statement changes)';

const NAME_SUFFIX = /_claim_[0-9a-f]{12}$/;

/**
 * The plan a function keeps must be right at any table size, because it outlives the statistics
 * it was made from: a plan cached while the queue was nearly empty (sequential scans, hash joins)
 * stays in use after a backlog arrives until the next `ANALYZE`, and there it turns a claim of
 * milliseconds into seconds (measured: 9 ms as a statement, 16 s through a function planned on
 * a 3-row table, 20,000 rows over 100 keys). Inside the function the planner may not choose a
 * sequential scan, a bitmap scan (which loses the index order a `LIMIT` needs), a hash or merge
 * join, or a materialized inner side (a full index scan kept and rescanned per candidate): the
 * claim's shape — ordered index scans, index probes per key, lookups by id — is what it picks on
 * a large table anyway, and it is cheap on a small one. The claim's `UPDATE` takes its rows by id
 * array (`= ANY (ARRAY(…))`), and the full claim locks its free heads by id in a lateral probe,
 * not by joins whose order would follow the estimates (a plan cached on an empty table scanned
 * the pending-rows index once per head: 6 s per claim).
 */
const PLAN_SHAPE = `SET enable_seqscan = off
  SET enable_bitmapscan = off
  SET enable_hashjoin = off
  SET enable_mergejoin = off
  SET enable_material = off`;

const functionNames = new WeakMap<ClaimStatement, string>();

/**
 * `<table>_claim_<12 hex digits of a digest of the function's definition>`: a changed statement or
 * plan setting gets a new name, so a function of that name is the function this code would create.
 */
export function claimFunctionName(statement: ClaimStatement): string {
  let name = functionNames.get(statement);
  if (name === undefined) {
    const digest = createHash('sha256').update(`${statement.params.join(',')}\n${statement.returns}\n${PLAN_SHAPE}\n${statement.text}`).digest('hex');
    name = `${statement.table}_claim_${digest.slice(0, 12)}`;
    functionNames.set(statement, name);
  }
  return name;
}

function qualifiedName(names: PgNames, statement: ClaimStatement): string {
  return `${quoteIdent(names.schema)}.${quoteIdent(claimFunctionName(statement))}`;
}

/** `CREATE OR REPLACE FUNCTION` of a statement (and its comment). */
export function claimFunctionDdl(names: PgNames, statement: ClaimStatement): string {
  if (statement.text.includes('$queuebox$')) throw new Error('a claim statement cannot contain the function body quote');
  const fn = qualifiedName(names, statement);
  // `use_column`: a bare `id` in the statement is the table's column, not the result column.
  return `CREATE OR REPLACE FUNCTION ${fn}(${statement.params.join(', ')})
  RETURNS TABLE (${statement.returns})
  LANGUAGE plpgsql VOLATILE
  ${PLAN_SHAPE}
AS $queuebox$
#variable_conflict use_column
BEGIN
  RETURN QUERY ${statement.text};
END
$queuebox$;
COMMENT ON FUNCTION ${fn}(${statement.params.join(', ')}) IS '${CLAIM_FUNCTION_COMMENT}';`;
}

/** What `migrate` did to the claim functions (names; see `MigrateResult`). */
export type ClaimFunctionChanges = NonNullable<MigrateResult['claimFunctions']>;

/**
 * Creates the functions of `statements` that do not exist yet and drops QueueBox's claim functions
 * of the outbox table that are not among them. Runs inside the migrate transaction. A function
 * that exists is left as it is (its name is the digest of its definition), so a `migrate` with
 * nothing to change changes nothing — also when run by a role that does not own the functions.
 */
export async function installClaimFunctions(client: pg.ClientBase, names: PgNames, statements: readonly ClaimStatement[]): Promise<ClaimFunctionChanges> {
  const { rows } = await client.query<{ name: string; signature: string; ours: boolean; droppable: boolean }>(
    `SELECT p.proname AS name, p.oid::regprocedure::text AS signature,
            obj_description(p.oid, 'pg_proc') IS NOT DISTINCT FROM $2 AS ours,
            pg_has_role(p.proowner, 'USAGE') AS droppable
       FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
      WHERE n.nspname = $1
      ORDER BY p.proname`,
    [names.schema, CLAIM_FUNCTION_COMMENT],
  );
  const existing = new Map(rows.map((r) => [r.name, r]));
  const changes: ClaimFunctionChanges = { created: [], kept: [], dropped: [], notDropped: [] };
  const wanted = new Set<string>();
  for (const statement of statements) {
    const name = claimFunctionName(statement);
    wanted.add(name);
    if (existing.get(name)?.ours === true) {
      changes.kept.push(name);
      continue;
    }
    await client.query(claimFunctionDdl(names, statement));
    changes.created.push(name);
  }
  for (const row of rows) {
    if (!row.ours || wanted.has(row.name) || !NAME_SUFFIX.test(row.name)) continue;
    if (row.name.slice(0, -'_claim_000000000000'.length) !== names.outboxTable) continue;
    if (!row.droppable) {
      changes.notDropped.push(row.name);
      continue;
    }
    // The signature comes from the catalog (`regprocedure`: schema-qualified and quoted as needed).
    await client.query(`DROP FUNCTION IF EXISTS ${row.signature}`);
    changes.dropped.push(row.name);
  }
  return changes;
}

/** How long a driver sends a statement itself after its function was found unusable, before it calls the function again. */
export const CLAIM_FUNCTION_RETRY_MS = 5 * 60_000;

/** A claim function found unusable, for the warning a driver logs. */
export interface ClaimFunctionUnusable {
  function: string;
  code: string;
  error: string;
}

/**
 * What a driver remembers of its claim functions: when each statement's function was last found
 * unusable (`now()` time, ms); until `retryMs` later the statement is sent itself. `warn` hears of
 * each such finding (the driver's logger, once one is set).
 */
export interface ClaimFunctionState {
  readonly missing: Map<ClaimStatement, number>;
  readonly retryMs: number;
  readonly now: () => number;
  warn?: (event: ClaimFunctionUnusable) => void;
}

export function newClaimFunctionState(options: { retryMs?: number; now?: () => number } = {}): ClaimFunctionState {
  return { missing: new Map(), retryMs: options.retryMs ?? CLAIM_FUNCTION_RETRY_MS, now: options.now ?? (() => performance.now()) };
}

function errorCode(error: unknown): unknown {
  return (error as { code?: unknown } | null)?.code ?? (error as { cause?: { code?: unknown } } | null)?.cause?.code;
}

/**
 * Whether `error` says the function itself cannot be used, so the statement runs itself:
 * - 42883 naming the function: it does not exist (not yet migrated, another batch size, dropped);
 * - 42501 naming the function: the role may not execute it (a 42501 on a table is the claim's own);
 * - 42804: its result no longer matches the table (a column changed outside the migrations);
 * - XX000 "cache lookup failed for function": it was dropped while this call was looking it up
 *   (a `migrate` of another release or batch size, at that moment).
 * Any other error is the claim's own and is thrown as it is.
 */
export function claimFunctionUnusable(error: unknown, functionName: string): boolean {
  const code = errorCode(error);
  const message = String((error as { message?: unknown } | null)?.message ?? '');
  switch (code) {
    case '42883':
    case '42501':
      return message.includes(functionName);
    case '42804':
      return true;
    case 'XX000':
      return /cache lookup failed for function/.test(message);
    default:
      return false;
  }
}

/**
 * Runs a claim: `run` gets the SQL text to send with the statement's bind values — the call of
 * its function when the driver uses claim functions and this one was not found unusable in the
 * last `retryMs`, else the statement itself. When the function turns out unusable, the time is
 * remembered, `warn` hears of it, and `run` runs again with the statement (the failed call changed
 * nothing: an error ends it). `run` may wrap the text in a transaction of its own; it is called
 * again from the start.
 */
export async function runClaimStatement<T>(
  names: PgNames,
  state: ClaimFunctionState | undefined,
  statement: ClaimStatement,
  run: (text: string) => Promise<T>,
): Promise<T> {
  if (state === undefined) return run(statement.text);
  const missingSince = state.missing.get(statement);
  if (missingSince !== undefined && state.now() - missingSince < state.retryMs) return run(statement.text);
  const args = statement.params.map((_, i) => `$${i + 1}`).join(', ');
  const name = claimFunctionName(statement);
  try {
    const result = await run(`SELECT * FROM ${qualifiedName(names, statement)}(${args})`);
    if (missingSince !== undefined) state.missing.delete(statement);
    return result;
  } catch (error) {
    if (!claimFunctionUnusable(error, name)) throw error;
    state.missing.set(statement, state.now());
    state.warn?.({ function: name, code: String(errorCode(error)), error: String((error as { message?: unknown }).message ?? error) });
    return run(statement.text);
  }
}
