/**
 * SQL Server pull operations (driver methods `pull*`, spec §6 and §8).
 *
 * The claim runs in its own transaction under an exclusive application lock on the source,
 * owned by that transaction (`claim-locks.ts`; 10 s wait; a lock not granted is a
 * `TransientDatabaseError` to back off from); its pick reads the latest committed rows under
 * either RCSI setting and only the picked rows are locked (`claim-order.ts`). The lock serializes
 * claims of one source; it also caps one source at roughly 110–140 claims per second.
 *
 * Every other write is fenced on id + `processing` + token + `lease_expires_at > SYSUTCDATETIME()`
 * (and `consumption = 'pull'`) and reports true only when exactly one row changed.
 */
import type sql from 'mssql';
import { mssql } from './mssql-module.ts';
import type { ClaimRef, DeadItem, InboxRow, RetryItem } from '../driver.ts';
import { inClaimTransaction, pullLockExpression } from './claim-locks.ts';
import { CLAIM_SET, DECLARE_PICKED, looseIndexScan, orderedBranch, priorityOf, viaIndex } from './claim-order.ts';
import { buildFencedBatch, runFencedBatch, type FencedKind } from './fenced-batch.ts';
import { DECLARE_INBOX_CLAIMED, INBOX_COLUMNS, type InboxDbRow, toInboxRow } from './inbox-rows.ts';
import { dbNowPlusMs, leaseParam, msValue, param, runStatement, type MssqlRunner, type MssqlStatement } from './mssql-pool.ts';
import type { MssqlNames } from './names.ts';

const PULL_ONLY = ` AND r.consumption = N'pull'`;

/** The least time a pull claim's lease has left when the claim writes it, in milliseconds (or the whole lease when shorter). */
export const PULL_LEASE_FLOOR_MS = 1000;

/**
 * The claim's SET with a floor under the lease: a claim's lease runs from the start of its batch
 * (`@v_claim_start`, as the other claims), and the wait for the source's claim lock (up to 10 s)
 * came out of it — a short pull lease came back already expired. The lease is the later of
 * `@v_claim_start + lease` and `SYSUTCDATETIME() + @p_lease_floor_ms` at the UPDATE, on the
 * database clock, to the millisecond (DATETIME2(7)).
 */
const CLAIM_LEASE = `lease_expires_at = ${dbNowPlusMs('@p_lease_ms', '@v_claim_start')}`;
const FLOORED_LEASE = `lease_expires_at = CASE WHEN ${dbNowPlusMs('@p_lease_ms', '@v_claim_start')} > ${dbNowPlusMs('@p_lease_floor_ms')}
                             THEN ${dbNowPlusMs('@p_lease_ms', '@v_claim_start')} ELSE ${dbNowPlusMs('@p_lease_floor_ms')} END`;
if (!CLAIM_SET.includes(CLAIM_LEASE)) throw new Error('pull claim: the shared claim SET no longer computes the lease as expected');
const PULL_CLAIM_SET = CLAIM_SET.replace(CLAIM_LEASE, FLOORED_LEASE);

/** Rows of exactly the source `@p_source` (alias `a`): `=` ignores trailing spaces, the byte length does not. */
function ofSource(a: string): string {
  return `${a}.source = @p_source AND ${a}.source_bytes = DATALENGTH(@p_source) AND ${a}.consumption = N'pull'`;
}

/**
 * `a` (alias of a pull row) has no aggregate: NULL or the empty string, as on PostgreSQL and for
 * push rows (`noAggregate` in `inbox-claim.ts`). `=` ignores trailing spaces, so an aggregate id
 * of spaces only counts as empty too.
 */
function noAggregate(a: string): string {
  return `(${a}.aggregate_id IS NULL OR ${a}.aggregate_id = N'')`;
}

