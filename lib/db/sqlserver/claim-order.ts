/**
 * Pieces the three SQL Server claims share: the claim order (due retries first, then first
 * attempts, each in the claim's own order; same rule and reason as the PostgreSQL claims) and the
 * loose index scan that lists the distinct keys or aggregates with open rows.
 *
 * A claim picks its rows in two steps. The pick reads with `READCOMMITTEDLOCK` and no lock hint
 * that holds anything: under either READ_COMMITTED_SNAPSHOT setting it reads the latest committed
 * rows (a row version from the statement's start would let two rows of one key through), and
 * its shared locks are released row by row, so the rows it looks at and rejects (a hot key's
 * thousands of waiting rows) hold no lock and cannot escalate to a table lock. Only the picked
 * rows (at most the batch size) are then updated with `UPDLOCK, READPAST, ROWLOCK`, reached by
 * seeks on their ids (`FORCESEEK`: a scan would hold an update lock on every row it reads) in the
 * primary key (`INDEX(<table>_pkey)`: `FORCESEEK` alone also allows a range seek of the pending
 * index over every due row, each update-locked until the claim commits, a plan a small backlog
 * can make the cheapest and the plan cache then keeps for a large one).
 */
import { dbNowPlusMs } from './mssql-pool.ts';
import { quoteMssqlIdent } from './names.ts';

/**
 * How many batches' worth of the oldest due rows a claim reads before it looks at the heads of
 * every open key or aggregate: three, as on PostgreSQL (`OLDEST_WINDOW` in
 * `lib/db/postgres/claim-text.ts`, where the number was measured). The heads are read only when
 * the window gave less than half the batch.
 */
export const OLDEST_WINDOW = 3;

/**
 * Table hints of a read through the filtered index `index` (a bare name): `INDEX(…)` so that a
 * plan that cannot use the index fails to compile (error 8622) instead of scanning the table's
 * history, plus `FORCESEEK` for a probe by key (a scan of the index per probed row would read
 * every open row once per candidate), plus the lock hints. A filtered index is only chosen when
 * the query's predicate implies its filter, so every hinted read repeats the filter
 * (`[key] IS NOT NULL`, the state list as literals); see "Create filtered indexes" and "Table
 * hints" (learn.microsoft.com/sql/relational-databases/indexes/create-filtered-indexes,
 * learn.microsoft.com/sql/t-sql/queries/hints-transact-sql-table).
 */
export function viaIndex(index: string, seek: boolean, locks: string): string {
  return `WITH (INDEX(${quoteMssqlIdent(index)}),${seek ? ' FORCESEEK,' : ''} ${locks})`;
}

/**
 * The lock hints of the pick's probes for rows other transactions may hold: `NOLOCK` reads the
 * latest version of every row, committed or not, and never waits for a row lock. A probe that
 * must see "a lower row exists, even one not yet committed" (an application's insert, a relayed
 * forward) reads this way, so the key is skipped instead of waited on under the claim lock;
 * a probe for candidates reads `READCOMMITTEDLOCK, READPAST` (committed rows only, locked rows
 * skipped). Nothing read with `NOLOCK` is ever claimed: it only makes a claim take less. `READPAST`
 * alone would not do: it hides the locked lower row, and the key's next row would look like its
 * head. See `READPAST` and `READUNCOMMITTED` in "Table hints"
 * (learn.microsoft.com/sql/t-sql/queries/hints-transact-sql-table); a `NOLOCK` read that loses its
 * place to data movement fails with error 601, which the error map makes transient.
 */
export const DIRTY_PROBE = 'NOLOCK';

/**
 * `SELECT *` of one ordered, bounded branch: `TOP (@p_limit)` rows of `body` (a `FROM … WHERE …`
 * on alias `c`), tagged with `priority` (0: due retries, 1: first attempts). T-SQL allows
 * `ORDER BY` in a `UNION ALL` branch only inside a derived table with `TOP`.
 */
export function orderedBranch(alias: string, priority: 0 | 1, columns: readonly string[], body: string, order: readonly string[]): string {
  return `SELECT * FROM (
           SELECT TOP (@p_limit) ${priority} AS claim_priority, ${columns.map((c) => `c.${c}`).join(', ')}
${body}
            ORDER BY ${order.map((c) => `c.${c}`).join(', ')}) AS ${alias}`;
}

/** The priority of a row: 0 for a due retry (`attempt > 0`), 1 for a first attempt. */
export function priorityOf(alias: string): string {
  return `CASE WHEN ${alias}.attempt > 0 THEN 0 ELSE 1 END`;
}

/**
 * A recursive CTE `name(v)` listing each distinct value of `col` (not NULL; not empty either with
 * `nonEmpty`) among the rows of `table` matching `open` (conditions on alias `k`), one index seek
 * per value: the first value, then repeatedly the next value above the previous one (`ROW_NUMBER() … = 1` stands for the
 * `TOP (1)` a recursive member may not use). Its cost grows with the number of distinct values,
 * not with the rows per value. It skips rows locked by others (`READPAST`): a value whose open
 * rows are all being written right now is found by the next claim; the head probe that follows
 * decides what a locked row of a found key means. With `index` every read names the key-head index (`viaIndex`). The statement that reads
 * it needs `OPTION (MAXRECURSION 0)`.
 */
export function looseIndexScan(name: string, table: string, col: string, open: string, nonEmpty: boolean, index?: string): string {
  const present = nonEmpty ? `k.${col} IS NOT NULL AND k.${col} <> N''` : `k.${col} IS NOT NULL`;
  const locks = 'READCOMMITTEDLOCK, READPAST';
  return `${name} AS (
  SELECT MIN(k.${col}) AS v
    FROM ${table} AS k ${index === undefined ? `WITH (${locks})` : viaIndex(index, false, locks)}
   WHERE ${open} AND ${present}
  UNION ALL
  SELECT n.v
    FROM (SELECT k.${col} AS v, ROW_NUMBER() OVER (ORDER BY k.${col}) AS rn
            FROM ${table} AS k ${index === undefined ? `WITH (${locks})` : viaIndex(index, true, locks)}
           INNER JOIN ${name} AS p ON k.${col} > p.v
           WHERE ${open} AND ${present}) AS n
   WHERE n.rn = 1
)`;
}

/**
 * The SET list of every claim: fresh token per row, lease on the database clock (BIGINT
 * milliseconds) from the start of the claim batch (`@v_claim_start`, set by
 * `inClaimTransaction` before any wait), as PostgreSQL's leases start at `transaction_timestamp()`:
 * the lease was capped to the invocation's time left when the statement was sent, so a wait for
 * the claim lock or a row lock must not move its end later.
 */
export const CLAIM_SET = `SET state = N'processing',
       claim_token = NEWID(),
       claimed_at = SYSUTCDATETIME(),
       lease_expires_at = ${dbNowPlusMs('@p_lease_ms', '@v_claim_start')},
       updated_at = SYSUTCDATETIME()`;

/** The picked ids with their priority: filled by the pick, joined by the UPDATE. */
export const DECLARE_PICKED = 'DECLARE @v_picked TABLE (id UNIQUEIDENTIFIER NOT NULL PRIMARY KEY, claim_priority INT NOT NULL);';

/** Runs a claim again when a unique index of in-flight rows refused it (both dialects). */
export { claimRetryingInFlight } from '../in-flight-retry.ts';
