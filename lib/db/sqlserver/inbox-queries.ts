/**
 * SQL Server inbox operations (driver methods `inbox*` except the relay claim, in
 * `inbox-claim.ts`), as statement builders plus runners.
 *
 * Deduplication is the unique index on `(source, idempotency_key)` plus their byte lengths: the
 * columns use a binary collation (case-exact), and the lengths make it trailing-space-exact too
 * (SQL Server's `=` ignores trailing spaces). The relay only ever touches `consumption = 'push'` rows.
 */
import { randomUUID } from 'node:crypto';
import type sql from 'mssql';
import { mssql } from './mssql-module.ts';
import { gaugeGateName, SKIPPED_STATS, type ClaimRef, type DeadItem, type DeadRowSummary, type DeleteFinishedParams, type InboxForwardItem, type InboxInsertResult, type InboxMessageInput, type ReclaimResult, type RetryItem, type StatsScope, type TableStats } from '../driver.ts';
import { PayloadRejectedError, UsageError, ValidationError } from '../../errors.ts';
import { copyKeepingPayloadLazy } from '../lazy-payload.ts';
import { buildFencedBatch, runFencedBatch } from './fenced-batch.ts';
import { buildDeleteFinished, buildGatedReclaim, gatedRead, reclaimUpdateSql, runDeleteFinished, runGatedReclaim } from './maintenance-queries.ts';
import { dbNowPlusMs, lowerUuid, msValue, mssqlTransaction, param, retryDeadlocks, runStatement, type MssqlRunner, type MssqlStatement } from './mssql-pool.ts';
import { KEY_COLLATION } from './migration-ddl.ts';
import type { MssqlNames } from './names.ts';
import { exactlyOneOf, outboxInsert } from './outbox-queries.ts';
import { sqlServerRelayOutboxKey } from './caller-statements.ts';
import { buildStats, runStats } from './table-stats.ts';
import { serializeTraceContext } from '../../observability/trace-context.ts';

/** The exact `(source, idempotency_key)` of the call: binary-collated `=` plus equal byte lengths. */
const SAME_KEY = `source = @p_source AND idempotency_key = @p_idempotency_key
   AND source_bytes = DATALENGTH(@p_source) AND idempotency_key_bytes = DATALENGTH(@p_idempotency_key)`;

/**
 * Stores a message once per `(source, idempotency_key)` without raising an error on a duplicate
 * (an error would doom a caller transaction running with XACT_ABORT ON): the INSERT runs only when
 * no row of the key exists, checked under UPDLOCK/HOLDLOCK (a key-range lock), then the row of the
 * key is read back; it is new when it carries the id this call chose.
 *
 * The payload must be one JSON value, as PostgreSQL's `jsonb` requires: the table's check accepts
 * a payload whose `[…]` wrapping is JSON (so `1,2` passed); one whose `{"v":…}` wrapping is JSON
 * too is exactly one value (`{"v":1,2}` is not JSON). Checked before the insert (error 51003),
 * after `inboxInsert` checked it in TypeScript.
 */
export function buildInboxInsert(names: MssqlNames, m: InboxMessageInput, id: string): MssqlStatement {
  const dead = m.deadReason !== undefined;
  return {
    text: `IF ISJSON(CONCAT(N'[', @p_payload, N']')) = 0 OR ISJSON(CONCAT(N'{"v":', @p_payload, N'}')) = 0
  THROW ${PAYLOAD_NOT_ONE_VALUE}, N'queuebox: the inbox payload is not one JSON value', 1;
INSERT INTO ${names.inbox} (id, source, idempotency_key, aggregate_id, event_type, payload, headers, correlation_id,
                   consumption, state, last_error, scheduled_at, created_at, updated_at, trace_context)
SELECT @p_id, @p_source, @p_idempotency_key, @p_aggregate_id, @p_event_type, @p_payload, @p_headers, @p_correlation_id,
       @p_consumption, @p_state, @p_last_error, ${dbNowPlusMs('@p_delay_ms')}, SYSUTCDATETIME(), SYSUTCDATETIME(), @p_trace_context
 WHERE NOT EXISTS (SELECT 1 FROM ${names.inbox} WITH (UPDLOCK, HOLDLOCK) WHERE ${SAME_KEY});
SELECT id, CAST(CASE WHEN id = @p_id THEN 0 ELSE 1 END AS BIT) AS duplicate
  FROM ${names.inbox} WHERE ${SAME_KEY};`,
    params: [
      param('p_id', mssql().UniqueIdentifier, id),
      param('p_source', mssql().NVarChar(255), m.source),
      param('p_idempotency_key', mssql().NVarChar(255), m.idempotencyKey),
      param('p_aggregate_id', mssql().NVarChar(255), m.aggregateId ?? null),
      param('p_event_type', mssql().NVarChar(255), m.eventType ?? null),
      param('p_payload', mssql().NVarChar(mssql().MAX), m.payloadText ?? JSON.stringify(m.payload ?? null)),
      param('p_headers', mssql().NVarChar(mssql().MAX), JSON.stringify(m.headers ?? {})),
      param('p_correlation_id', mssql().NVarChar(128), m.correlationId ?? null),
      param('p_consumption', mssql().NVarChar(10), m.consumption),
      param('p_state', mssql().NVarChar(50), dead ? 'dead' : 'pending'),
      param('p_last_error', mssql().NVarChar(mssql().MAX), dead ? m.deadReason : null),
      param('p_delay_ms', mssql().BigInt, msValue('delayMs', m.delayMs ?? 0, true)),
      param('p_trace_context', mssql().NVarChar(1024), serializeTraceContext(m.trace)),
    ],
  };
}