/** A row a pull claim may take (alias `a`): due `pending`, or `processing` with an expired lease. */
function claimable(a: string): string {
  return `((${a}.state = N'pending' AND ${a}.scheduled_at <= SYSUTCDATETIME()) OR (${a}.state = N'processing' AND ${a}.lease_expires_at <= SYSUTCDATETIME()))`;
}

/**
 * What the claim of an expired row counts (the SET reads the row before the claim): its lost
 * lease is a failed attempt, `attempt + 1`, and `last_error` says so. The worker dead-letters a
 * row whose `attempt` reached its `maxAttempts` before running a handler.
 */
const LOST_LEASE_SET = `attempt = CASE WHEN i.state = N'processing' THEN i.attempt + 1 ELSE i.attempt END,
       last_error = CASE WHEN i.state = N'processing' THEN CONCAT(N'lease expired during attempt ', i.attempt + 1, N' (the handler did not finish within its lease)') ELSE i.last_error END`;

/**
 * The claim batch: under the transaction-owned lock of the exact source (its SHA-256), due
 * `pending` rows and expired `processing` rows of the source, at most one per aggregate (its head
 * by `sequence` among open rows), none of an aggregate with a row under a live lease, rows without
 * aggregate (NULL or `''`) freely, due retries first. Aggregates come from a loose index scan of
 * the pull head index, so the claim costs the number of open aggregates of the source, not the
 * rows waiting behind them. Rows come back in claim order (retries first, then `scheduled_at,
 * created_at, id`), sorted by SQL.
 */
export function buildPullClaim(names: MssqlNames, p: { source: string; limit: number; leaseMs: number }): MssqlStatement {
  const t = names.inbox;
  const order = ['scheduled_at', 'created_at', 'id'] as const;
  const free = (attempts: string) => `             FROM ${t} AS c WITH (READCOMMITTEDLOCK, READPAST)
            WHERE ${ofSource('c')} AND ${attempts} AND ${noAggregate('c')}
              AND c.state IN (N'pending', N'processing') AND ${claimable('c')}`;
  const claim = `${DECLARE_PICKED}
${DECLARE_INBOX_CLAIMED}
WITH ${looseIndexScan('open_aggregates', t, 'aggregate_id', `${ofSource('k')} AND k.state IN (N'pending', N'processing')`, true)},
heads AS (
  SELECT h.id, h.attempt, h.scheduled_at, h.created_at
    FROM open_aggregates AS k
   CROSS APPLY (SELECT TOP (1) r.id, r.state, r.attempt, r.scheduled_at, r.created_at, r.lease_expires_at
                  FROM ${t} AS r WITH (READCOMMITTEDLOCK)
                 WHERE ${ofSource('r')} AND r.aggregate_id = k.v AND r.state IN (N'pending', N'processing')
                 ORDER BY r.[sequence]) AS h
   WHERE ${claimable('h')}
     AND NOT EXISTS (SELECT 1 FROM ${t} AS b WITH (READCOMMITTEDLOCK)
                      WHERE ${ofSource('b')} AND b.aggregate_id = k.v AND b.state = N'processing' AND b.lease_expires_at > SYSUTCDATETIME())
)
INSERT INTO @v_picked (id, claim_priority)
SELECT TOP (@p_limit) u.id, u.claim_priority
  FROM (
         SELECT * FROM (
           SELECT TOP (@p_limit) ${priorityOf('c')} AS claim_priority, c.scheduled_at, c.created_at, c.id
             FROM heads AS c
            ORDER BY claim_priority, c.scheduled_at, c.created_at, c.id) AS keyed
         UNION ALL
         ${orderedBranch('free_retried', 0, order, free('c.attempt > 0'), order)}
         UNION ALL
         ${orderedBranch('free_fresh', 1, order, free('c.attempt = 0'), order)}
       ) AS u
 ORDER BY u.claim_priority, u.scheduled_at, u.created_at, u.id
OPTION (MAXRECURSION 0);
UPDATE i
   ${PULL_CLAIM_SET},
       ${LOST_LEASE_SET}
OUTPUT ${INBOX_COLUMNS.map((c) => `inserted.${c}`).join(', ')}, p.claim_priority
  INTO @v_claimed (${INBOX_COLUMNS.join(', ')}, claim_priority)
  FROM ${t} AS i ${viaIndex(`${names.inboxTable}_pkey`, true, 'UPDLOCK, READPAST, ROWLOCK')}
 INNER JOIN @v_picked AS p ON p.id = i.id
 WHERE ${ofSource('i')} AND ${claimable('i')}
   AND (i.aggregate_id IS NULL OR i.aggregate_id = N'' OR NOT EXISTS (
         SELECT 1 FROM ${t} AS h WITH (READCOMMITTEDLOCK)
          WHERE ${ofSource('h')} AND h.aggregate_id = i.aggregate_id
            AND h.state IN (N'pending', N'processing') AND h.[sequence] < i.[sequence]));`;
  return {
    text: inClaimTransaction(
      pullLockExpression(names.pullClaimLockPrefix),
      claim,
      `SELECT ${INBOX_COLUMNS.join(', ')} FROM @v_claimed ORDER BY claim_priority, scheduled_at, created_at, id;`,
    ),
    params: [
      param('p_source', mssql().NVarChar(255), p.source),
      param('p_limit', mssql().Int, p.limit),
      leaseParam('p_lease_ms', p.leaseMs),
      // capped as a lease too, so the floor never lifts the lease above the invocation's time left
      leaseParam('p_lease_floor_ms', Math.min(msValue('leaseMs', p.leaseMs), PULL_LEASE_FLOOR_MS)),
    ],
  };
}

