/**
 * The fenced batch writes that the outbox and the inbox tables share (same claim columns, same
 * fence). Each settles a whole batch in one statement via `unnest` of parallel arrays and returns
 * the ids it changed; a claim missing from the result was lost (seed: the claim fence).
 *
 * `table` is a quoted, qualified name from `PgNames`; it is aliased `t` in every statement.
 */
import type { ClaimRef, DeadItem, ReclaimResult, RetryItem } from '../driver.ts';
import { msInterval, type PgContext } from './context.ts';
import { reclaimGate } from './maintenance-queries.ts';
import { leaseWithinBudget } from '../statement-budget.ts';
import type pg from 'pg';
import { FencedLockTimeoutError, TransientDatabaseError } from '../../errors.ts';
import { isPgPool, pgQuery, pgSingleTrip, type PgQueryable, type PgValues } from './pg-pool.ts';
import { isDeadlockVictim, jitteredPause, retryingDeadlockVictim } from '../deadlock-victim.ts';
import { claimArrayParams } from './uuid-array.ts';
import { sqlState } from '../caller-transaction.ts';

/**
 * Where a lease granted or renewed by a statement starts: the start of the statement's
 * transaction, on the database clock (see `claimSet`). For a statement on its own that is its
 * arrival; `statement_timestamp()` would not do: a statement whose parse waits on a lock is
 * stamped when that wait ends.
 */
export const LEASE_START = 'transaction_timestamp()';

/**
 * The claim (seed: the claim): `processing`, a new random token per row, the lease from the
 * database clock, the claim time. `leaseParam` is the bind parameter holding the lease in ms.
 *
 * The lease runs from the start of the statement's transaction (`LEASE_START`, database clock),
 * not from the moment the row was updated: the caller sized it to the time left in its
 * invocation when it sent the statement, so a claim that waited on a lock does not get a lease
 * that outlives the invocation. (Only ever shorter than asked; the renewal restores it.)
 */
export function claimSet(leaseParam: string): string {
  return `state = 'processing',
            claim_token = pg_catalog.gen_random_uuid(),
            claimed_at = pg_catalog.clock_timestamp(),
            lease_expires_at = ${LEASE_START} + ${msInterval(leaseParam)},
            updated_at = pg_catalog.clock_timestamp()`;
}

/**
 * Bounds the lock wait of a fenced write by the time left on the row's lease, for the row about
 * to be written: a condition, always true, that sets `lock_timeout` (transaction-local) to the
 * milliseconds until `lease_expires_at` of the row (alias `alias`), at least 1. The scan
 * evaluates it before the row is locked, and PostgreSQL reads `lock_timeout` when a lock wait
 * begins: a write queued behind another transaction's lock on the row fails with
 * `lock_not_available` (55P03) when the lease ends, instead of landing after it (PostgreSQL does
 * not re-check the `WHERE` after a wait on a holder that changed nothing). Inside a caller's
 * transaction the statement keeps the transaction's own setting and puts it back
 * (`fencedWriteCount`).
 * The milliseconds come from `date_part` (double precision): `extract` computes in `numeric`,
 * which took twice as long per row (0.27 against 0.15 ms per 1,000 rows, without the `set_config`).
 */
export function lockWithinLease(alias = 't'): string {
  const lease = alias === '' ? 'lease_expires_at' : `${alias}.lease_expires_at`;
  return `set_config('lock_timeout', greatest(1, ceil(1000 * date_part('epoch', ${lease} - pg_catalog.clock_timestamp())))::bigint::text, true) IS NOT NULL`;
}

/**
 * The fence every finishing write matches, besides the row id: still ours, lease not expired;
 * with the lock wait bounded by the lease (`lockWithinLease`). The bound names the claim (`s`) as
 * well as the row, so it is a join condition, evaluated for each row matched to its claim as the
 * join hands it on to be locked: a condition on the row alone is evaluated in the scan of `t`,
 * which a hash join runs to the end (every live lease of the table, other workers' too) before it
 * locks any row, leaving the lock wait bounded by the lease of the last row read.
 */
