/**
 * SQL Server inbox operations (driver methods `inbox*`), as statement builders plus runners.
 *
 * Deduplication is the unique constraint on `(source, idempotency_key)`. The relay claim runs under
 * the session lock `queuebox_inbox_claim_<table>` plus `UPDLOCK, READPAST, ROWLOCK`, so two relays
 * cannot both see an aggregate as free. The relay only ever touches `consumption = 'push'` rows.
 */
import { retriesFirst } from './claim-order.ts';
import { randomUUID } from 'node:crypto';
import sql from 'mssql';
import type { ClaimRef, DeadItem, DeadRowSummary, DeleteFinishedParams, InboxForwardItem, InboxInsertResult, InboxMessageInput, InboxRow, ReclaimResult, RetryItem, StatsScope, TableStats } from '../driver.ts';
import { UsageError } from '../../errors.ts';
import { withSessionClaimLock } from './claim-locks.ts';
import { buildFencedBatch, runFencedBatch } from './fenced-batch.ts';
import { buildGatedReclaim, reclaimUpdateSql, runGatedReclaim } from './maintenance-queries.ts';
import { dbNowPlusMs, lowerUuid, mssqlTransaction, param, runStatement, type MssqlRunner, type MssqlStatement } from './mssql-pool.ts';
import type { MssqlNames } from './names.ts';
import { outboxInsert } from './outbox-queries.ts';
import { buildStats, runStats } from './table-stats.ts';

/** Columns a claim returns (`OUTPUT inserted.…`). */
export const INBOX_RETURNED =
  'inserted.id, inserted.source, inserted.idempotency_key, inserted.aggregate_id, inserted.event_type, inserted.payload, inserted.headers, inserted.correlation_id, inserted.attempt, inserted.[sequence], inserted.created_at, inserted.claim_token, inserted.lease_expires_at';

/** An inbox row as SQL Server returns it. */
export interface InboxDbRow {
  id: string;
  source: string;
  idempotency_key: string;
  aggregate_id: string | null;
  event_type: string | null;
  payload: string;
  headers: string;
  correlation_id: string | null;
  attempt: number;
  sequence: string;
  created_at: Date;
  claim_token: string;
  lease_expires_at: Date;
}

/** Maps a returned row: JSON parsed, UUIDs lower-case. */
export function toInboxRow(r: InboxDbRow): InboxRow {
  return {
    id: lowerUuid(r.id),
    source: r.source,
    idempotencyKey: r.idempotency_key,
    aggregateId: r.aggregate_id,
    eventType: r.event_type,
    payload: JSON.parse(r.payload) as unknown,
    headers: JSON.parse(r.headers) as Record<string, string>,
    correlationId: r.correlation_id,
    attempt: r.attempt,
    createdAt: r.created_at,
    claimToken: lowerUuid(r.claim_token),
    leaseExpiresAt: r.lease_expires_at,
  };
}

/**
 * Stores a message once per `(source, idempotency_key)` without raising an error on a duplicate
 * (an error would doom a caller transaction running with XACT_ABORT ON): the INSERT runs only when
 * no row of the key exists, checked under UPDLOCK/HOLDLOCK (a key-range lock), then the row of the
 * key is read back; it is new when it carries the id this call chose.
 */
