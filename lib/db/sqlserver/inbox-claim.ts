/**
 * The SQL Server relay claim: due push rows, at most one per aggregate of a source (the
 * aggregate's head by `sequence`, and none while a row of it is `processing`; aggregates of
 * different sources never block each other), rows without aggregate (NULL or `''`, as on
 * PostgreSQL) freely, due retries first; committed before the rows are returned, in `sequence`
 * order.
 *
 * Rows come from the window of the oldest due push rows first, and from the heads of every open
 * aggregate only when the window gave less than half the batch. The pick never waits for a row
 * lock: an aggregate whose lower row another transaction holds is skipped (`relayFreeHead`). The
 * `UPDATE`'s re-check waits only for a lower row whose uncommitted version has already left the
 * open states (a finishing write), and the unique index of in-flight aggregates (migration 11)
 * refuses a second row in flight; the claim then runs again (`claimRetryingInFlight`).
 */
import sql from 'mssql';
import type { InboxRow } from '../driver.ts';
import { inClaimTransaction, lockNameLiteral } from './claim-locks.ts';
import { CLAIM_SET, claimRetryingInFlight, DECLARE_PICKED, DIRTY_PROBE, looseIndexScan, OLDEST_WINDOW, orderedBranch, viaIndex } from './claim-order.ts';
import { INBOX_COLUMNS, DECLARE_INBOX_CLAIMED, type InboxDbRow, toInboxRow } from './inbox-rows.ts';
import { msValue, param, runStatement, type MssqlRunner, type MssqlStatement } from './mssql-pool.ts';
import type { MssqlNames } from './names.ts';

/** The open states: the aggregate-head index's filter, written as it is there. */
const OPEN = `IN (N'pending', N'processing')`;

/** `a` (alias of a push row) has no aggregate: NULL or the empty string, as on PostgreSQL. */
function noAggregate(a: string): string {
  return `(${a}.aggregate_id IS NULL OR ${a}.aggregate_id = N'')`;
}

/**
 * `a` (alias of a push row with an aggregate) is its aggregate's head with nothing of it in
 * flight, judged without waiting for any lock (`NOLOCK`, see `DIRTY_PROBE` and the outbox's
 * `outboxFreeHead`): a lower row another transaction holds uncommitted, or a row of the aggregate
 * being put in flight or renewed, makes this claim skip the aggregate.
 */
export function relayFreeHead(names: MssqlNames, a: string): string {
  const t = names.inbox;
  return `NOT EXISTS (SELECT 1 FROM ${t} AS d ${viaIndex(`${names.inboxTable}_aggregate_head_idx`, true, DIRTY_PROBE)}
                   WHERE d.source = ${a}.source AND d.aggregate_id = ${a}.aggregate_id AND d.aggregate_id IS NOT NULL
                     AND d.consumption = N'push' AND d.state ${OPEN} AND d.[sequence] < ${a}.[sequence])
              AND NOT EXISTS (SELECT 1 FROM ${t} AS b ${viaIndex(`${names.inboxTable}_aggregate_processing_idx`, true, DIRTY_PROBE)}
                   WHERE b.source = ${a}.source AND b.aggregate_id = ${a}.aggregate_id AND b.aggregate_id IS NOT NULL
                     AND b.consumption = N'push' AND b.state = N'processing')`;
}

/**
 * The claim batch under the transaction-owned lock `names.inboxClaimLock`, the PostgreSQL window
 * claim carried over (`relayClaimText` in `lib/db/postgres/inbox-queries.ts`): due retries, the
 * window of the oldest due push rows, and only when the window gave less than half the batch the
 * heads of every open aggregate — a loose index scan of the aggregate-head index, first over the
 * sources, then per source over its aggregates (one seek per aggregate) — and rows without
 * aggregate.
 */