export const FENCE = `t.state = 'processing' AND t.claim_token = s.token AND t.lease_expires_at > pg_catalog.clock_timestamp() AND CASE WHEN t.claim_token = s.token THEN ${lockWithinLease('t')} END`;

/**
 * Runs a fenced statement: on a pool in one round trip (`pgSingleTrip`), which commits before the
 * server answers, so a process frozen after sending it leaves no transaction open; on a client
 * inside an open transaction (the caller's), handed to the client at once, so it is written
 * before any statement the caller sends after calling — such a statement must put the
 * transaction's `lock_timeout` back itself (`fencedWriteCount`). A lock wait that reached the
 * lease's end (`lock_not_available`) becomes `FencedLockTimeoutError`.
 */
export async function fencedQuery<R extends pg.QueryResultRow>(db: PgQueryable, text: string, values: PgValues, resentText = text): Promise<pg.QueryResult<R>> {
  try {
    return isPgPool(db) ? await singleTripPastDeadlocks<R>(db, text, values, resentText) : await pgQuery<R>(db, text, values);
  } catch (error) {
    // Through a caller's library the driver's error may come wrapped (Sequelize, Drizzle on
    // postgres.js, Prisma): its SQLSTATE is read inside the wrapper.
    if ((error instanceof TransientDatabaseError && error.code === '55P03') || sqlState(error) === '55P03') {
      throw new FencedLockTimeoutError('fenced write: a row stayed locked by another transaction until its lease ended; nothing was written', { cause: error });
    }
    throw error;
  }
}

/**
 * A fenced statement on its own, sent again when PostgreSQL chose it as the victim of a deadlock
 * (40P01), up to `DEADLOCK_ATTEMPTS` runs: the statement was rolled back whole, nothing of it
 * was written, and the same statement with the same tokens is fenced again on the rows as they
 * are then (a claim that was lost in the meantime still changes nothing). A multi-row write can
 * meet such a cycle with a claim that keeps the lock of a row it re-checked and passed over while
 * it waits on the in-flight index for a row this write is finishing: failing the write would
 * leave its rows to their lease, to be reclaimed, charged an attempt and delivered again.
 *
 * Sent again, on another connection of the pool, when its connection was lost (terminated by
 * the server, a failover, a proxy restart, a network reset): the write may or may not have
 * committed, and the fence decides again. Failing it would leave rows the destination accepted
 * to the reclaim, charged an attempt and delivered again (or dead when it was their last). A
 * write that did commit changes nothing the second time: `resentText` is what is sent then (the
 * sent mark's also matches the rows sent under the same token, `outboxMarkSentUpdate`; the relay
 * forward's says it was sent again, and the forward then looks up what its first run did,
 * `inboxForwardMany`).
 */
async function singleTripPastDeadlocks<R extends pg.QueryResultRow>(pool: pg.Pool, text: string, values: PgValues, resentText: string): Promise<pg.QueryResult<R>> {
  let attempt = 0;
  return retryingDeadlockVictim(() => pgSingleTrip<R>(pool, attempt++ === 0 ? text : resentText, values), {
    retryable: (error) => isDeadlockVictim(error) || isConnectionLost(error),
    pauseMs: (n) => jitteredPause(n),
  });
}

/** SQLSTATEs and socket errors of a connection that ended under a statement (its outcome unknown). */
const CONNECTION_LOST = new Set(['57P01', '57P02', '08000', '08003', '08006', 'ECONNRESET', 'EPIPE']);

/** Whether a statement failed because its connection ended (it may have committed; see `singleTripPastDeadlocks`). */
export function isConnectionLost(error: unknown): boolean {
  if (!(error instanceof TransientDatabaseError)) return false;
  if (error.code !== undefined) return CONNECTION_LOST.has(error.code);
  return /Connection terminated|connection error/i.test(error.message);
}

/**
 * What `lockWithinLeaseKeeping` keeps in `queuebox.lock_timeout`: this statement's mark (its
 * `statement_timestamp()`), `|`, then the transaction's `lock_timeout`. The mark tells the value
 * this statement kept from one left there by anything else (the same name used by the
 * application, an older QueueBox), which is neither trusted nor restored.
 */
