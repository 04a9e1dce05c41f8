/**
 * An inbox row as the SQL Server relay and pull claims return it, and its mapping to `InboxRow`.
 */
import type { InboxRow } from '../driver.ts';
import { withLazyPayload } from '../lazy-payload.ts';
import { lowerUuid } from './mssql-pool.ts';
import { parseStoredTraceContext } from '../../observability/trace-context.ts';

/** Columns a claim returns, in this order. */
export const INBOX_COLUMNS = [
  'id', 'source', 'idempotency_key', 'aggregate_id', 'event_type', 'payload', 'headers', 'correlation_id',
  'attempt', '[sequence]', 'scheduled_at', 'created_at', 'claim_token', 'lease_expires_at', 'trace_context',
] as const;

/** The table variable a claim's UPDATE writes its rows into (`OUTPUT … INTO`), with the row's claim priority. */
export const DECLARE_INBOX_CLAIMED = `DECLARE @v_claimed TABLE (id UNIQUEIDENTIFIER NOT NULL, source NVARCHAR(255) NOT NULL, idempotency_key NVARCHAR(255) NOT NULL,
  aggregate_id NVARCHAR(255) NULL, event_type NVARCHAR(255) NULL, payload NVARCHAR(MAX) NOT NULL, headers NVARCHAR(MAX) NOT NULL,
  correlation_id NVARCHAR(128) NULL, attempt INT NOT NULL, [sequence] BIGINT NOT NULL, scheduled_at DATETIME2(7) NOT NULL,
  created_at DATETIME2(7) NOT NULL, claim_token UNIQUEIDENTIFIER NOT NULL, lease_expires_at DATETIME2(7) NOT NULL, trace_context NVARCHAR(1024) NULL,
  claim_priority INT NOT NULL);`;

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
  trace_context?: string | null;
}

/**
 * Maps a returned row: headers parsed, the payload on first read (`withLazyPayload`: the relay
 * forwards the text, and a parsed body can take many times its text's memory), UUIDs lower-case.
 */
export function toInboxRow(r: InboxDbRow): InboxRow {
  return withLazyPayload({
    id: lowerUuid(r.id),
    source: r.source,
    idempotencyKey: r.idempotency_key,
    aggregateId: r.aggregate_id,
    eventType: r.event_type,
    payloadText: r.payload,
    headers: JSON.parse(r.headers) as Record<string, string>,
    correlationId: r.correlation_id,
    attempt: r.attempt,
    createdAt: r.created_at,
    claimToken: lowerUuid(r.claim_token),
    leaseExpiresAt: r.lease_expires_at,
    trace: parseStoredTraceContext(r.trace_context),
  });
}
