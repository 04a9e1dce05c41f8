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
 * window and full claims and the relay claim. The batch size is a literal of each text, so that
 * the cached plan is the generic plan of that size; the pull claim, whose batch follows the free
 * handler slots (`LIMIT $n`), is not one of them. A function is named after its table and a
 * digest of its statement (`outbox_claim_1a2b3c4d5e6f`); `migrate` drops QueueBox's functions of
 * statements no longer used. A driver calls the function of a statement and, when it does not
 * exist (code deployed before `migrate` ran, or a batch size the migration did not see),
 * runs the statement itself from then on: the same rows, planned at every batch.
 */
import { createHash } from 'node:crypto';
import type pg from 'pg';
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

const functionNames = new WeakMap<ClaimStatement, string>();

/** `<table>_claim_<12 hex digits of the statement's digest>`: a changed statement gets a new name. */
export function claimFunctionName(statement: ClaimStatement): string {
  let name = functionNames.get(statement);
  if (name === undefined) {
    const digest = createHash('sha256').update(`${statement.params.join(',')}\n${statement.returns}\n${statement.text}`).digest('hex');
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
AS $queuebox$
#variable_conflict use_column
BEGIN
  RETURN QUERY ${statement.text};
END
$queuebox$;
COMMENT ON FUNCTION ${fn}(${statement.params.join(', ')}) IS '${CLAIM_FUNCTION_COMMENT}';`;
}

/**
 * Creates (or replaces) the functions of `statements` and drops the claim functions of the same
 * tables that are not among them (statements of an earlier release or another batch size).
 * Runs inside the migrate transaction; returns the names created and dropped.
 */
export async function installClaimFunctions(
  client: pg.ClientBase,
  names: PgNames,
  statements: readonly ClaimStatement[],
): Promise<{ created: string[]; dropped: string[] }> {
  const wanted = new Set(statements.map(claimFunctionName));
  for (const statement of statements) await client.query(claimFunctionDdl(names, statement));
  const tables = [names.outboxTable, names.inboxTable];
  const { rows } = await client.query<{ name: string; signature: string }>(
    `SELECT p.proname AS name, p.oid::regprocedure::text AS signature
       FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
      WHERE n.nspname = $1 AND obj_description(p.oid, 'pg_proc') = $2`,
    [names.schema, CLAIM_FUNCTION_COMMENT],
  );
  const dropped: string[] = [];
  for (const row of rows) {
    if (wanted.has(row.name) || !NAME_SUFFIX.test(row.name)) continue;
    if (!tables.includes(row.name.slice(0, -'_claim_000000000000'.length))) continue;
    // The signature comes from the catalog (`regprocedure`: schema-qualified and quoted as needed).
    await client.query(`DROP FUNCTION IF EXISTS ${row.signature}`);
    dropped.push(row.name);
  }
  return { created: [...wanted], dropped };
}

/** What a driver remembers of its claim functions: the statements found to have none. */
export interface ClaimFunctionState {
  readonly missing: Set<ClaimStatement>;
}

/**
 * SQLSTATEs after which the statement runs itself: the function does not exist (42883), its
 * result no longer matches the table (42804: a column changed outside the migrations), or the
 * role may not execute it (42501). Any other error is the claim's own and is thrown.
 */
const FUNCTION_UNUSABLE = new Set(['42883', '42804', '42501']);

function functionUnusable(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code ?? (error as { cause?: { code?: unknown } } | null)?.cause?.code;
  return typeof code === 'string' && FUNCTION_UNUSABLE.has(code);
}

/**
 * Runs a claim: `run` gets the SQL text to send with the statement's bind values — the call of
 * its function when the driver uses claim functions and this one has not been found missing,
 * else the statement itself. When the function turns out unusable, the statement is remembered
 * and `run` runs again with the statement (the failed call changed nothing: an error ends it).
 * `run` may wrap the text in a transaction of its own; it is called again from the start.
 */
export async function runClaimStatement<T>(
  names: PgNames,
  state: ClaimFunctionState | undefined,
  statement: ClaimStatement,
  run: (text: string) => Promise<T>,
): Promise<T> {
  if (state === undefined || state.missing.has(statement)) return run(statement.text);
  const args = statement.params.map((_, i) => `$${i + 1}`).join(', ');
  try {
    return await run(`SELECT * FROM ${qualifiedName(names, statement)}(${args})`);
  } catch (error) {
    if (!functionUnusable(error)) throw error;
    state.missing.add(statement);
    return run(statement.text);
  }
}