/** Error number the inbox insert `THROW`s for a payload that is not one JSON value. */
export const PAYLOAD_NOT_ONE_VALUE = 51003;

/** How often an insert runs again when retention deleted the duplicate row between its two statements. */
const INSERT_ATTEMPTS = 3;

/** The inbox's text columns and their lengths in UTF-16 code units, as `NVARCHAR(n)` counts them. */
const TEXT_LIMITS = [
  ['source', 255],
  ['idempotencyKey', 255],
  ['aggregateId', 255],
  ['eventType', 255],
  ['correlationId', 128],
] as const;

/**
 * Refuses, before any round trip, what the insert could never store: a text longer than its
 * column in UTF-16 code units (an emoji counts 2; PostgreSQL's varchar counts it 1), and a
 * `payloadText` that is not one JSON value. Errors name the field and the message's key.
 */
export function checkInboxMessage(m: InboxMessageInput): void {
  const key = `${m.source.slice(0, 64)}/${m.idempotencyKey.slice(0, 64)}`;
  for (const [field, max] of TEXT_LIMITS) {
    const value = m[field];
    if (typeof value === 'string' && value.length > max) {
      throw new ValidationError(`message.${field}`, `must be at most ${max} UTF-16 code units on SQL Server (got ${value.length}; a character outside the Basic Multilingual Plane counts 2) — inbox message ${key}`);
    }
  }
  if (m.payloadText !== undefined) {
    try {
      JSON.parse(m.payloadText);
    } catch (error) {
      throw new ValidationError('message.payloadText', `must be one JSON value (${(error as Error).message}) — inbox message ${key}`);
    }
  }
}

/**
 * Stores the message, or finds the row of its key. Retention may delete that row (a finished one)
 * between the INSERT's check and the read-back; the insert then runs again and stores the message.
 * On QueueBox's own connection a deadlock victim, a statement refused for a leftover transaction
 * and a statement on a socket found dead after a freeze run again too.
 *
 * The id is chosen once, for every attempt: an attempt whose INSERT committed (it autocommits on
 * the pool) and whose read-back then failed — chosen as deadlock victim, or its answer lost with
 * the connection — leaves a row with this id, and the next attempt reads it back as its own
 * (`stored`), not as someone else's (`duplicate`).
 */
export async function inboxInsert(runner: MssqlRunner, names: MssqlNames, m: InboxMessageInput): Promise<InboxInsertResult> {
  checkInboxMessage(m);
  const statement = buildInboxInsert(names, m, randomUUID());
  const attempt = async () => (await runStatement<{ id: string; duplicate: boolean }>(runner, statement).catch(payloadRefused)).recordset[0];
  for (let i = 0; i < INSERT_ATTEMPTS; i += 1) {
    const row = runner instanceof mssql().ConnectionPool ? await retryDeadlocks(attempt) : await attempt();
    if (row) return { id: lowerUuid(row.id), duplicate: row.duplicate };
  }
  throw new UsageError(`inbox insert of ${m.source}/${m.idempotencyKey} neither inserted nor found a row after ${INSERT_ATTEMPTS} attempts`);
}

