/**
 * SQL Server pull operations (driver methods `pull*`, spec §6 and §8).
 *
 * The claim runs in its own transaction under an exclusive application lock on the source name,
 * owned by that transaction (10 s wait; a lock not granted is a `TransientDatabaseError` to back
 * off from), plus `UPDLOCK, READPAST, ROWLOCK` on the rows. The lock serializes claims of one
 * source, which is what makes "one row per aggregate" hold on SQL Server whatever the isolation
 * details (RCSI on or off); it also caps one source at roughly 110–140 claims per second.
 *
 * Every other write is fenced on id + `processing` + token + `lease_expires_at > SYSUTCDATETIME()`
 * (and `consumption = 'pull'`) and reports true only when exactly one row changed.
 */
import { retriesFirst } from './claim-order.ts';
import sql from 'mssql';
import type { ClaimRef, DeadItem, InboxRow, RetryItem } from '../driver.ts';
import { transactionPullLock } from './claim-locks.ts';
import { buildFencedBatch, runFencedBatch, type FencedKind } from './fenced-batch.ts';
import { type InboxDbRow, INBOX_RETURNED, toInboxRow } from './inbox-queries.ts';
import { mssqlTransaction, param, runStatement, type MssqlRunner, type MssqlStatement } from './mssql-pool.ts';
import type { MssqlNames } from './names.ts';

const PULL_ONLY = ` AND r.consumption = N'pull'`;

/**
 * The claim batch (run inside a transaction): the source lock, then one UPDATE taking due
 * `pending` rows and expired `processing` rows of the source, at most one per aggregate (its head
 * by `sequence` among open rows), none of an aggregate with a row under a live lease.
 */
export function buildPullClaim(names: MssqlNames, p: { source: string; limit: number; leaseMs: number }): MssqlStatement {
  const t = names.inbox;
  return {
    text: `${transactionPullLock(names.pullClaimLockPrefix)}
UPDATE i
   SET state = N'processing',
       claim_token = NEWID(),
       claimed_at = SYSUTCDATETIME(),
       lease_expires_at = DATEADD(millisecond, @p_lease_ms, SYSUTCDATETIME()),
       updated_at = SYSUTCDATETIME()
OUTPUT ${INBOX_RETURNED}, inserted.scheduled_at
  FROM ${t} AS i
 INNER JOIN (
       ${retriesFirst(
         (attempts) => `         FROM ${t} AS c WITH (UPDLOCK, READPAST, ROWLOCK)
        WHERE c.source = @p_source
          AND c.consumption = N'pull'
          AND ${attempts}
          AND ((c.state = N'pending' AND c.scheduled_at <= SYSUTCDATETIME())
            OR (c.state = N'processing' AND c.lease_expires_at <= SYSUTCDATETIME()))
          AND (c.aggregate_id IS NULL OR (
                NOT EXISTS (
                  SELECT 1 FROM ${t} AS h
                   WHERE h.source = c.source AND h.consumption = N'pull' AND h.aggregate_id = c.aggregate_id
                     AND h.state IN (N'pending', N'processing') AND h.[sequence] < c.[sequence])
                AND NOT EXISTS (
                  SELECT 1 FROM ${t} AS b
                   WHERE b.source = c.source AND b.consumption = N'pull' AND b.aggregate_id = c.aggregate_id
                     AND b.state = N'processing' AND b.lease_expires_at > SYSUTCDATETIME())))`,
         ['scheduled_at', 'created_at', 'id'],
       )}
       ) AS picked ON picked.id = i.id;`,
    params: [param('p_source', sql.NVarChar(255), p.source), param('p_limit', sql.Int, p.limit), param('p_lease_ms', sql.Int, Math.round(p.leaseMs))],
  };
}

/** Claims and commits before returning (the transaction-owned lock ends with the COMMIT). */
export async function pullClaimMany(pool: sql.ConnectionPool, names: MssqlNames, p: { source: string; limit: number; leaseMs: number }): Promise<InboxRow[]> {
  if (p.limit <= 0) return [];
  const rows = await mssqlTransaction(pool, async (tx) => (await runStatement<InboxDbRow & { scheduled_at: Date }>(tx, buildPullClaim(names, p))).recordset);
  rows.sort((a, b) => Number(a.attempt === 0) - Number(b.attempt === 0) || a.scheduled_at.getTime() - b.scheduled_at.getTime() || a.created_at.getTime() - b.created_at.getTime() || (a.id.toLowerCase() < b.id.toLowerCase() ? -1 : 1));
  return rows.map(toInboxRow);
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
