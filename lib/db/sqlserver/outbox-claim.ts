/**
 * The SQL Server outbox claim: due rows, at most one per key (the key's head by `sequence`, and
 * none while a row of the key is `processing`), keyless rows (NULL or empty key) freely, due
 * retries first; committed before the rows are returned, in `sequence` order.
 *
 * Rows come from the window of the oldest due rows first; only when it gave less than half the
 * batch, from the heads of all open keys (a loose index scan of the key-head index, one seek per
 * key). The pick never waits for a row lock: candidates are read past locked rows, and the head
 * probes read uncommitted rows too, so a key whose lower row another transaction holds is skipped
 * (see `outboxFreeHead`). See `claim-order.ts` for the pick-then-update shape and its locks.
 */
import sql from 'mssql';
import type { OutboxRow } from '../driver.ts';
import { inClaimTransaction, lockNameLiteral } from './claim-locks.ts';
import { CLAIM_SET, claimRetryingInFlight, DECLARE_PICKED, DIRTY_PROBE, looseIndexScan, OLDEST_WINDOW, orderedBranch, viaIndex } from './claim-order.ts';
import { lowerUuid, msValue, param, runStatement, type MssqlRunner, type MssqlStatement } from './mssql-pool.ts';
import type { MssqlNames } from './names.ts';
import { withLazyPayload } from '../lazy-payload.ts';
import { parseStoredTraceContext } from '../../observability/trace-context.ts';

const COLUMNS = ['id', 'topic', '[key]', 'payload', 'headers', 'attempt', 'max_attempts', '[sequence]', 'replay_count', 'created_at', 'claim_token', 'lease_expires_at', 'trace_context'] as const;

const DECLARE_CLAIMED = `DECLARE @v_claimed TABLE (id UNIQUEIDENTIFIER NOT NULL, topic NVARCHAR(255) NOT NULL, [key] NVARCHAR(255) NULL, payload NVARCHAR(MAX) NOT NULL,
  headers NVARCHAR(MAX) NOT NULL, attempt INT NOT NULL, max_attempts INT NOT NULL, [sequence] BIGINT NOT NULL, replay_count INT NOT NULL,
  created_at DATETIME2(7) NOT NULL, claim_token UNIQUEIDENTIFIER NOT NULL, lease_expires_at DATETIME2(7) NOT NULL,
  trace_context NVARCHAR(1024) NULL);`;

/** A row as the claim returns it. */
interface OutboxDbRow {
  id: string;
  topic: string;
  key: string | null;
  payload: string;
  headers: string;
  attempt: number;
  max_attempts: number;
  sequence: string;
  replay_count: number;
  created_at: Date;
  claim_token: string;
  lease_expires_at: Date;
  trace_context: string | null;
}

function toOutboxRow(r: OutboxDbRow): OutboxRow {
  return withLazyPayload({
    id: lowerUuid(r.id),
    topic: r.topic,
    key: r.key,
    // NVARCHAR: the text as stored, never parsed on the delivery path
    payloadText: r.payload,
    headers: JSON.parse(r.headers) as Record<string, string>,
    attempt: r.attempt,
    maxAttempts: r.max_attempts,
    sequence: String(r.sequence),
    replayCount: r.replay_count,
    createdAt: r.created_at,
    claimToken: lowerUuid(r.claim_token),
    leaseExpiresAt: r.lease_expires_at,
    trace: parseStoredTraceContext(r.trace_context),
  });
}

/** The open states: the key-head index's filter, written as it is there. */
const OPEN = `IN (N'pending', N'processing')`;

/**
 * `a` (alias of a keyed row with `[key]` and `[sequence]`) is the head of a key with nothing in
 * flight, judged without waiting for any lock: both probes read `NOLOCK` (see `DIRTY_PROBE`), so
 * a lower row another transaction holds uncommitted (an application's enqueue not yet committed,
 * a relayed forward) counts as a lower row and the key is skipped by this claim, never waited on
 * under the claim lock; a row being put in flight or renewed counts as in flight. A key is only
 * ever passed over, never published out of order: PostgreSQL's claim skips the same keys (its
 * `FOR UPDATE SKIP LOCKED` never sees a row before it commits, and its head check then refuses
 * the key's later rows).
 */
export function outboxFreeHead(names: MssqlNames, a: string): string {
  const t = names.outbox;
  return `NOT EXISTS (SELECT 1 FROM ${t} AS d ${viaIndex(`${names.outboxTable}_key_head_idx`, true, DIRTY_PROBE)}
                   WHERE d.[key] = ${a}.[key] AND d.[key] IS NOT NULL AND d.state ${OPEN} AND d.[sequence] < ${a}.[sequence])
              AND NOT EXISTS (SELECT 1 FROM ${t} AS b ${viaIndex(`${names.outboxTable}_key_processing_idx`, true, DIRTY_PROBE)}
                   WHERE b.[key] = ${a}.[key] AND b.[key] IS NOT NULL AND b.state = N'processing')`;
}

/**
 * The claim batch under the transaction-owned lock `names.outboxClaimLock`, the PostgreSQL
 * window claim carried over (`lib/db/postgres/outbox-queries.ts`): (1) due retries that are
 * keyless or a free head, (2) the window — the `OLDEST_WINDOW` batches of the oldest due rows,
 * keeping first attempts that are keyless or a free head — and (3) only when the window gave less
 * than half the batch, the heads of every open key (loose index scan) and keyless rows. In a
 * table where most keys can move the batch comes from the window, and the claim's cost does not
 * grow with the number of open keys.
 */