/** The insert's one-JSON-value check (`THROW 51003`) as `PayloadRejectedError`; other errors pass through. */
function payloadRefused(error: unknown): never {
  if ((error as { number?: unknown } | null)?.number === PAYLOAD_NOT_ONE_VALUE) {
    throw new PayloadRejectedError(`the database refused the message's JSON: ${(error as Error).message}`, String(PAYLOAD_NOT_ONE_VALUE), { cause: error });
  }
  throw error;
}

export async function inboxRenewMany(runner: MssqlRunner, names: MssqlNames, p: { claims: ClaimRef[]; leaseMs: number }): Promise<string[]> {
  return p.claims.length === 0 ? [] : runFencedBatch(runner, buildFencedBatch(names.inbox, 'renew', p.claims, { leaseMs: p.leaseMs }));
}

/** Marks the lost claim inside `inboxForward` so its transaction rolls back. */
class ForwardClaimLost extends Error {}

/** The `x-source` header of an outbox row: the source the relay forwarded it from. */
const X_SOURCE = `JSON_VALUE(headers, '$."x-source"')`;

/**
 * Whether an open (`pending`/`processing`) outbox row relayed from `source` (header `x-source`)
 * has `key` — the relay's key of the aggregate under the other `inbox.relay.outboxKey` form —
 * one row (`held`) when it does. Both compare exactly: binary collation, and equal byte lengths
 * (SQL Server's `=` ignores trailing spaces). `READCOMMITTEDLOCK` reads committed rows with
 * shared locks under either RCSI setting, so a row being written is waited for, not missed.
 */
export function buildOpenRelayedKeyProbe(names: Pick<MssqlNames, 'outbox'>, keyWhileOpen: { key: string; source: string }): MssqlStatement {
  return {
    text: `SELECT TOP (1) 1 AS held FROM ${names.outbox} WITH (READCOMMITTEDLOCK)
 WHERE [key] = @p_key AND [key] IS NOT NULL AND DATALENGTH([key]) = DATALENGTH(@p_key)
   AND state IN (N'pending', N'processing')
   AND ${X_SOURCE} COLLATE ${KEY_COLLATION} = @p_source AND DATALENGTH(${X_SOURCE}) = DATALENGTH(@p_source);`,
    params: [param('p_key', mssql().NVarChar(255), keyWhileOpen.key), param('p_source', mssql().NVarChar(255), keyWhileOpen.source)],
  };
}

/**
 * One transaction: insert the outbox row — with `keyWhileOpen.key` instead of its key while an
 * open row relayed from that source has it (`buildOpenRelayedKeyProbe`), so an aggregate's rows
 * keep one key, and their order, across a change of `inbox.relay.outboxKey`; a key of spaces only
 * as NULL (`sqlServerRelayOutboxKey`) — then the fenced
 * mark `processed`. When the mark changes no row the claim was lost: the transaction rolls back
 * (no outbox row) and the result is false.
 */
export async function inboxForward(pool: sql.ConnectionPool, names: MssqlNames, item: InboxForwardItem, defaults: { maxAttempts: number }): Promise<boolean> {
  try {
    // A deadlock victim's transaction was rolled back whole: running it again is safe.
    await retryDeadlocks(() =>
      mssqlTransaction(pool, async (tx) => {
        let message = item.outbox;
        if (item.keyWhileOpen !== undefined) {
          const { recordset } = await runStatement<{ held: number }>(tx, buildOpenRelayedKeyProbe(names, item.keyWhileOpen));
          if (recordset.length > 0) message = copyKeepingPayloadLazy(message, { key: item.keyWhileOpen.key });
        }
        // Copies that leave the relay's lazy payload unparsed: the text is what is written.
        message = copyKeepingPayloadLazy(message, { key: sqlServerRelayOutboxKey(message.key) });
        await outboxInsert(names, tx, message, defaults);
        const changed = await runFencedBatch(tx, buildFencedBatch(names.inbox, 'processed', [item]));
        if (changed.length !== 1) throw new ForwardClaimLost();
      }),
    );
    return true;
  } catch (error) {
    if (error instanceof ForwardClaimLost) return false;
    throw error;
  }
}

export async function inboxRetryMany(runner: MssqlRunner, names: MssqlNames, p: { items: RetryItem[] }): Promise<string[]> {
  return p.items.length === 0 ? [] : runFencedBatch(runner, buildFencedBatch(names.inbox, 'retry', p.items));
}
/** Fenced: claimed push rows the relay wrote nothing for back to `pending`, attempt unchanged. */
export async function inboxReleaseMany(runner: MssqlRunner, names: MssqlNames, p: { claims: ClaimRef[] }): Promise<string[]> {
  return p.claims.length === 0 ? [] : runFencedBatch(runner, buildFencedBatch(names.inbox, 'release', p.claims));
}