/** Claims and commits in one round trip (the claim's own transaction ends inside the batch); rows in claim order, as SQL sorted them. */
export async function pullClaimMany(pool: sql.ConnectionPool, names: MssqlNames, p: { source: string; limit: number; leaseMs: number }): Promise<InboxRow[]> {
  if (p.limit <= 0) return [];
  const { recordset } = await runStatement<InboxDbRow>(pool, buildPullClaim(names, p));
  return recordset.map(toInboxRow);
}

/** One fenced write of a pull row. */
export function buildPullFenced(names: MssqlNames, kind: FencedKind, item: ClaimRef & { delayMs?: number; error?: string }, leaseMs?: number): MssqlStatement {
  return buildFencedBatch(names.inbox, kind, [item], { ...(leaseMs === undefined ? {} : { leaseMs }), extraCondition: PULL_ONLY });
}

async function exactlyOne(runner: MssqlRunner, statement: MssqlStatement): Promise<boolean> {
  return (await runFencedBatch(runner, statement)).length === 1;
}

export async function pullRenew(runner: MssqlRunner, names: MssqlNames, p: ClaimRef & { leaseMs: number }): Promise<boolean> {
  return exactlyOne(runner, buildPullFenced(names, 'renew', p, p.leaseMs));
}
/** Fenced `processed` inside the caller's `mssql` Transaction; false means: roll the caller back. */
export async function pullComplete(tx: sql.Transaction, names: MssqlNames, c: ClaimRef): Promise<boolean> {
  return exactlyOne(tx, buildPullFenced(names, 'processed', c));
}
export async function pullRetry(runner: MssqlRunner, names: MssqlNames, p: RetryItem): Promise<boolean> {
  return exactlyOne(runner, buildPullFenced(names, 'retry', p));
}
export async function pullMarkDead(runner: MssqlRunner, names: MssqlNames, p: DeadItem): Promise<boolean> {
  return exactlyOne(runner, buildPullFenced(names, 'dead', p));
}
/** Fenced return of a claimed, never-started row to `pending`; attempt and schedule unchanged. */
export async function pullRelease(runner: MssqlRunner, names: MssqlNames, c: ClaimRef): Promise<boolean> {
  return exactlyOne(runner, buildPullFenced(names, 'release', c));
}
