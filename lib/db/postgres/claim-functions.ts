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
 * statement only once it verified that the function is QueueBox's own — owner and exact
 * definition, never the comment (`claim-function-install.ts`) — and, when it is unusable (code
 * deployed before `migrate` ran, a batch size the migration did not see, or a function another
 * role planted or altered), sends the statement itself — the same rows, planned at every batch —
 * and verifies and calls the function again `CLAIM_FUNCTION_RETRY_MS` later. The relay and pull
 * claims are sent as statements: the pull claim's batch size is a parameter (`LIMIT $n`); the
 * relay claim was kept out because it joined its heads to the table by id (below) — it no longer
 * does, but `migrate` creates no function for it (yet).
 *
 * A named prepared statement (`database.preparedStatements`) keeps its plan as a function does,
 * so every prepared claim — the relay and pull claims too — is planned under the same settings
 * (`PINNED_CLAIM_PLAN`, sent with the claim in its round trip). The relay and pull claims meet
 * them since they join their heads and rows without aggregate back to the table by ctid, as the
 * outbox claims do: joined by id, in an order no plan setting pins, a plan kept from a few rows
 * drove that join from a scan of the whole table and rescanned the heads per row (a relay claim
 * of 100 read 405,646 buffers, 13.6 s, at 100,000 rows).
 */
import { createHash } from 'node:crypto';
import { redactError } from '../../claims/redact.ts';
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

/**
 * The comment each claim function carries: `migrate` drops only stale functions that have it (and
 * that it may drop). It is never a reason to call or keep a function: anyone may comment their own.
 */
export const CLAIM_FUNCTION_COMMENT = 'QueueBox claim statement (created by queuebox migrate; replaced when the statement changes)';

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
 * array (`= ANY (ARRAY(…))`), and the full claim joins its free heads back by ctid (a TID scan
 * per head, in the one nested loop these settings leave), not by id, whose join a plan cached on
 * an empty table ran as a scan of the pending-rows index per head (6 s per claim).
 *
 * And no JIT compilation: PostgreSQL compiles a plan whose estimated cost passes
 * `jit_above_cost` (100,000 by default, `jit` on since PostgreSQL 12) at every execution, and a
 * function's cached plan keeps that decision. Under the settings above the claim's estimate on a
 * large table passes it (about 400,000 on 1,000,000 rows over 100 keys), while the claim itself
 * reads a few thousand buffers: measured there, a window claim of 100 took 108 ms of which the
 * compile was 102, the full claim 298 ms of which 285; 5 and 9 ms without it.
 */
const PLAN_SHAPE = `SET enable_seqscan = off
  SET enable_bitmapscan = off
  SET enable_hashjoin = off
  SET enable_mergejoin = off
  SET enable_material = off
  SET jit = off`;

/**
 * The `search_path` a claim function runs with, whatever the caller's: the system catalog, then
 * the session's temporary schema (last, so that a temporary table or view never takes the place
 * of a name). Every QueueBox object in a claim statement is schema-qualified (`PgNames`), so the
 * path only resolves PostgreSQL's own types, functions and operators, and it holds no schema that
 * another role may create in: an operator or function planted where a caller's path looks cannot
 * run inside the function with QueueBox's rights. Part of the definition (and of the name's
 * digest): a function installed before it had none, and `migrate` installs the new one.
 */
const FUNCTION_SEARCH_PATH = 'SET search_path = pg_catalog, pg_temp';

const functionNames = new WeakMap<ClaimStatement, string>();

/**
 * `<table>_claim_<12 hex digits of a digest of the function's definition>`: a changed statement or
 * plan setting gets a new name, so a function of that name is the function this code would create.
 */
export function claimFunctionName(statement: ClaimStatement): string {
  let name = functionNames.get(statement);
  if (name === undefined) {
    const digest = createHash('sha256').update(`${statement.params.join(',')}\n${statement.returns}\n${PLAN_SHAPE}\n${FUNCTION_SEARCH_PATH}\n${statement.text}`).digest('hex');
    name = `${statement.table}_claim_${digest.slice(0, 12)}`;
    functionNames.set(statement, name);
  }
  return name;
}

function qualifiedName(names: PgNames, statement: ClaimStatement): string {
  return `${quoteIdent(names.schema)}.${quoteIdent(claimFunctionName(statement))}`;
}

/** `SET name = value` lines as PostgreSQL stores them in `pg_proc.proconfig` (`name=value`). */
function storedSettings(lines: string): string[] {
  return lines.split('\n').map((line) => line.trim().replace(/^SET (\w+) = (.+)$/, '$1=$2'));
}

/** The plan settings alone, as stored: what a prepared claim sets for its transaction too (`PINNED_CLAIM_PLAN`). */
const PLAN_SETTINGS: readonly string[] = storedSettings(PLAN_SHAPE);

