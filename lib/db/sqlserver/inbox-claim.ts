/**
 * The SQL Server relay claim: due push rows, at most one per aggregate of a source (the
 * aggregate's head by `sequence`, and none while a row of it is `processing`; aggregates of
 * different sources never block each other), rows without aggregate freely, due retries first;
 * committed before the rows are returned, in `sequence` order.
 *
 * Aggregate heads are ranked with `ROW_NUMBER() OVER (PARTITION BY source, aggregate_id ORDER BY
 * sequence)` over the open push rows, read without holding locks (see `claim-order.ts`): the read
 * grows with the open aggregated rows, the locks only with the batch. The ranking skips rows
 * other transactions are writing (`READPAST`), so one uncommitted insert of any aggregate does not
 * hold up the whole claim; a row ranked head only because a lower row was skipped is refused by
 * the `UPDATE`'s re-check, which waits for that lower row and never skips.
 */
import sql from 'mssql';
import type { InboxRow } from '../driver.ts';
import { inClaimTransaction, lockNameLiteral } from './claim-locks.ts';
import { CLAIM_SET, DECLARE_PICKED, orderedBranch, priorityOf } from './claim-order.ts';
import { INBOX_COLUMNS, DECLARE_INBOX_CLAIMED, type InboxDbRow, toInboxRow } from './inbox-rows.ts';
import { msValue, param, runStatement, type MssqlRunner, type MssqlStatement } from './mssql-pool.ts';
import type { MssqlNames } from './names.ts';

/** The claim batch under the transaction-owned lock `names.inboxClaimLock`. */
export function buildInboxClaimPush(names: MssqlNames, p: { limit: number; leaseMs: number }): MssqlStatement {
  const t = names.inbox;
  const order = ['scheduled_at', '[sequence]'] as const;
  const cols = ['id', 'scheduled_at', '[sequence]'] as const;
  const free = (attempts: string) => `             FROM ${t} AS c WITH (READCOMMITTEDLOCK, READPAST)
            WHERE c.state = N'pending' AND c.consumption = N'push' AND ${attempts}
              AND c.scheduled_at <= SYSUTCDATETIME() AND c.aggregate_id IS NULL`;
  const claim = `${DECLARE_PICKED}
${DECLARE_INBOX_CLAIMED}
WITH open_rows AS (
  SELECT r.id, r.state, r.attempt, r.scheduled_at, r.[sequence],
         ROW_NUMBER() OVER (PARTITION BY r.source, r.aggregate_id ORDER BY r.[sequence]) AS head_rank,
         MAX(CASE WHEN r.state = N'processing' THEN 1 ELSE 0 END) OVER (PARTITION BY r.source, r.aggregate_id) AS busy
    FROM ${t} AS r WITH (READCOMMITTEDLOCK, READPAST)
   WHERE r.consumption = N'push' AND r.state IN (N'pending', N'processing') AND r.aggregate_id IS NOT NULL
),
heads AS (
  SELECT id, attempt, scheduled_at, [sequence] FROM open_rows
   WHERE head_rank = 1 AND busy = 0 AND state = N'pending' AND scheduled_at <= SYSUTCDATETIME()
)
INSERT INTO @v_picked (id, claim_priority)
SELECT TOP (@p_limit) u.id, u.claim_priority
  FROM (
         SELECT * FROM (
           SELECT TOP (@p_limit) ${priorityOf('c')} AS claim_priority, c.id, c.scheduled_at, c.[sequence]
             FROM heads AS c
            ORDER BY claim_priority, c.scheduled_at, c.[sequence]) AS keyed
         UNION ALL
         ${orderedBranch('free_retried', 0, cols, free('c.attempt > 0'), order)}
         UNION ALL
         ${orderedBranch('free_fresh', 1, cols, free('c.attempt = 0'), order)}
       ) AS u
 ORDER BY u.claim_priority, u.scheduled_at, u.[sequence];
UPDATE i
   ${CLAIM_SET}
OUTPUT ${INBOX_COLUMNS.map((c) => `inserted.${c}`).join(', ')}, p.claim_priority
  INTO @v_claimed (${INBOX_COLUMNS.join(', ')}, claim_priority)
  FROM ${t} AS i WITH (UPDLOCK, READPAST, ROWLOCK, FORCESEEK)
 INNER JOIN @v_picked AS p ON p.id = i.id
 WHERE i.state = N'pending' AND i.consumption = N'push' AND i.scheduled_at <= SYSUTCDATETIME()
   AND (i.aggregate_id IS NULL OR NOT EXISTS (
         SELECT 1 FROM ${t} AS h WITH (READCOMMITTEDLOCK)
          WHERE h.source = i.source AND h.aggregate_id = i.aggregate_id AND h.consumption = N'push'
            AND h.state IN (N'pending', N'processing') AND h.[sequence] < i.[sequence]));`;
  return {
    text: inClaimTransaction(lockNameLiteral(names.inboxClaimLock), claim, `SELECT ${INBOX_COLUMNS.join(', ')} FROM @v_claimed ORDER BY [sequence];`),
    params: [param('p_limit', sql.Int, p.limit), param('p_lease_ms', sql.BigInt, msValue('leaseMs', p.leaseMs))],
  };
}

/** Claims and commits in one round trip; rows in `sequence` order, as SQL returned them. */
export async function inboxClaimPushMany(runner: MssqlRunner, names: MssqlNames, p: { limit: number; leaseMs: number }): Promise<InboxRow[]> {
  if (p.limit <= 0) return [];
  const { recordset } = await runStatement<InboxDbRow>(runner, buildInboxClaimPush(names, p));
  return recordset.map(toInboxRow);
}