export function buildInboxInsert(names: MssqlNames, m: InboxMessageInput, id: string): MssqlStatement {
  const dead = m.deadReason !== undefined;
  return {
    text: `INSERT INTO ${names.inbox} (id, source, idempotency_key, aggregate_id, event_type, payload, headers, correlation_id,
                   consumption, state, last_error, scheduled_at, created_at, updated_at)
SELECT @p_id, @p_source, @p_idempotency_key, @p_aggregate_id, @p_event_type, @p_payload, @p_headers, @p_correlation_id,
       @p_consumption, @p_state, @p_last_error, ${dbNowPlusMs('@p_delay_ms')}, SYSUTCDATETIME(), SYSUTCDATETIME()
 WHERE NOT EXISTS (SELECT 1 FROM ${names.inbox} WITH (UPDLOCK, HOLDLOCK) WHERE source = @p_source AND idempotency_key = @p_idempotency_key);
SELECT id, CAST(CASE WHEN id = @p_id THEN 0 ELSE 1 END AS BIT) AS duplicate
  FROM ${names.inbox} WHERE source = @p_source AND idempotency_key = @p_idempotency_key;`,
    params: [
      param('p_id', sql.UniqueIdentifier, id),
      param('p_source', sql.NVarChar(255), m.source),
      param('p_idempotency_key', sql.NVarChar(255), m.idempotencyKey),
      param('p_aggregate_id', sql.NVarChar(255), m.aggregateId ?? null),
      param('p_event_type', sql.NVarChar(255), m.eventType ?? null),
      param('p_payload', sql.NVarChar(sql.MAX), JSON.stringify(m.payload ?? null)),
      param('p_headers', sql.NVarChar(sql.MAX), JSON.stringify(m.headers ?? {})),
      param('p_correlation_id', sql.NVarChar(128), m.correlationId ?? null),
      param('p_consumption', sql.NVarChar(10), m.consumption),
      param('p_state', sql.NVarChar(50), dead ? 'dead' : 'pending'),
      param('p_last_error', sql.NVarChar(sql.MAX), dead ? m.deadReason : null),
      param('p_delay_ms', sql.BigInt, Math.round(m.delayMs ?? 0)),
    ],
  };
}

export async function inboxInsert(runner: MssqlRunner, names: MssqlNames, m: InboxMessageInput): Promise<InboxInsertResult> {
  const { recordset } = await runStatement<{ id: string; duplicate: boolean }>(runner, buildInboxInsert(names, m, randomUUID()));
  const row = recordset[0];
  if (!row) throw new UsageError(`inbox insert of ${m.source}/${m.idempotencyKey} neither inserted nor found a row`);
  return { id: lowerUuid(row.id), duplicate: row.duplicate };
}

/**
 * Relay claim under the session lock `queuebox_inbox_claim_<table>`: due push rows; a row of an
 * aggregate only as its head (no `pending`/`processing` push row of it with a lower `sequence`)
 * and only while no `processing` row of the aggregate exists; rows without aggregate are free.
 * Due retries first (`retriesFirst`).
 */
export function buildInboxClaimPush(names: MssqlNames, p: { limit: number; leaseMs: number }): MssqlStatement {
  const t = names.inbox;
  const claim = `  UPDATE i
     SET state = N'processing',
         claim_token = NEWID(),
         claimed_at = SYSUTCDATETIME(),
         lease_expires_at = DATEADD(millisecond, @p_lease_ms, SYSUTCDATETIME()),
         updated_at = SYSUTCDATETIME()
  OUTPUT ${INBOX_RETURNED}
    FROM ${t} AS i
   INNER JOIN (
         ${retriesFirst(
           (attempts) => `           FROM ${t} AS c WITH (UPDLOCK, READPAST, ROWLOCK)
          WHERE c.state = N'pending'
            AND c.consumption = N'push'
            AND ${attempts}
            AND c.scheduled_at <= SYSUTCDATETIME()
            AND (c.aggregate_id IS NULL OR NOT EXISTS (
                  SELECT 1 FROM ${t} AS h
                   WHERE h.aggregate_id = c.aggregate_id
                     AND h.consumption = N'push'
                     AND h.state IN (N'pending', N'processing')
                     AND (h.[sequence] < c.[sequence] OR h.state = N'processing')))`,
           ['scheduled_at', '[sequence]', 'id'],
         )}
         ) AS picked ON picked.id = i.id;`;
  return {
    text: withSessionClaimLock(names.inboxClaimLock, claim),
    params: [param('p_limit', sql.Int, p.limit), param('p_lease_ms', sql.Int, Math.round(p.leaseMs))],
  };
}

export async function inboxClaimPushMany(runner: MssqlRunner, names: MssqlNames, p: { limit: number; leaseMs: number }): Promise<InboxRow[]> {
  if (p.limit <= 0) return [];
  const { recordset } = await runStatement<InboxDbRow>(runner, buildInboxClaimPush(names, p));
  return recordset.sort((a, b) => (BigInt(a.sequence) < BigInt(b.sequence) ? -1 : 1)).map(toInboxRow);
}

export async function inboxRenewMany(runner: MssqlRunner, names: MssqlNames, p: { claims: ClaimRef[]; leaseMs: number }): Promise<string[]> {
  return p.claims.length === 0 ? [] : runFencedBatch(runner, buildFencedBatch(names.inbox, 'renew', p.claims, { leaseMs: p.leaseMs }));
}

