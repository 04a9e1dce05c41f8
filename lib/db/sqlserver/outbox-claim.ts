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
import type { OutboxRow } from '../driver.ts';
import { claimRetryingInFlight, DIRTY_PROBE, looseIndexScan, viaIndex } from './claim-order.ts';
import { lowerUuid, runStatement, type MssqlRunner, type MssqlStatement } from './mssql-pool.ts';
import type { MssqlNames } from './names.ts';
import { buildWindowClaim, OPEN } from './window-claim.ts';
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
 * grow with the number of open keys. The steps are `buildWindowClaim`'s, shared with the relay.
 */
export function buildOutboxClaim(names: MssqlNames, p: { limit: number; leaseMs: number }): MssqlStatement {
  const t = names.outbox;
  const o = names.outboxTable;
  const committed = 'READCOMMITTEDLOCK, READPAST';
  const keyless = (index: string, key: string) => `             FROM ${t} AS c ${viaIndex(index, false, committed)}
            WHERE c.state = N'pending' AND c.attempt = 0 AND c.scheduled_at <= SYSUTCDATETIME() AND ${key}
              AND NOT EXISTS (SELECT 1 FROM @v_picked AS p WHERE p.id = c.id)`;
  return buildWindowClaim(
    {
      table: t,
      lockName: names.outboxClaimLock,
      indexes: { retry: `${o}_retry_idx`, window: `${o}_pending_idx`, head: `${o}_key_head_idx`, pkey: `${o}_pkey` },
      group: ['[key]'],
      declareClaimed: DECLARE_CLAIMED,
      columns: COLUMNS,
      keepsPriority: false,
      updateAlias: 'o',
      pending: (a) => `${a}.state = N'pending'`,
      ungrouped: (a) => `${a}.[key] IS NULL OR ${a}.[key] = N''`,
      freeHead: (a) => outboxFreeHead(names, a),
      openGroups: { ctes: looseIndexScan('open_keys', t, '[key]', `k.state ${OPEN}`, true, `${o}_key_head_idx`), from: 'open_keys AS k' },
      headOf: `r.[key] = k.v AND r.[key] IS NOT NULL AND r.state ${OPEN}`,
      ungroupedBranches: [
        { alias: 'keyless_fresh', body: keyless(`${o}_keyless_pending_idx`, 'c.[key] IS NULL') },
        { alias: 'empty_key_fresh', body: keyless(`${o}_empty_key_pending_idx`, `c.[key] = N''`) },
      ],
      lowerOpen: (h, a) => `${h}.[key] = ${a}.[key] AND ${h}.[key] IS NOT NULL AND ${h}.state ${OPEN} AND ${h}.[sequence] < ${a}.[sequence]`,
    },
    p,
  );
}

/** Claims and commits in one round trip; rows in `sequence` order, as SQL returned them. */
export async function outboxClaimMany(runner: MssqlRunner, names: MssqlNames, p: { limit: number; leaseMs: number }): Promise<OutboxRow[]> {
  if (p.limit <= 0) return [];
  const { recordset } = await claimRetryingInFlight(() => runStatement<OutboxDbRow>(runner, buildOutboxClaim(names, p)));
  return recordset.map(toOutboxRow);
}