export function buildOutboxClaim(names: MssqlNames, p: { limit: number; leaseMs: number }): MssqlStatement {
  const t = names.outbox;
  const o = names.outboxTable;
  const order = ['scheduled_at', '[sequence]'] as const;
  const cols = ['id', 'scheduled_at', '[sequence]'] as const;
  const committed = 'READCOMMITTEDLOCK, READPAST';
  const keylessOr = (a: string) => `(${a}.[key] IS NULL OR ${a}.[key] = N'' OR (${outboxFreeHead(names, a)}))`;
  const keyless = (index: string, key: string) => `             FROM ${t} AS c ${viaIndex(index, false, committed)}
            WHERE c.state = N'pending' AND c.attempt = 0 AND c.scheduled_at <= SYSUTCDATETIME() AND ${key}
              AND NOT EXISTS (SELECT 1 FROM @v_picked AS p WHERE p.id = c.id)`;
  const claim = `${DECLARE_PICKED}
${DECLARE_CLAIMED}
DECLARE @v_taken INT;
DECLARE @v_window INT;
INSERT INTO @v_picked (id, claim_priority)
SELECT TOP (@p_limit) c.id, 0
  FROM ${t} AS c ${viaIndex(`${o}_retry_idx`, false, committed)}
 WHERE c.state = N'pending' AND c.attempt > 0 AND c.scheduled_at <= SYSUTCDATETIME()
   AND ${keylessOr('c')}
 ORDER BY c.scheduled_at, c.[sequence];
SET @v_taken = @@ROWCOUNT;
INSERT INTO @v_picked (id, claim_priority)
SELECT TOP (@p_limit - @v_taken) w.id, 1
  FROM (SELECT TOP (@p_limit * ${OLDEST_WINDOW}) c.id, c.[key], c.attempt, c.scheduled_at, c.[sequence]
          FROM ${t} AS c ${viaIndex(`${o}_pending_idx`, false, committed)}
         WHERE c.state = N'pending' AND c.scheduled_at <= SYSUTCDATETIME()
         ORDER BY c.scheduled_at, c.[sequence]) AS w
 WHERE w.attempt = 0 AND ${keylessOr('w')}
 ORDER BY w.scheduled_at, w.[sequence];
SET @v_window = @@ROWCOUNT;
SET @v_taken = @v_taken + @v_window;
IF @v_window * 2 < @p_limit AND @v_taken < @p_limit
BEGIN
  WITH ${looseIndexScan('open_keys', t, '[key]', `k.state ${OPEN}`, true, `${o}_key_head_idx`)},
  heads AS (
    SELECT h.id, h.scheduled_at, h.[sequence]
      FROM open_keys AS k
     CROSS APPLY (SELECT TOP (1) r.id, r.[key], r.state, r.attempt, r.scheduled_at, r.[sequence]
                    FROM ${t} AS r ${viaIndex(`${o}_key_head_idx`, true, committed)}
                   WHERE r.[key] = k.v AND r.[key] IS NOT NULL AND r.state ${OPEN}
                   ORDER BY r.[sequence]) AS h
     WHERE h.state = N'pending' AND h.attempt = 0 AND h.scheduled_at <= SYSUTCDATETIME()
       AND ${outboxFreeHead(names, 'h')}
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
           ${orderedBranch('keyless_fresh', 1, cols, keyless(`${o}_keyless_pending_idx`, 'c.[key] IS NULL'), order)}
           UNION ALL
           ${orderedBranch('empty_key_fresh', 1, cols, keyless(`${o}_empty_key_pending_idx`, `c.[key] = N''`), order)}
         ) AS u
   ORDER BY u.scheduled_at, u.[sequence]
  OPTION (MAXRECURSION 0);
END;
UPDATE o
   ${CLAIM_SET}
OUTPUT ${COLUMNS.map((c) => `inserted.${c}`).join(', ')}
  INTO @v_claimed (${COLUMNS.join(', ')})
  FROM ${t} AS o ${viaIndex(`${o}_pkey`, true, 'UPDLOCK, READPAST, ROWLOCK')}
 INNER JOIN @v_picked AS p ON p.id = o.id
 WHERE o.state = N'pending' AND o.scheduled_at <= SYSUTCDATETIME()
   AND (o.[key] IS NULL OR o.[key] = N'' OR NOT EXISTS (
         SELECT 1 FROM ${t} AS h ${viaIndex(`${o}_key_head_idx`, true, 'READCOMMITTEDLOCK')}
          WHERE h.[key] = o.[key] AND h.[key] IS NOT NULL AND h.state ${OPEN} AND h.[sequence] < o.[sequence]));`;
  return {
    text: inClaimTransaction(lockNameLiteral(names.outboxClaimLock), claim, `SELECT ${COLUMNS.join(', ')} FROM @v_claimed ORDER BY [sequence];`),
    params: [param('p_limit', sql.Int, p.limit), param('p_lease_ms', sql.BigInt, msValue('leaseMs', p.leaseMs))],
  };
}

/** Claims and commits in one round trip; rows in `sequence` order, as SQL returned them. */
export async function outboxClaimMany(runner: MssqlRunner, names: MssqlNames, p: { limit: number; leaseMs: number }): Promise<OutboxRow[]> {
  if (p.limit <= 0) return [];
  const { recordset } = await claimRetryingInFlight(() => runStatement<OutboxDbRow>(runner, buildOutboxClaim(names, p)));
  return recordset.map(toOutboxRow);
}