/**
 * The settings each function carries (`pg_proc.proconfig`), as PostgreSQL stores them: what a
 * function of QueueBox's must have, exactly — the plan settings and its `search_path`; any other
 * setting, or another path, is not ours.
 */
export const CLAIM_FUNCTION_SETTINGS: readonly string[] = [...PLAN_SETTINGS, ...storedSettings(FUNCTION_SEARCH_PATH)];

/**
 * The same plan settings as one statement that sets each for the current transaction only
 * (`set_config(…, true)`): what a prepared claim (`database.preparedStatements`) sends ahead of
 * itself in its round trip (`pgClaimQuery`), so that PostgreSQL makes its plans — and the
 * generic plan it keeps from the sixth execution until the table's statistics change, or until
 * the connection's plan cache is reset — as it makes a function's. Without them a generic plan
 * made on a few rows kept its sequential scans and hash joins under a backlog. Measured on
 * 100,000 rows over 100 keys or aggregates, never analyzed, after claims on a few rows (buffers
 * read by a claim): outbox window claim of 100, 6,330 → 1,747; full claim, 7,561 → 5,270; relay
 * claim of 100, 10,853 → 5,117; pull claim of 10, 3,792 → 1,437. Set per transaction, not on
 * the session: behind PgBouncer 1.21+ in transaction mode a session `SET` would stay on a server
 * connection that other clients get next, and would not follow this client to another.
 */
export const PINNED_CLAIM_PLAN = `SELECT ${PLAN_SETTINGS.map((setting) => {
  const [name, value] = setting.split('=');
  return `set_config('${name}', '${value}', true)`;
}).join(', ')}`;

/** The body (`pg_proc.prosrc`) of the function of `statement`: what a function of QueueBox's must hold, exactly. */
export function claimFunctionBody(statement: ClaimStatement): string {
  if (statement.text.includes('$queuebox$')) throw new Error('a claim statement cannot contain the function body quote');
  // `use_column`: a bare `id` in the statement is the table's column, not the result column.
  return `
#variable_conflict use_column
BEGIN
  RETURN QUERY ${statement.text};
END
`;
}

/** `CREATE OR REPLACE FUNCTION` of a statement (and its comment). */
export function claimFunctionDdl(names: PgNames, statement: ClaimStatement): string {
  const body = claimFunctionBody(statement);
  const fn = qualifiedName(names, statement);
  return `CREATE OR REPLACE FUNCTION ${fn}(${statement.params.join(', ')})
  RETURNS TABLE (${statement.returns})
  LANGUAGE plpgsql VOLATILE SECURITY INVOKER
  ${PLAN_SHAPE}
  ${FUNCTION_SEARCH_PATH}
AS $queuebox$${body}$queuebox$;
COMMENT ON FUNCTION ${fn}(${statement.params.join(', ')}) IS '${CLAIM_FUNCTION_COMMENT}';`;
}

/**
 * The call a claim sends: every argument cast to its declared type, so that an overload of the
 * same name with other argument types (created by anyone) is never the one PostgreSQL picks.
 */
export function claimFunctionCall(names: PgNames, statement: ClaimStatement): string {
  const args = statement.params.map((type, i) => `$${i + 1}::${type}`).join(', ');
  return `SELECT * FROM ${qualifiedName(names, statement)}(${args})`;
}

/** How long a driver sends a statement itself after its function was found unusable, before it calls the function again. */
export const CLAIM_FUNCTION_RETRY_MS = 5 * 60_000;

/** A claim function found unusable, for the warning a driver logs. */
export interface ClaimFunctionUnusable {
  function: string;
  /** The error code of the failed call, or `foreign` / `altered` / `schema` when the verification refused it. */
  code: string;
  error: string;
  /** The role that owns the function, when the verification found one that is not QueueBox's. */
  owner?: string;
}

/**
 * What the verification of a statement's function found (see `claim-function-install.ts`):
 * `usable` (QueueBox's own: trusted owner, exact definition; its oid), `missing`, or refused —
 * `foreign` (another role owns it, or an overload of its name), `altered` (not the definition
 * QueueBox creates), `schema` (other roles may create objects in the schema).
 */
export type ClaimFunctionVerdict =
  | { status: 'usable'; oid: number }
  | { status: 'missing' }
  | { status: 'foreign' | 'altered' | 'schema'; detail: string; owner?: string };

/**
 * What a driver remembers of its claim functions: when each statement's function was last found
 * unusable (`now()` time, ms) — until `retryMs` later the statement is sent itself — and the oid of
 * each function `verify` found usable (verified once per container, again after any failure).
 * Without `verify` no function is ever called. `warn` hears of each finding (the driver's logger).
 */