export async function inboxMarkDeadMany(runner: MssqlRunner, names: MssqlNames, p: { items: DeadItem[] }): Promise<string[]> {
  return p.items.length === 0 ? [] : runFencedBatch(runner, buildFencedBatch(names.inbox, 'dead', p.items));
}

/**
 * Expired `processing` push rows back to `pending` with `attempt + 1`, or `dead` when the lost
 * forward was the last of the relay's `maxAttempts`; pull rows are left to the pull claim.
 */
export function buildInboxReclaim(names: MssqlNames, throttleMs: number | undefined, maxAttempts: number): MssqlStatement {
  return buildGatedReclaim(
    names,
    `reclaim:${names.inboxTable}`,
    throttleMs,
    reclaimUpdateSql(names.inbox, { maxAttempts: '@p_max_attempts', call: 'forward' }, ` AND consumption = N'push'`),
    [param('p_max_attempts', mssql().Int, maxAttempts)],
  );
}
export async function inboxReclaimExpired(runner: MssqlRunner, names: MssqlNames, p: { throttleMs?: number; maxAttempts: number }): Promise<ReclaimResult> {
  return runGatedReclaim(runner, buildInboxReclaim(names, p.throttleMs, p.maxAttempts));
}

export async function inboxStats(runner: MssqlRunner, names: MssqlNames, scope: StatsScope = {}): Promise<TableStats> {
  const read = () => runStats(runner, buildStats(names.inbox, ` AND consumption = N'push'`, scope), scope.pendingOnly === true ? ['pending'] : ['pending', 'processing', 'processed', 'dead']);
  if (scope.onceEveryMs === undefined) return read();
  return (await gatedRead(runner, names, gaugeGateName(names.inboxTable), scope.onceEveryMs, read)) ?? SKIPPED_STATS;
}

export function buildInboxDeadList(names: MssqlNames, limit: number): MssqlStatement {
  return {
    text: `SELECT TOP (@p_limit) id, source, last_error, updated_at FROM ${names.inbox} WHERE state = N'dead' ORDER BY updated_at DESC;`,
    params: [param('p_limit', mssql().Int, limit)],
  };
}
export async function inboxDeadList(runner: MssqlRunner, names: MssqlNames, p: { limit: number }): Promise<DeadRowSummary[]> {
  const { recordset } = await runStatement<{ id: string; source: string; last_error: string | null; updated_at: Date }>(runner, buildInboxDeadList(names, p.limit));
  return recordset.map((r) => ({ id: lowerUuid(r.id), topicOrSource: r.source, lastError: r.last_error, updatedAt: r.updated_at }));
}

/**
 * Deletes at most `limit` `processed` or `dead` rows created more than `olderThanMs` ago; rows of
 * the `keep` sources only once also older than `keep.olderThanMs` (their keys answer replays).
 */
export function buildInboxDeleteFinished(names: MssqlNames, p: DeleteFinishedParams): MssqlStatement {
  if (p.state !== 'processed' && p.state !== 'dead') throw new UsageError(`inbox retention deletes only processed or dead rows, not ${p.state}`);
  if (p.keep === undefined || p.keep.sources.length === 0) return buildDeleteFinished(names.inbox, p.state, 'created_at', p.limit, p.olderThanMs);
  return buildDeleteFinished(names.inbox, p.state, 'created_at', p.limit, p.olderThanMs, {
    // Compared as `exactlyOneOf` compares: `source` is binary-collated, and an OPENJSON column
    // takes the database's default collation, so a plain `NOT IN` would not compile (error 468,
    // a collation conflict); `=` alone would also ignore trailing spaces.
    condition: `
     AND (NOT ${exactlyOneOf('source', 'p_keep_sources')} OR created_at < ${dbNowPlusMs('-@p_keep_older_than_ms')})`,
    params: [param('p_keep_sources', mssql().NVarChar(mssql().MAX), JSON.stringify(p.keep.sources)), param('p_keep_older_than_ms', mssql().BigInt, msValue('keep.olderThanMs', p.keep.olderThanMs))],
  });
}
export async function inboxDeleteFinished(runner: MssqlRunner, names: MssqlNames, p: DeleteFinishedParams): Promise<number> {
  return runDeleteFinished(runner, buildInboxDeleteFinished(names, p));
}