/** Marks the lost claim inside `inboxForward` so its transaction rolls back. */
class ForwardClaimLost extends Error {}

/**
 * One transaction: insert the outbox row, then the fenced mark `processed`. When the mark changes
 * no row the claim was lost: the transaction rolls back (no outbox row) and the result is false.
 */
export async function inboxForward(pool: sql.ConnectionPool, names: MssqlNames, item: InboxForwardItem, defaults: { maxAttempts: number }): Promise<boolean> {
  try {
    await mssqlTransaction(pool, async (tx) => {
      await outboxInsert(names, tx, item.outbox, defaults);
      const changed = await runFencedBatch(tx, buildFencedBatch(names.inbox, 'processed', [item]));
      if (changed.length !== 1) throw new ForwardClaimLost();
    });
    return true;
  } catch (error) {
    if (error instanceof ForwardClaimLost) return false;
    throw error;
  }
}

export async function inboxRetryMany(runner: MssqlRunner, names: MssqlNames, p: { items: RetryItem[] }): Promise<string[]> {
  return p.items.length === 0 ? [] : runFencedBatch(runner, buildFencedBatch(names.inbox, 'retry', p.items));
}
export async function inboxMarkDeadMany(runner: MssqlRunner, names: MssqlNames, p: { items: DeadItem[] }): Promise<string[]> {
  return p.items.length === 0 ? [] : runFencedBatch(runner, buildFencedBatch(names.inbox, 'dead', p.items));
}

/** Expired `processing` push rows back to `pending`; pull rows are left to the pull claim. */
export function buildInboxReclaim(names: MssqlNames, throttleMs: number | undefined): MssqlStatement {
  return buildGatedReclaim(names, `reclaim:${names.inboxTable}`, throttleMs, reclaimUpdateSql(names.inbox, ` AND consumption = N'push'`));
}
export async function inboxReclaimExpired(runner: MssqlRunner, names: MssqlNames, p: { throttleMs?: number }): Promise<ReclaimResult> {
  return runGatedReclaim(runner, buildInboxReclaim(names, p.throttleMs));
}

export async function inboxStats(runner: MssqlRunner, names: MssqlNames, scope: StatsScope = {}): Promise<TableStats> {
  return runStats(runner, buildStats(names.inbox, ` AND consumption = N'push'`, scope), scope.pendingOnly === true ? ['pending'] : ['pending', 'processing', 'processed', 'dead']);
}

export function buildInboxDeadList(names: MssqlNames, limit: number): MssqlStatement {
  return {
    text: `SELECT TOP (@p_limit) id, source, last_error, updated_at FROM ${names.inbox} WHERE state = N'dead' ORDER BY updated_at DESC;`,
    params: [param('p_limit', sql.Int, limit)],
  };
}
export async function inboxDeadList(runner: MssqlRunner, names: MssqlNames, p: { limit: number }): Promise<DeadRowSummary[]> {
  const { recordset } = await runStatement<{ id: string; source: string; last_error: string | null; updated_at: Date }>(runner, buildInboxDeadList(names, p.limit));
  return recordset.map((r) => ({ id: lowerUuid(r.id), topicOrSource: r.source, lastError: r.last_error, updatedAt: r.updated_at }));
}

/** Deletes at most `limit` `processed` or `dead` rows created more than `olderThanMs` ago. */
export function buildInboxDeleteFinished(names: MssqlNames, p: DeleteFinishedParams): MssqlStatement {
  if (p.state !== 'processed' && p.state !== 'dead') throw new UsageError(`inbox retention deletes only processed or dead rows, not ${p.state}`);
  return {
    text: `DELETE TOP (@p_limit) FROM ${names.inbox} WHERE state = @p_state AND created_at < ${dbNowPlusMs('-@p_older_than_ms')};`,
    params: [param('p_limit', sql.Int, p.limit), param('p_state', sql.NVarChar(50), p.state), param('p_older_than_ms', sql.BigInt, Math.round(p.olderThanMs))],
  };
}
export async function inboxDeleteFinished(runner: MssqlRunner, names: MssqlNames, p: DeleteFinishedParams): Promise<number> {
  const result = await runStatement(runner, buildInboxDeleteFinished(names, p));
  return result.rowsAffected.reduce((a, b) => a + b, 0);
}
