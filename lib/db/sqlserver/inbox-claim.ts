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
import type { InboxRow } from '../driver.ts';
import { claimRetryingInFlight, DIRTY_PROBE, looseIndexScan, viaIndex } from './claim-order.ts';
import { INBOX_COLUMNS, DECLARE_INBOX_CLAIMED, type InboxDbRow, toInboxRow } from './inbox-rows.ts';
import { runStatement, type MssqlRunner, type MssqlStatement } from './mssql-pool.ts';
import type { MssqlNames } from './names.ts';
import { buildWindowClaim, OPEN } from './window-claim.ts';

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
 * aggregate. The steps are `buildWindowClaim`'s, shared with the outbox claim.
 */
export function buildInboxClaimPush(names: MssqlNames, p: { limit: number; leaseMs: number }): MssqlStatement {
  const t = names.inbox;
  const i = names.inboxTable;
  const headIdx = `${i}_aggregate_head_idx`;
  const committed = 'READCOMMITTEDLOCK, READPAST';
  // an open push row of an aggregate, for alias `k` (implies the head index's filter)
  const openAggregated = `k.consumption = N'push' AND k.state ${OPEN} AND k.aggregate_id IS NOT NULL AND k.aggregate_id <> N''`;
  const free = (index: string, aggregate: string) => `             FROM ${t} AS c ${viaIndex(index, false, committed)}
            WHERE c.state = N'pending' AND c.consumption = N'push' AND c.attempt = 0
              AND c.scheduled_at <= SYSUTCDATETIME() AND ${aggregate}
              AND NOT EXISTS (SELECT 1 FROM @v_picked AS p WHERE p.id = c.id)`;
  const openAggregates = `${looseIndexScan('open_sources', t, 'source', openAggregated, false, headIdx)},
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
  )`;
  return buildWindowClaim(
    {
      table: t,
      lockName: names.inboxClaimLock,
      indexes: { retry: `${i}_push_retry_idx`, window: `${i}_push_pending_idx`, head: headIdx, pkey: `${i}_pkey` },
      group: ['source', 'aggregate_id'],
      declareClaimed: DECLARE_INBOX_CLAIMED,
      columns: INBOX_COLUMNS,
      keepsPriority: true,
      updateAlias: 'i',
      pending: (a) => `${a}.state = N'pending' AND ${a}.consumption = N'push'`,
      ungrouped: noAggregate,
      freeHead: (a) => relayFreeHead(names, a),
      openGroups: { ctes: openAggregates, from: 'open_aggregates AS a' },
      headOf: `r.source = a.source AND r.aggregate_id = a.v AND r.aggregate_id IS NOT NULL
                     AND r.consumption = N'push' AND r.state ${OPEN}`,
      ungroupedBranches: [
        { alias: 'free_fresh', body: free(`${i}_push_free_idx`, 'c.aggregate_id IS NULL') },
        { alias: 'empty_aggregate_fresh', body: free(`${i}_push_empty_aggregate_idx`, `c.aggregate_id = N''`) },
      ],
      lowerOpen: (h, a) => `${h}.source = ${a}.source AND ${h}.aggregate_id = ${a}.aggregate_id AND ${h}.aggregate_id IS NOT NULL AND ${h}.consumption = N'push'
            AND ${h}.state ${OPEN} AND ${h}.[sequence] < ${a}.[sequence]`,
    },
    p,
  );
}

/** Claims and commits in one round trip; rows in `sequence` order, as SQL returned them. */
export async function inboxClaimPushMany(runner: MssqlRunner, names: MssqlNames, p: { limit: number; leaseMs: number }): Promise<InboxRow[]> {
  if (p.limit <= 0) return [];
  const { recordset } = await claimRetryingInFlight(() => runStatement<InboxDbRow>(runner, buildInboxClaimPush(names, p)));
  return recordset.map(toInboxRow);
}