const KEPT = `COALESCE(current_setting('queuebox.lock_timeout', true), '')`;
const MARK = `pg_catalog.statement_timestamp()::text`;

/**
 * `lockWithinLease` for a statement inside a caller's open transaction: before it sets the bound,
 * it keeps the transaction's own `lock_timeout` in `queuebox.lock_timeout` under this statement's
 * mark — once per statement: a row the scan evaluates again after a lock wait finds it kept — for
 * `fencedWriteCount` to put back. `CASE` fixes the order: the planner may reorder the terms of an
 * `AND` or `OR`.
 */
export function lockWithinLeaseKeeping(alias = 't'): string {
  return `CASE WHEN CASE WHEN split_part(${KEPT}, '|', 1) = ${MARK} THEN true
                         ELSE set_config('queuebox.lock_timeout', ${MARK} || '|' || current_setting('lock_timeout'), true) IS NOT NULL END
              THEN ${lockWithinLease(alias)} END`;
}

/**
 * Runs a fenced write of one or more rows, given as `write(bound)`: the statement, ending in
 * `RETURNING`, with `bound` (the lease bound of its lock wait) among its conditions. Returns how
 * many rows it wrote. On a pool it is `write(lockWithinLease)` in one round trip. On a client
 * inside the caller's open transaction it is one statement too — the write, then the
 * transaction's own `lock_timeout` put back once the write has finished (the restore reads the
 * count of the rows written, so it runs after them), when this statement kept it (a row was
 * matched to the fence) — so the lease bound does not stay on the
 * caller's later statements, and no second statement is queued on the caller's client (`pg` 8
 * warns of a query queued behind another, and `pg` 9 refuses it).
 */
export async function fencedWriteCount(db: PgQueryable, write: (bound: string) => string, values: PgValues): Promise<number> {
  if (isPgPool(db)) return (await fencedQuery(db, write(lockWithinLease('')), values)).rowCount ?? 0;
  const { rows } = await fencedQuery<{ n: number }>(
    db,
    `WITH written AS (${write(lockWithinLeaseKeeping(''))})
  SELECT c.n,
         CASE WHEN split_part(${KEPT}, '|', 1) <> ${MARK} THEN NULL
              WHEN set_config('lock_timeout', split_part(${KEPT}, '|', 2), true) IS NOT NULL
              THEN set_config('queuebox.lock_timeout', '', true) END AS restored
    FROM (SELECT count(*)::int AS n FROM written) c`,
    values,
  );
  return Number(rows[0]?.n ?? 0);
}

/**
 * Runs `update`, a fenced write of the rows whose ids are bind parameter `$1` (`uuid[]`), ending
 * `RETURNING t.id`, and returns the ids of `ids` (the values of `$1`, as the caller gave them) it
 * changed. The server answers with the positions of the ids it did *not* change — none, unless a
 * claim was lost — instead of every id it changed: decoding the 1,000 ids of a batch it changed
 * was a third of the client's time in the sent mark (`npm run bench:profile`). An id the server
 * reads as NULL is not changed (`NOT EXISTS`, not `NOT IN`). An id given twice is answered once.
 */
export async function fencedChangedIds(db: PgQueryable, update: string, values: PgValues, ids: readonly string[], resentUpdate = update): Promise<string[]> {
  const text = changedIdsStatement(update);
  const { rows } = await fencedQuery<{ n: number }>(db, text, values, resentUpdate === update ? text : changedIdsStatement(resentUpdate));
  return idsChanged(ids, rows);
}

/** `changedIdsStatement`'s texts by update text: a handful per process (one per table and write), built once each. */
const changedIdsTexts = new Map<string, string>();

/** The statement `fencedChangedIds` sends: `update`, answered with the 1-based positions `n` of the ids of `$1` it did not change. */
export function changedIdsStatement(update: string): string {
  let text = changedIdsTexts.get(update);
  if (text === undefined) {
    text = `WITH changed AS (${update})
  SELECT a.n::int AS n FROM unnest($1::uuid[]) WITH ORDINALITY AS a(id, n)
   WHERE NOT EXISTS (SELECT 1 FROM changed c WHERE c.id = a.id)`;
    changedIdsTexts.set(update, text);
  }
  return text;
}