export interface ClaimFunctionState {
  readonly missing: Map<ClaimStatement, number>;
  readonly verified: Map<ClaimStatement, number>;
  /** Verifications under way (one per statement at a time), each settling once its verdict is recorded. */
  readonly verifying: Map<ClaimStatement, Promise<void>>;
  /** Statements sent once without their function, before any verification: the next claim of each verifies it. */
  readonly sent: Set<ClaimStatement>;
  readonly retryMs: number;
  readonly now: () => number;
  readonly verify?: (statement: ClaimStatement) => Promise<ClaimFunctionVerdict>;
  warn?: (event: ClaimFunctionUnusable) => void;
}

/** A fresh state: nothing verified, nothing missing. */
export function newClaimFunctionState(
  options: { retryMs?: number; now?: () => number; verify?: (statement: ClaimStatement) => Promise<ClaimFunctionVerdict> } = {},
): ClaimFunctionState {
  return {
    missing: new Map(),
    verified: new Map(),
    verifying: new Map(),
    sent: new Set(),
    retryMs: options.retryMs ?? CLAIM_FUNCTION_RETRY_MS,
    now: options.now ?? (() => performance.now()),
    ...(options.verify ? { verify: options.verify } : {}),
  };
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
 * its function when the driver uses claim functions, the function was verified as QueueBox's own
 * (once per container: `state.verified`) and it was not found unusable in the last `retryMs`;
 * else the statement itself. A function is verified before its first call and again before the
 * first call after any failure (the 5-minute retry included), so no call reaches a function that
 * was not verified. The first claim of a statement verifies nothing (`state.sent`): the second
 * starts the verification and sends the statement itself meanwhile. A refused or failed function
 * is remembered (time), `warn` hears of it, and `run` runs with the statement (a failed call
 * changed nothing: an error ends it). `run` may wrap the text in a transaction of its own; it is
 * called again from the start.
 */
export async function runClaimStatement<T>(
  names: PgNames,
  state: ClaimFunctionState | undefined,
  statement: ClaimStatement,
  run: (text: string) => Promise<T>,
): Promise<T> {
  if (state?.verify === undefined) return run(statement.text);
  const missingSince = state.missing.get(statement);
  if (missingSince !== undefined && state.now() - missingSince < state.retryMs) return run(statement.text);
  const name = claimFunctionName(statement);
  if (!state.verified.has(statement)) {
    if (missingSince === undefined && !state.sent.has(statement)) {
      // The first claim of a statement is sent as it is, without verifying its function: a
      // container that starts on a backlog grows its claims past `outbox.batchSize` (which has no
      // function) at once, and a verification — two catalog reads on a connection of its own, both
      // planned cold — cost such a pass more than every call of the function saved (measured on 2
      // cores: the first claims of two new passes answered after 125–150 ms instead of 90–100, and
      // a 20,000-row drain took a seventh longer; docs/performance-history.md, "Three changes, measured"). A container that claims at
      // `outbox.batchSize` again verifies at its second claim and calls the function from its third.
      state.sent.add(statement);
      return run(statement.text);
    }
    // Not verified yet: this claim sends the statement itself while the function is verified on
    // another connection (two catalog reads, planned cold on a new connection), instead of after
    // the verification; the claims after it call the function. The claim returns only once the
    // verification has ended too, so nothing it started outlives it; a claim that comes while a
    // verification is under way waits for that one.
    let verifying = state.verifying.get(statement);
    if (verifying === undefined) {
      verifying = state.verify(statement).then(
        (verdict) => {
          if (verdict.status === 'usable') {
            state.verified.set(statement, verdict.oid);
            state.missing.delete(statement);
            return;
          }
          state.missing.set(statement, state.now());
          if (verdict.status === 'missing') state.warn?.({ function: name, code: '42883', error: `function ${names.schema}.${name} does not exist` });
          else state.warn?.({ function: name, code: verdict.status, error: verdict.detail, ...(verdict.owner !== undefined ? { owner: verdict.owner } : {}) });
        },
        // A verification that failed (a connection lost) finds nothing: the next claim verifies again.
        () => undefined,
      );
      const settled = verifying.finally(() => state.verifying.delete(statement));
      state.verifying.set(statement, settled);
      verifying = settled;
    }
    const [claimed] = await Promise.allSettled([run(statement.text), verifying]);
    if (claimed.status === 'rejected') throw claimed.reason;
    return claimed.value;
  }
  try {
    const result = await run(claimFunctionCall(names, statement));
    if (missingSince !== undefined) state.missing.delete(statement);
    return result;
  } catch (error) {
    if (!claimFunctionUnusable(error, name)) throw error;
    state.verified.delete(statement);
    state.missing.set(statement, state.now());
    state.warn?.({ function: name, code: String(errorCode(error)), error: redactError(error) });
    return run(statement.text);
  }
}