export function buildInboxClaimPush(names: MssqlNames, p: { limit: number; leaseMs: number }): MssqlStatement {
  const t = names.inbox;
  const i = names.inboxTable;
  const headIdx = `${i}_aggregate_head_idx`;
  const order = ['scheduled_at', '[sequence]'] as const;
  const cols = ['id', 'scheduled_at', '[sequence]'] as const;
  const committed = 'READCOMMITTEDLOCK, READPAST';
  const freeOr = (a: string) => `(${noAggregate(a)} OR (${relayFreeHead(names, a)}))`;
  // an open push row of an aggregate, for alias `k` (implies the head index's filter)
  const openAggregated = `k.consumption = N'push' AND k.state ${OPEN} AND k.aggregate_id IS NOT NULL AND k.aggregate_id <> N''`;
  const free = (index: string, aggregate: string) => `             FROM ${t} AS c ${viaIndex(index, false, committed)}
            WHERE c.state = N'pending' AND c.consumption = N'push' AND c.attempt = 0
              AND c.scheduled_at <= SYSUTCDATETIME() AND ${aggregate}
              AND NOT EXISTS (SELECT 1 FROM @v_picked AS p WHERE p.id = c.id)`;
  const claim = `${DECLARE_PICKED}
${DECLARE_INBOX_CLAIMED}
DECLARE @v_taken INT;
DECLARE @v_window INT;
INSERT INTO @v_picked (id, claim_priority)
SELECT TOP (@p_limit) c.id, 0
  FROM ${t} AS c ${viaIndex(`${i}_push_retry_idx`, false, committed)}
 WHERE c.state = N'pending' AND c.consumption = N'push' AND c.attempt > 0 AND c.scheduled_at <= SYSUTCDATETIME()
   AND ${freeOr('c')}
 ORDER BY c.scheduled_at, c.[sequence];
SET @v_taken = @@ROWCOUNT;
INSERT INTO @v_picked (id, claim_priority)
SELECT TOP (@p_limit - @v_taken) w.id, 1
  FROM (SELECT TOP (@p_limit * ${OLDEST_WINDOW}) c.id, c.source, c.aggregate_id, c.attempt, c.scheduled_at, c.[sequence]
          FROM ${t} AS c ${viaIndex(`${i}_push_pending_idx`, false, committed)}
         WHERE c.state = N'pending' AND c.consumption = N'push' AND c.scheduled_at <= SYSUTCDATETIME()
         ORDER BY c.scheduled_at, c.[sequence]) AS w
 WHERE w.attempt = 0 AND ${freeOr('w')}
 ORDER BY w.scheduled_at, w.[sequence];
SET @v_window = @@ROWCOUNT;
SET @v_taken = @v_taken + @v_window;
IF @v_window * 2 < @p_limit AND @v_taken < @p_limit
BEGIN
  WITH ${looseIndexScan('open_sources', t, 'source', openAggregated, false, headIdx)},
  open_aggregates AS (
    SELECT s.v AS source, a.v
      FROM open_sources AS s
     CROSS APPLY (SELECT MIN(k.aggregate_id) AS v
                    FROM ${t} AS k ${viaIndex(headIdx, true, committed)}
                   WHERE k.source = s.v AND ${openAggregated}) AS a
     WHERE a.v IS NOT NULL
    UNION ALL
    SELECT n.source, n.v
      FROM (SELECT k.source, k.aggregate_id AS v, ROW_NUMBER() OVER (PARTITION BY k.source ORDER BY k.aggregate_id) AS rn
              FROM ${t} AS k ${viaIndex(headIdx, true, committed)}
             INNER JOIN open_aggregates AS p ON k.source = p.source AND k.aggregate_id > p.v
             WHERE ${openAggregated}) AS n
     WHERE n.rn = 1
  ),
  heads AS (
    SELECT h.id, h.scheduled_at, h.[sequence]
      FROM open_aggregates AS a
     CROSS APPLY (SELECT TOP (1) r.id, r.source, r.aggregate_id, r.state, r.attempt, r.scheduled_at, r.[sequence]
                    FROM ${t} AS r ${viaIndex(headIdx, true, committed)}
                   WHERE r.source = a.source AND r.aggregate_id = a.v AND r.aggregate_id IS NOT NULL
                     AND r.consumption = N'push' AND r.state ${OPEN}
                   ORDER BY r.[sequence]) AS h
     WHERE h.state = N'pending' AND h.attempt = 0 AND h.scheduled_at <= SYSUTCDATETIME()
       AND ${relayFreeHead(names, 'h')}
       AND NOT EXISTS (SELECT 1 FROM @v_picked AS p WHERE p.id = h.id)
  )
  INSERT INTO @v_picked (id, claim_priority)
  SELECT TOP (@p_limit - @v_taken) u.id, 1
    FROM (
           SELECT * FROM (
             SELECT TOP (@p_limit) 1 AS claim_priority, c.id, c.scheduled_at, c.[sequence]
               FROM heads AS c
              ORDER BY c.scheduled_at, c.[sequence]) AS keyed
           UNION ALL
           ${orderedBranch('free_fresh', 1, cols, free(`${i}_push_free_idx`, 'c.aggregate_id IS NULL'), order)}
           UNION ALL
           ${orderedBranch('empty_aggregate_fresh', 1, cols, free(`${i}_push_empty_aggregate_idx`, `c.aggregate_id = N''`), order)}
         ) AS u
   ORDER BY u.scheduled_at, u.[sequence]
  OPTION (MAXRECURSION 0);
END;
UPDATE i
   ${CLAIM_SET}
OUTPUT ${INBOX_COLUMNS.map((c) => `inserted.${c}`).join(', ')}, p.claim_priority
  INTO @v_claimed (${INBOX_COLUMNS.join(', ')}, claim_priority)
  FROM ${t} AS i ${viaIndex(`${i}_pkey`, true, 'UPDLOCK, READPAST, ROWLOCK')}
 INNER JOIN @v_picked AS p ON p.id = i.id
 WHERE i.state = N'pending' AND i.consumption = N'push' AND i.scheduled_at <= SYSUTCDATETIME()
   AND (${noAggregate('i')} OR NOT EXISTS (
         SELECT 1 FROM ${t} AS h ${viaIndex(headIdx, true, 'READCOMMITTEDLOCK')}
          WHERE h.source = i.source AND h.aggregate_id = i.aggregate_id AND h.aggregate_id IS NOT NULL AND h.consumption = N'push'
            AND h.state ${OPEN} AND h.[sequence] < i.[sequence]));`;
  return {
    text: inClaimTransaction(lockNameLiteral(names.inboxClaimLock), claim, `SELECT ${INBOX_COLUMNS.join(', ')} FROM @v_claimed ORDER BY [sequence];`),
    params: [param('p_limit', sql.Int, p.limit), param('p_lease_ms', sql.BigInt, msValue('leaseMs', p.leaseMs))],
  };
}

/** Claims and commits in one round trip; rows in `sequence` order, as SQL returned them. */
export async function inboxClaimPushMany(runner: MssqlRunner, names: MssqlNames, p: { limit: number; leaseMs: number }): Promise<InboxRow[]> {
  if (p.limit <= 0) return [];
  const { recordset } = await claimRetryingInFlight(() => runStatement<InboxDbRow>(runner, buildInboxClaimPush(names, p)));
  return recordset.map(toInboxRow);
}