/**
 * The ids of `ids` a fenced write changed, from the server's answer: the 1-based positions `n`
 * of those it did not change. One entry per row changed, as `RETURNING` gave: an id the caller
 * repeated (with its token or another) is written once, and answered once.
 */
export function idsChanged(ids: readonly string[], notChanged: ReadonlyArray<{ n: number }>): string[] {
  const unchanged = new Set(notChanged.map((r) => r.n - 1));
  const changed: string[] = [];
  const seen = new Set<string>();
  for (let i = 0; i < ids.length; i++) {
    const id = ids[i]!;
    if (unchanged.has(i) || seen.has(id)) continue;
    seen.add(id);
    changed.push(id);
  }
  return changed;
}

/** Renews the leases to `LEASE_START + leaseMs` (see `claimSet`). */
export async function fencedRenewMany(db: PgQueryable, table: string, claims: ClaimRef[], leaseMs: number): Promise<string[]> {
  if (claims.length === 0) return [];
  return fencedChangedIds(
    db,
    `UPDATE ${table} t
        SET lease_expires_at = ${LEASE_START} + ${msInterval('$3')}
       FROM unnest($1::uuid[], $2::uuid[]) AS s(id, token)
      WHERE t.id = s.id AND ${FENCE}
  RETURNING t.id`,
    () => [...claimArrayParams(db, claims.map((c) => c.id), claims.map((c) => c.token)), leaseWithinBudget(leaseMs)],
    claims.map((c) => c.id),
  );
}

/**
 * Sent again after its connection was lost (`fencedQuery`), a write that sends a claimed row back to
 * `pending` (a retry, a release) also matches a row already `pending` under its token — the first
 * run committed, or commits while this one waits for its lock — so a write that landed counts as
 * done, not as a lost claim. Such a row is left as the first run wrote it: `keep(column, value)`
 * is `value` for a row still `processing`, the column as it is for one the first run wrote.
 * The token stays on the pending row for that (a claim sets a new one, a replay clears it).
 */
function backToPending(table: string, sets: (keep: (column: string, value: string) => string) => string, from: string): (resent: boolean) => string {
  return (resent) => {
    const keep = resent ? (column: string, value: string) => `${column} = CASE WHEN t.state = 'processing' THEN ${value} ELSE t.${column} END` : (column: string, value: string) => `${column} = ${value}`;
    return `UPDATE ${table} t
        SET state = 'pending', ${sets(keep)},
            lease_expires_at = NULL, claimed_at = NULL,
            updated_at = ${resent ? "CASE WHEN t.state = 'processing' THEN pg_catalog.clock_timestamp() ELSE t.updated_at END" : 'pg_catalog.clock_timestamp()'}
       FROM ${from}
      WHERE t.id = s.id AND ${resent ? `((${FENCE}) OR (t.state = 'pending' AND t.claim_token = s.token AND t.lease_expires_at IS NULL))` : FENCE}
  RETURNING t.id`;
  };
}

/** Back to `pending` with `attempt + 1`, due `delayMs` after the database clock, lease cleared (see `backToPending`). */
export async function fencedRetryMany(db: PgQueryable, table: string, items: RetryItem[]): Promise<string[]> {
  if (items.length === 0) return [];
  const ids = items.map((i) => i.id);
  const retry = backToPending(
    table,
    (keep) => `${keep('attempt', 't.attempt + 1')}, ${keep('scheduled_at', `pg_catalog.clock_timestamp() + ${msInterval('s.delay_ms')}`)}, ${keep('last_error', 's.error')}`,
    'unnest($1::uuid[], $2::uuid[], $3::double precision[], $4::text[]) AS s(id, token, delay_ms, error)',
  );
  return fencedChangedIds(db, retry(false), [...claimArrayParams(db, ids, items.map((i) => i.token)), items.map((i) => i.delayMs), items.map((i) => i.error)], ids, retry(true));
}

