/**
 * The SQL Server outbox claim: due rows, at most one per key (the key's head by `sequence`, and
 * none while a row of the key is `processing`), keyless rows (NULL or empty key) freely, due
 * retries first; committed before the rows are returned, in `sequence` order.
 *
 * Keys come from a loose index scan of the key-head index (one seek per key with open rows), so
 * a claim costs the number of keys, not the rows waiting behind them; see `claim-order.ts` for the
 * pick-then-update shape and its locks.
 */
import sql from 'mssql';
import type { OutboxRow } from '../driver.ts';
import { inClaimTransaction, lockNameLiteral } from './claim-locks.ts';
import { CLAIM_SET, DECLARE_PICKED, looseIndexScan, orderedBranch, priorityOf } from './claim-order.ts';
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

/** The claim batch under the transaction-owned lock `names.outboxClaimLock`. */
export function buildOutboxClaim(names: MssqlNames, p: { limit: number; leaseMs: number }): MssqlStatement {
  const t = names.outbox;
  const order = ['scheduled_at', '[sequence]'] as const;
  const cols = ['id', 'scheduled_at', '[sequence]'] as const;
  const keyless = (attempts: string, key: string) => `             FROM ${t} AS c WITH (READCOMMITTEDLOCK, READPAST)
            WHERE c.state = N'pending' AND ${attempts} AND c.scheduled_at <= SYSUTCDATETIME() AND ${key}`;
  const claim = `${DECLARE_PICKED}
${DECLARE_CLAIMED}
WITH ${looseIndexScan('open_keys', t, '[key]', `k.state IN (N'pending', N'processing')`, true)},
heads AS (
  SELECT h.id, h.attempt, h.scheduled_at, h.[sequence]
    FROM open_keys AS k
   CROSS APPLY (SELECT TOP (1) r.id, r.state, r.attempt, r.scheduled_at, r.[sequence]
                  FROM ${t} AS r WITH (READCOMMITTEDLOCK)
                 WHERE r.[key] = k.v AND r.state IN (N'pending', N'processing')
                 ORDER BY r.[sequence]) AS h
   WHERE h.state = N'pending' AND h.scheduled_at <= SYSUTCDATETIME()
     AND NOT EXISTS (SELECT 1 FROM ${t} AS b WITH (READCOMMITTEDLOCK) WHERE b.[key] = k.v AND b.state = N'processing')
)
INSERT INTO @v_picked (id, claim_priority)
SELECT TOP (@p_limit) u.id, u.claim_priority
  FROM (
         SELECT * FROM (
           SELECT TOP (@p_limit) ${priorityOf('c')} AS claim_priority, c.id, c.scheduled_at, c.[sequence]
             FROM heads AS c
            ORDER BY claim_priority, c.scheduled_at, c.[sequence]) AS keyed
         UNION ALL
         ${orderedBranch('keyless_retried', 0, cols, keyless('c.attempt > 0', `(c.[key] IS NULL OR c.[key] = N'')`), order)}
         UNION ALL
         ${orderedBranch('keyless_fresh', 1, cols, keyless('c.attempt = 0', 'c.[key] IS NULL'), order)}
         UNION ALL
         ${orderedBranch('empty_key_fresh', 1, cols, keyless('c.attempt = 0', `c.[key] = N''`), order)}
       ) AS u
 ORDER BY u.claim_priority, u.scheduled_at, u.[sequence]
OPTION (MAXRECURSION 0);
UPDATE o
   ${CLAIM_SET}
OUTPUT ${COLUMNS.map((c) => `inserted.${c}`).join(', ')}
  INTO @v_claimed (${COLUMNS.join(', ')})
  FROM ${t} AS o WITH (UPDLOCK, READPAST, ROWLOCK, FORCESEEK)
 INNER JOIN @v_picked AS p ON p.id = o.id
 WHERE o.state = N'pending' AND o.scheduled_at <= SYSUTCDATETIME()
   AND (o.[key] IS NULL OR o.[key] = N'' OR NOT EXISTS (
         SELECT 1 FROM ${t} AS h WITH (READCOMMITTEDLOCK)
          WHERE h.[key] = o.[key] AND h.state IN (N'pending', N'processing') AND h.[sequence] < o.[sequence]));`;
  return {
    text: inClaimTransaction(lockNameLiteral(names.outboxClaimLock), claim, `SELECT ${COLUMNS.join(', ')} FROM @v_claimed ORDER BY [sequence];`),
    params: [param('p_limit', sql.Int, p.limit), param('p_lease_ms', sql.BigInt, msValue('leaseMs', p.leaseMs))],
  };
}

/** Claims and commits in one round trip; rows in `sequence` order, as SQL returned them. */
export async function outboxClaimMany(runner: MssqlRunner, names: MssqlNames, p: { limit: number; leaseMs: number }): Promise<OutboxRow[]> {
  if (p.limit <= 0) return [];
  const { recordset } = await runStatement<OutboxDbRow>(runner, buildOutboxClaim(names, p));
  return recordset.map(toOutboxRow);
}