/** Back to `pending`, attempt unchanged, lease cleared: a claimed row no attempt was made for (see `backToPending`). */
export async function fencedReleaseMany(db: PgQueryable, table: string, claims: ClaimRef[]): Promise<string[]> {
  if (claims.length === 0) return [];
  const ids = claims.map((c) => c.id);
  const release = backToPending(table, (keep) => keep('attempt', 't.attempt'), 'unnest($1::uuid[], $2::uuid[]) AS s(id, token)');
  return fencedChangedIds(db, release(false), claimArrayParams(db, ids, claims.map((c) => c.token)), ids, release(true));
}

/**
 * To `dead` with its reason. The dead mark keeps `claim_token` (a replay clears it, a later claim
 * sets another): sent again after its connection was lost (`fencedQuery`), the mark also matches
 * a row already `dead` under its token — the first run committed, or commits while this one waits
 * for its lock — so a mark that landed counts as done, not as a lost claim.
 */
export async function fencedDeadMany(db: PgQueryable, table: string, items: DeadItem[]): Promise<string[]> {
  if (items.length === 0) return [];
  const ids = items.map((i) => i.id);
  const mark = (resent: boolean) => `UPDATE ${table} t
        SET state = 'dead', last_error = s.error, lease_expires_at = NULL, updated_at = pg_catalog.clock_timestamp()
       FROM unnest($1::uuid[], $2::uuid[], $3::text[]) AS s(id, token, error)
      WHERE t.id = s.id AND ${resent ? `((${FENCE}) OR (t.state = 'dead' AND t.claim_token = s.token))` : FENCE}
  RETURNING t.id`;
  return fencedChangedIds(db, mark(false), [...claimArrayParams(db, ids, items.map((i) => i.token)), items.map((i) => i.error)], ids, mark(true));
}

/**
 * What a reclaim counts: a lease that ended before its claim was settled is an attempt spent (a
 * call that never answered must not hold its row, and its key, forever). `maxAttempts` is an SQL
 * expression for alias `t` (the outbox column, or a bound parameter for the relay); `call` names
 * what outlived its lease in `last_error` ("delivery", "forward"). `charged` (default: every row)
 * picks the rows the lost lease is charged to, by a condition on alias `t`; the others go back to
 * `pending` with their attempt unchanged and `note` as `last_error`.
 */
export interface LostLeaseRule {
  maxAttempts: string;
  call: string;
  charged?: { rows: string; note: string };
}

/**
 * How a reclaim keeps claims of several rows whole: `columns` of `t` that name a row's claim (the
 * rows sharing their values are one claim), which the locked set `expired` carries besides `id`;
 * `ctes` (more CTEs, reading `expired`), and `condition` on the row `t` about to be reclaimed.
 * Decided once, as sets (hash or merge joins), never row by row against the locked set: a chunk
 * of the reclaim stays linear in its rows. A chunk takes the rest of every claim it picked a row
 * of (`reclaimExpired`): a chunk's boundary never splits a claim.
 */
export interface WholeClaim {
  columns: string;
  ctes: string;
  condition: string;
  /** The condition that row `t` is of the claim named by alias `c` (whose columns are `columns` with `c.` for `t.`): its rows' probe. */
  claimOf: (c: string) => string;
}

/**
 * The rows one statement of a reclaim picks at most (`reclaimExpired`), besides the rest of the
 * claims they belong to (at most `outbox.rowsPerKey - 1`, 99, more for the claim its limit cut).
 * Measured on 2 shared cores (PostgreSQL 15, default settings), a chunk takes 0.15-0.2 s of keyless
 * rows and 0.2-0.25 s of keyed claims of 10 rows, flat from the first chunk of a million expired
 * rows to the last: well inside any pass's deadline (seconds), and its sets (the rows it locked,
 * their claims, the rows it moved) fit in the default 4 MB `work_mem`, so it writes no temporary
 * file (a reclaim of a million rows passes under `temp_file_limit = 1MB`). Larger chunks gain
 * little (a chunk's own cost is a few ms against its 10,000 rows' updates) and hold more row
 * locks and WAL in one transaction; smaller ones pay that cost more often.
 */
export const RECLAIM_CHUNK_ROWS = 10_000;

/**
 * The rows a reclaim chunk picks at most: `RECLAIM_CHUNK_ROWS`. Internal, not configuration: tests
 * lower it to cross chunk boundaries with a handful of rows.
 */
export const reclaimChunking = { rows: RECLAIM_CHUNK_ROWS };

/** One chunk's answer (`reclaimExpired`). */
interface ReclaimChunk {
  ran: boolean;
  picked: number;
  reclaimed: string;
  dead: string;
  passed_over: string[] | null;
  instant: string;
  reached: string | null;
}

/**
 * Returns expired `processing` rows to `pending` when the shared gate `gateName` opens: always
 * without `throttleMs`, else at most once per `throttleMs`. The lost lease counts as a failed
 * attempt of each row that `rule.charged` picks: `attempt + 1`, or `dead` when the lost attempt
 * was its last (`attempt + 1 >= maxAttempts`; attempt unchanged, as a failed last delivery leaves
 * it), which releases its key; either way `last_error` says the lease expired during that attempt.
 * A row not charged goes back to `pending` with its attempt unchanged and the rule's note.
 *
 * In chunks, each one statement that commits on its own: up to `RECLAIM_CHUNK_ROWS` expired rows
 * (`reclaimChunking.rows`), oldest lease first, with the rest of the claims they belong to
 * (`wholeClaim`), until a chunk picks fewer (none left), or a chunk fails. One statement for every
 * expired row held locks on all of them in one transaction, and when it outlasted the pass's
 * deadline (a backlog of a million expired rows after an outage: 16 s keyless, 26 s keyed, on 2
 * shared cores) it was cancelled there, rolled back whole, by every pass, and no reclaim ever
 * returned a row; it also spilled its sets to temporary files (`temp_file_limit`). Each chunk
 * starts where the one before stopped (`lease_expires_at` at least the latest it picked): the rows
 * before that are reclaimed, skipped or held, and the index's entries of rows already reclaimed are
 * not walked again. The gate opens with the first chunk, which answers `ran: false` when it stays
 * shut; the chunks after it belong to the same reclaim and do not ask it again.
 *
 * A failure of the first chunk is thrown as it came: nothing was written (the gate's turn rolled
 * back with it). A chunk after it that fails — cancelled at the deadline, not sent for want of
 * time, or anything else, a deadlock victim after `DEADLOCK_ATTEMPTS` runs — rolled back alone:
 * the reclaim returns what the chunks before it committed, with the error as `cutBy` (the counts
 * of rows that went `dead` must reach the alarms whatever comes after them). A chunk that is a
 * deadlock victim runs again first, as the caller would run a reclaim again
 * (`reclaimWithinDeadline`): the caller cannot, without losing the counts of the chunks before.
 *
 * Every row's lease is compared with one instant, the start of the first chunk's statement
 * (`statement_timestamp()`), not with the clock as each row is read, nor with each chunk's own
 * start: a lease ending while the reclaim runs is then over for all of its claim's rows or for
 * none (the rows of a claim share their lease), where the clock split a claim — rows read before
 * the end stayed `processing`, rows read after went back, charged or not by `rule.charged` as
 * though the claim had two holders (`reclaim-instant.test.ts`). Only ever fewer rows than the
 * clock would take; a lease that ends meanwhile is the next reclaim's, and the holder's fenced
 * writes already fail on it. The reclaim's work is the expired rows at that instant: it ends.
 * `extraCondition` narrows the rows (e.g. push rows only), written against alias `t`;
 * `values` are the rule's bind parameters, numbered from `$3`.
 *
 * Rows another transaction holds locked are skipped (`SKIP LOCKED`): the reclaim waits for no
 * lock, and a later one takes them. `wholeClaim` keeps a row only when the rest of its claim was
 * locked too, so a claim of several rows is never taken in parts (its charge is decided once,
 * with all of its rows); a chunk takes the rest of each claim it picked a row of, so a claim cut
 * by the chunk's limit, even one of more rows than a chunk, comes back whole in that chunk. Rows a
 * chunk locked and left (their claim held elsewhere in part) are not picked again by this reclaim.
 */
export async function reclaimExpired(
  ctx: PgContext,
  table: string,
  gateName: string,
  throttleMs: number | undefined,
  rule: LostLeaseRule,
  extraCondition = 'TRUE',
  values: unknown[] = [],
  wholeClaim?: WholeClaim,
): Promise<ReclaimResult> {
  const gate = reclaimGate(ctx, gateName, throttleMs, 1);
  const limit = reclaimChunking.rows;
  const chunk = async (first: boolean, instant: string | null, from: string | null, passedOver: readonly string[]): Promise<ReclaimChunk> => {
    const params = [...gate.values, ...values, ...(rule.charged === undefined ? [] : [rule.charged.note]), instant, from, limit, passedOver];
    const { rows } = await pgQuery<ReclaimChunk>(ctx.pool, reclaimChunkText(table, first ? gate.cte : undefined, rule, extraCondition, gate.values.length + values.length, wholeClaim), params);
    return rows[0]!;
  };
  const one = await chunk(true, null, null, []);
  if (!one.ran) return { ran: false, reclaimed: 0, dead: 0 };
  let reclaimed = Number(one.reclaimed);
  let dead = Number(one.dead);
  const passedOver = [...(one.passed_over ?? [])];
  for (let last = one; last.picked >= limit; ) {
    try {
      const from = last.reached;
      last = await retryingDeadlockVictim(() => chunk(false, one.instant, from, passedOver), { pauseMs: jitteredPause });
    } catch (error) {
      return { ran: true, reclaimed, dead, cutBy: error };
    }
    reclaimed += Number(last.reclaimed);
    dead += Number(last.dead);
    passedOver.push(...(last.passed_over ?? []));
  }
  return { ran: true, reclaimed, dead };
}

/** µs since the epoch of a `timestamptz` expression, as a bigint: exact, unlike a JavaScript `Date`. */
const micros = (at: string) => `(extract(epoch FROM ${at}) * 1000000)::bigint`;

/** The `timestamptz` of bind parameter `param`, µs since the epoch (`micros`), or NULL. */
const at = (param: string) => `timestamptz 'epoch' + ${param}::bigint * interval '1 microsecond'`;

/**
 * The statement of a reclaim chunk (`reclaimExpired`): with the gate's CTE `gateCte` (the first
 * chunk), or a gate already open (the later ones). After the gate's values and the caller's
 * (`valuesBefore` in all), its bind parameters are the rule's note (when it charges some rows
 * only), the instant of the first chunk (µs since the epoch, or NULL in the first chunk: its own
 * start), the lease the chunk before reached (µs, or NULL), the chunk's limit, and the ids earlier
 * chunks locked and left (`uuid[]`). It answers whether the gate opened, how many rows it picked,
 * the rows it returned and made dead, the ids it locked and left, its instant and the latest lease
 * it picked.
 */
function reclaimChunkText(table: string, gateCte: string | undefined, rule: LostLeaseRule, extraCondition: string, valuesBefore: number, wholeClaim: WholeClaim | undefined): string {
  let n = valuesBefore;
  const note = rule.charged === undefined ? 't.last_error' : `$${++n}::text`;
  const instant = `$${++n}`;
  const from = `$${++n}`;
  const limit = `$${++n}`;
  const passedOver = `$${++n}`;
  const charged = `(${rule.charged?.rows ?? 'TRUE'})`;
  const last = `t.attempt + 1 >= ${rule.maxAttempts}`;
  const ofMax = `(t.attempt + 1) || ' of ' || ${rule.maxAttempts}`;
  // The first chunk compares with its own start; the later ones with the first's as well (the
  // earlier of the two), so a lease that ends while the reclaim runs is the next reclaim's. The
  // text names `statement_timestamp()` in every chunk (tests recognise a reclaim statement by it).
  // The UPDATE finds its rows by id (`= ANY` of the chunk's ids, one index scan of the primary
  // key), and by nothing else: joined to `expired`, it was planned as a hash join over a sequential
  // scan of the whole table, every chunk, spilling its hash to disk; joined to it beside the ids,
  // as a nested loop whose every probe sorted the chunk's 10,000 ids again (22 s a chunk on
  // statistics that did not know the expired rows). The rows are locked (`picked`, `rest`): none
  // changes meanwhile.
  const expired = `t.state = 'processing' AND t.lease_expires_at <= pg_catalog.statement_timestamp()
          AND t.lease_expires_at <= COALESCE(${at(instant)}, 'infinity') AND (${extraCondition})`;
  const columns = wholeClaim === undefined ? '' : `, ${wholeClaim.columns}`;
  return `WITH ${gateCte ?? `gate AS (SELECT $1::text AS name, $2::double precision AS throttle_ms)`},
     picked AS (
       SELECT t.id, t.lease_expires_at AS lease${columns} FROM ${table} t
        WHERE ${expired}
          AND t.lease_expires_at >= COALESCE(${at(from)}, '-infinity')
          AND t.id <> ALL (${passedOver}::uuid[])
          AND EXISTS (SELECT 1 FROM gate)
        ORDER BY t.lease_expires_at
        LIMIT ${limit}
          FOR UPDATE OF t SKIP LOCKED),${
            wholeClaim === undefined
              ? `
     expired AS (SELECT * FROM picked),`
              : `
     -- the other rows of the claims it picked: from each claim (one index probe), not from a
     -- join the planner sizes from statistics that may not know the expired rows (a nested loop
     -- of the table's rows over the picked ones: 10,000 rows a chunk took seconds); a row picked
     -- already is told by a hashed lookup (NOT IN of a subquery), whatever the estimates
     rest AS (
       SELECT r.* FROM (SELECT DISTINCT ${wholeClaim.columns.replaceAll('t.', 'c.')} FROM picked c) c
       CROSS JOIN LATERAL (
         SELECT t.id, t.lease_expires_at AS lease${columns} FROM ${table} t
          WHERE ${wholeClaim.claimOf('c')}
            AND ${expired}
            AND t.id NOT IN (SELECT p.id FROM picked p)
            FOR UPDATE OF t SKIP LOCKED) r),
     expired AS (SELECT * FROM picked UNION ALL SELECT * FROM rest),
     ${wholeClaim.ctes},`
          }
     moved AS (
       UPDATE ${table} t
          SET state = CASE WHEN ${charged} AND ${last} THEN 'dead' ELSE 'pending' END,
              attempt = CASE WHEN ${charged} AND NOT ${last} THEN t.attempt + 1 ELSE t.attempt END,
              last_error = CASE WHEN NOT ${charged} THEN ${note}
                WHEN ${last} THEN 'gave up after ' || ${ofMax} || ' attempts: the lease of the last one expired during the ${rule.call} (the call did not finish within its lease)'
                ELSE 'lease expired during ${rule.call} attempt ' || ${ofMax} || ' (the call did not finish within its lease)' END,
              claim_token = NULL, lease_expires_at = NULL, claimed_at = NULL,
              updated_at = pg_catalog.clock_timestamp()
        WHERE t.id = ANY (ARRAY(SELECT expired.id FROM expired${wholeClaim === undefined ? '' : ` WHERE ${wholeClaim.condition}`}))
    RETURNING t.id, t.state)
     SELECT EXISTS (SELECT 1 FROM gate) AS ran,
            (SELECT count(*)::int FROM picked) AS picked,
            (SELECT count(*) FROM moved WHERE state = 'pending') AS reclaimed,
            (SELECT count(*) FROM moved WHERE state = 'dead') AS dead,
            -- a hashed lookup (NOT IN of a subquery): an anti join of the two, planned from
            -- estimates of one row each, compared every pair (10,000 rows: 50 million comparisons)
            (SELECT array_agg(e.id::text) FROM expired e WHERE e.id NOT IN (SELECT m.id FROM moved m)) AS passed_over,
            COALESCE(${instant}::bigint, ${micros('pg_catalog.statement_timestamp()')})::text AS instant,
            (SELECT ${micros('max(p.lease)')} FROM picked p)::text AS reached`;
}
