/**
 * SQL Server outbox operations (driver methods `outbox*`), as statement builders plus runners.
 *
 * Builders are pure (text + parameters), so tests inspect the SQL without a server. Every
 * finishing write is fenced on id + `processing` + token + `lease_expires_at > SYSUTCDATETIME()`
 * and settles a whole batch in one statement via `OPENJSON(@p_items)`.
 */
import { randomUUID } from 'node:crypto';
import { mssql } from './mssql-module.ts';
import { gaugeGateName, SKIPPED_STATS, type ClaimRef, type DeadItem, type DeadRowSummary, type DeleteFinishedParams, type OutboxMessageInput, type ReclaimResult, type ReplayFilter, type RetryItem, type StatsScope, type TableStats } from '../driver.ts';
import { QueueBoxError, ReplayLimitError, UsageError } from '../../errors.ts';
import { replayMaxRows } from '../replay-bound.ts';
import { compileTopicPattern } from '../../config/topic-pattern.ts';
import { buildFencedBatch, runFencedBatch } from './fenced-batch.ts';
import { buildDeleteFinished, buildGatedReclaim, gatedRead, DELETE_CHUNK, reclaimUpdateSql, runDeleteFinished, runGatedReclaim } from './maintenance-queries.ts';
import { dbNowPlusMs, isMssqlTransaction, lowerUuid, msValue, param, runOnceOnly, runStatement, type MssqlParam, type MssqlRunner, type MssqlStatement } from './mssql-pool.ts';
import { KEY_COLLATION } from './migration-ddl.ts';
import { MSSQL_DEFAULT_SCHEMA, mssqlNames, quoteMssqlIdent, type MssqlNames } from './names.ts';
import { assertSqlServerOutboxKey } from './caller-statements.ts';
import { buildStats, runStats } from './table-stats.ts';
import { serializeTraceContext } from '../../observability/trace-context.ts';

/** INSERT of one outbox row with a caller-chosen or fresh id (known before the insert: no OUTPUT needed). */
export function buildOutboxInsert(names: Pick<MssqlNames, 'outbox'>, m: OutboxMessageInput, defaults: { maxAttempts: number }): { id: string; statement: MssqlStatement } {
  const id = m.id ?? randomUUID();
  return {
    id,
    statement: {
      text: `INSERT INTO ${names.outbox} (id, topic, [key], payload, headers, max_attempts, scheduled_at, trace_context)
VALUES (@p_id, @p_topic, @p_key, @p_payload, @p_headers, @p_max_attempts, COALESCE(@p_scheduled_at, ${dbNowPlusMs('@p_delay_ms')}), @p_trace_context);`,
      params: [
        param('p_id', mssql().UniqueIdentifier, id),
        param('p_topic', mssql().NVarChar(255), m.topic),
        param('p_key', mssql().NVarChar(255), m.key ?? null),
        param('p_payload', mssql().NVarChar(mssql().MAX), m.payloadText ?? JSON.stringify(m.payload)),
        param('p_headers', mssql().NVarChar(mssql().MAX), JSON.stringify(m.headers ?? {})),
        param('p_max_attempts', mssql().Int, m.maxAttempts ?? defaults.maxAttempts),
        param('p_scheduled_at', mssql().DateTime2(7), m.scheduledAt ?? null),
        param('p_delay_ms', mssql().BigInt, msValue('delayMs', m.delayMs ?? 0, true)),
        param('p_trace_context', mssql().NVarChar(1024), serializeTraceContext(m.trace)),
      ],
    },
  };
}

/** Inserts one outbox row through a runner (QueueBox's own transaction or the caller's). */
export async function outboxInsert(names: Pick<MssqlNames, 'outbox'>, runner: MssqlRunner, m: OutboxMessageInput, defaults: { maxAttempts: number }): Promise<string> {
  const { id, statement } = buildOutboxInsert(names, m, defaults);
  await runStatement(runner, statement);
  return id.toLowerCase();
}

/** `enqueue` on SQL Server: inserts inside the caller's `mssql` Transaction. */
export async function sqlServerOutboxInsert(names: { schema: string; table: string }, tx: unknown, m: OutboxMessageInput, defaults: { maxAttempts: number }): Promise<string> {
  if (!isMssqlTransaction(tx)) throw new QueueBoxError('expected an mssql Transaction (begun) as the caller transaction');
  assertSqlServerOutboxKey(m.key);
  const n = mssqlNames(names.schema || MSSQL_DEFAULT_SCHEMA, { outbox: names.table, inbox: 'inbox', maintenance: 'queuebox_maintenance' });
  return outboxInsert(n, tx, m, defaults);
}

export async function outboxRenewMany(runner: MssqlRunner, names: MssqlNames, p: { claims: ClaimRef[]; leaseMs: number }): Promise<string[]> {
  return p.claims.length === 0 ? [] : runFencedBatch(runner, buildFencedBatch(names.outbox, 'renew', p.claims, { leaseMs: p.leaseMs }));
}
export async function outboxMarkSentMany(runner: MssqlRunner, names: MssqlNames, p: { claims: ClaimRef[] }): Promise<string[]> {
  return p.claims.length === 0 ? [] : runFencedBatch(runner, buildFencedBatch(names.outbox, 'sent', p.claims));
}
export async function outboxRetryMany(runner: MssqlRunner, names: MssqlNames, p: { items: RetryItem[] }): Promise<string[]> {
  return p.items.length === 0 ? [] : runFencedBatch(runner, buildFencedBatch(names.outbox, 'retry', p.items));
}
/** Fenced: claimed rows no call was offered back to `pending`, attempt unchanged. */
export async function outboxReleaseMany(runner: MssqlRunner, names: MssqlNames, p: { claims: ClaimRef[] }): Promise<string[]> {
  return p.claims.length === 0 ? [] : runFencedBatch(runner, buildFencedBatch(names.outbox, 'release', p.claims));
}

export async function outboxMarkDeadMany(runner: MssqlRunner, names: MssqlNames, p: { items: DeadItem[] }): Promise<string[]> {
  return p.items.length === 0 ? [] : runFencedBatch(runner, buildFencedBatch(names.outbox, 'dead', p.items));
}

/**
 * Expired `processing` rows back to `pending` with `attempt + 1`, or `dead` when the lost delivery
 * was the row's last (`max_attempts`), behind the shared gate `reclaim:<table>`.
 */
export function buildOutboxReclaim(names: MssqlNames, throttleMs: number | undefined): MssqlStatement {
  return buildGatedReclaim(names, `reclaim:${names.outboxTable}`, throttleMs, reclaimUpdateSql(names.outbox, { maxAttempts: 'max_attempts', call: 'delivery' }));
}
export async function outboxReclaimExpired(runner: MssqlRunner, names: MssqlNames, p: { throttleMs?: number }): Promise<ReclaimResult> {
  return runGatedReclaim(runner, buildOutboxReclaim(names, p.throttleMs));
}

export async function outboxStats(runner: MssqlRunner, names: MssqlNames, scope: StatsScope = {}): Promise<TableStats> {
  const read = () => runStats(runner, buildStats(names.outbox, '', scope), scope.pendingOnly === true ? ['pending'] : ['pending', 'processing', 'sent', 'dead']);
  if (scope.onceEveryMs === undefined) return read();
  return (await gatedRead(runner, names, gaugeGateName(names.outboxTable), scope.onceEveryMs, read)) ?? SKIPPED_STATS;
}

export function buildOutboxDeadList(names: MssqlNames, limit: number): MssqlStatement {
  return {
    text: `SELECT TOP (@p_limit) id, topic, last_error, updated_at FROM ${names.outbox} WHERE state = N'dead' ORDER BY updated_at DESC;`,
    params: [param('p_limit', mssql().Int, limit)],
  };
}
export async function outboxDeadList(runner: MssqlRunner, names: MssqlNames, p: { limit: number }): Promise<DeadRowSummary[]> {
  const { recordset } = await runStatement<{ id: string; topic: string; last_error: string | null; updated_at: Date }>(runner, buildOutboxDeadList(names, p.limit));
  return recordset.map((r) => ({ id: lowerUuid(r.id), topicOrSource: r.topic, lastError: r.last_error, updatedAt: r.updated_at }));
}

/** States a replay may move; throws `UsageError` on an empty filter or another state. */
function replayStates(f: ReplayFilter): string[] {
  if (!f.ids?.length && !f.topics?.length && !f.topicPatterns?.length && !f.createdFrom && !f.createdTo && f.lastErrorPrefix === undefined && !f.asRead?.length) {
    throw new UsageError('replay needs at least one filter (ids, topics, destination, created range, last error)');
  }
  const states = f.states?.length ? f.states : ['sent', 'dead'];
  if (states.some((s) => s !== 'sent' && s !== 'dead')) throw new UsageError('replay moves only sent or dead rows');
  return states;
}

/**
 * Distinct topics of replayable rows (SQL Server has no regex: patterns are matched in the
 * caller), each spelling on its own: binary (case- and accent-exact) and by byte length (trailing
 * spaces), where the database default collation would fold `Order.Paid` into `order.paid`.
 */
export function buildOutboxReplayTopics(names: MssqlNames, states: string[]): MssqlStatement {
  return {
    text: `SELECT DISTINCT topic COLLATE ${KEY_COLLATION} AS topic, DATALENGTH(topic) AS topic_bytes
  FROM ${names.outbox} WHERE state IN (SELECT value FROM OPENJSON(@p_states) WITH (value NVARCHAR(50) '$'));`,
    params: [param('p_states', mssql().NVarChar(mssql().MAX), JSON.stringify(states))],
  };
}

/**
 * `last_error` starts with `@p_last_error_prefix`, case- and trailing-space-exact (a binary
 * comparison of the first characters, and a `last_error` at least as long as the prefix).
 */
export const LAST_ERROR_STARTS_WITH = `DATALENGTH(last_error) >= DATALENGTH(@p_last_error_prefix)
       AND LEFT(last_error, DATALENGTH(@p_last_error_prefix) / 2) COLLATE Latin1_General_100_BIN2 = @p_last_error_prefix`;

/** The parameter of `LAST_ERROR_STARTS_WITH`; an empty prefix is refused. */
export function lastErrorPrefixParam(prefix: string): MssqlParam {
  if (prefix === '') throw new UsageError('replay: lastErrorPrefix must not be empty');
  return param('p_last_error_prefix', mssql().NVarChar(mssql().MAX), prefix);
}

/**
 * Each listed row only while its `updated_at` is the one read (tedious reads DATETIME2 truncated
 * to the millisecond; DATEDIFF_BIG counts whole milliseconds).
 */
export const AS_READ = `EXISTS (SELECT 1 FROM OPENJSON(@p_as_read) WITH (r_id UNIQUEIDENTIFIER '$.id', r_ms BIGINT '$.ms')
                WHERE r_id = id AND r_ms = DATEDIFF_BIG(millisecond, CAST('1970-01-01' AS DATETIME2(7)), updated_at))`;

/** The parameter of `AS_READ`; an empty list is refused (it never widens a replay). */
export function asReadParam(asRead: NonNullable<ReplayFilter['asRead']>): MssqlParam {
  if (asRead.length === 0) throw new UsageError('replay: asRead lists no rows; nothing to move');
  return param('p_as_read', mssql().NVarChar(mssql().MAX), JSON.stringify(asRead.map((r) => ({ id: r.id, ms: Math.trunc(r.updatedAtMs) }))));
}

/** The filters an outbox replay and an inbox requeue share (created range, last error, as read), added to `where` and `params`. */
export function replayCommonConditions(
  f: Pick<ReplayFilter, 'createdFrom' | 'createdTo' | 'lastErrorPrefix' | 'asRead'>,
  where: string[],
  params: MssqlParam[],
): void {
  if (f.createdFrom) {
    where.push('created_at >= @p_created_from');
    params.push(param('p_created_from', mssql().DateTime2(7), f.createdFrom));
  }
  if (f.createdTo) {
    where.push('created_at < @p_created_to');
    params.push(param('p_created_to', mssql().DateTime2(7), f.createdTo));
  }
  if (f.lastErrorPrefix !== undefined) {
    where.push(LAST_ERROR_STARTS_WITH);
    params.push(lastErrorPrefixParam(f.lastErrorPrefix));
  }
  if (f.asRead !== undefined) {
    where.push(AS_READ);
    params.push(asReadParam(f.asRead));
  }
}

/**
 * `column` equals one of the texts of the JSON array `@<param>` exactly: compared binary (the
 * database default collation may ignore case: a replay of `order.paid` moved `Order.Paid` rows
 * too) and by byte length (`=` ignores trailing spaces under every collation).
 */
export function exactlyOneOf(column: string, paramName: string): string {
  return `EXISTS (SELECT 1 FROM OPENJSON(@${paramName}) WITH (value NVARCHAR(255) '$') AS f
                WHERE f.value = ${column} COLLATE ${KEY_COLLATION} AND DATALENGTH(f.value) = DATALENGTH(${column}))`;
}

/**
 * The table hint of a replay or preview that lists its rows (`ids`, or the console's `asRead`):
 * a seek per listed id on the primary key, not a scan of the whole table in `[sequence]` order
 * for a few rows. Empty for other filters. `table` is the unqualified table name.
 */
export function replaySeekHint(table: string, f: Pick<ReplayFilter, 'ids' | 'asRead'>): string {
  return f.ids?.length || f.asRead?.length ? `FORCESEEK (${quoteMssqlIdent(`${table}_pkey`)} (id))` : '';
}

/** `WITH (…)` of `hints` (empty ones left out). */
export function withHints(...hints: string[]): string {
  const list = hints.filter((h) => h !== '');
  return list.length === 0 ? '' : ` WITH (${list.join(', ')})`;
}

/**
 * The WHERE conditions and parameters of a replay filter, shared by the replay and its preview;
 * `matchedTopics` are the topics the route patterns matched (when patterns were given).
 */
export function replayConditions(f: ReplayFilter, matchedTopics?: string[]): { where: string[]; params: MssqlParam[] } {
  const states = replayStates(f);
  const where = [`state IN (SELECT value FROM OPENJSON(@p_states) WITH (value NVARCHAR(50) '$'))`];
  const params: MssqlParam[] = [param('p_states', mssql().NVarChar(mssql().MAX), JSON.stringify(states))];
  if (f.ids?.length) {
    where.push(`id IN (SELECT value FROM OPENJSON(@p_ids) WITH (value UNIQUEIDENTIFIER '$'))`);
    params.push(param('p_ids', mssql().NVarChar(mssql().MAX), JSON.stringify(f.ids)));
  }
  if (f.topics?.length) {
    where.push(exactlyOneOf('topic', 'p_topics'));
    params.push(param('p_topics', mssql().NVarChar(mssql().MAX), JSON.stringify(f.topics)));
  }
  if (f.topicPatterns?.length) {
    where.push(exactlyOneOf('topic', 'p_matched_topics'));
    params.push(param('p_matched_topics', mssql().NVarChar(mssql().MAX), JSON.stringify(matchedTopics ?? [])));
  }
  replayCommonConditions(f, where, params);
  return { where, params };
}

/**
 * The topics of replayable rows that the filter's route patterns match (SQL Server has no regex,
 * so patterns are matched here over the distinct topics); undefined when the filter has none.
 */
export async function replayMatchedTopics(runner: MssqlRunner, names: MssqlNames, f: ReplayFilter): Promise<string[] | undefined> {
  if (!f.topicPatterns?.length) return undefined;
  const patterns = f.topicPatterns.map(compileTopicPattern);
  const { recordset } = await runStatement<{ topic: string; topic_bytes: number }>(runner, buildOutboxReplayTopics(names, replayStates(f)));
  return recordset.map((r) => r.topic).filter((topic) => patterns.some((p) => p.test(topic)));
}

/**
 * A requeue in autocommitted chunks of `DELETE_CHUNK` rows of `table` in `[sequence]` order, each
 * chunk after the last one's highest `sequence` (shared by the outbox replay and the inbox
 * requeue); selects the rows moved as `replayed`.
 */
export function chunkedReplayText(table: string, where: string[], set: string, seekHint = ''): string {
  return `DECLARE @v_replayed INT = 0;
DECLARE @v_chunk INT = 1;
DECLARE @v_after BIGINT = 0;
DECLARE @v_moved TABLE ([sequence] BIGINT NOT NULL);
WHILE @v_chunk > 0
BEGIN
  DELETE FROM @v_moved;
  WITH chunk AS (
    SELECT TOP (${DELETE_CHUNK}) * FROM ${table}${withHints('ROWLOCK', seekHint)}
     WHERE ${where.join('\n       AND ')}
       AND [sequence] > @v_after
     ORDER BY [sequence])
  UPDATE chunk
     ${set}
  OUTPUT inserted.[sequence] INTO @v_moved ([sequence]);
  SET @v_chunk = @@ROWCOUNT;
  SET @v_replayed = @v_replayed + @v_chunk;
  SELECT @v_after = COALESCE(MAX([sequence]), @v_after) FROM @v_moved;
END;
SELECT @v_replayed AS replayed;`;
}

const REPLAY_SET = `SET state = N'pending', attempt = 0, scheduled_at = SYSUTCDATETIME(), last_error = NULL,
         claim_token = NULL, claimed_at = NULL, lease_expires_at = NULL,
         replay_count = replay_count + 1, updated_at = SYSUTCDATETIME()`;

/** The replay UPDATE; `matchedTopics` are the topics the route patterns matched (when patterns were given). */
export function buildOutboxReplay(names: MssqlNames, f: ReplayFilter, matchedTopics?: string[]): MssqlStatement {
  const { where, params } = replayConditions(f, matchedTopics);
  return { text: chunkedReplayText(names.outbox, where, REPLAY_SET, replaySeekHint(names.outboxTable, f)), params };
}

/**
 * Moves the matching `sent`/`dead` rows back to `pending` in autocommitted chunks of
 * `DELETE_CHUNK` rows in `sequence` order (a replay of thousands of rows in one UPDATE would
 * escalate to a table lock that blocks every enqueue); each chunk starts after the last one's
 * highest `sequence`, so the table is read once. A replayed row leaves the filter, so a replay
 * cut off midway is finished by running it again. Returns the rows moved.
 */
export async function outboxReplay(runner: MssqlRunner, names: MssqlNames, f: ReplayFilter): Promise<number> {
  const matched = await replayMatchedTopics(runner, names, f);
  if (matched?.length === 0) return 0;
  if (f.maxRows !== undefined) {
    const max = replayMaxRows(f.maxRows);
    const { recordset } = await runStatement<{ matched: number; replayed: number }>(runner, runOnceOnly(buildOutboxReplayBounded(names, f, max, matched)));
    if (Number(recordset[0]?.matched ?? 0) > max) throw new ReplayLimitError(max);
    return Number(recordset[0]?.replayed ?? 0);
  }
  const { recordset } = await runStatement<{ replayed: number }>(runner, runOnceOnly(buildOutboxReplay(names, f, matched)));
  return Number(recordset[0]?.replayed ?? 0);
}

/**
 * A bounded requeue of `table` in one transaction (one batch), shared by the outbox replay and the
 * inbox requeue: moves at most `max + 1` matching rows, and rolls the move back when it moved more
 * than `max`; selects `matched` (capped at `max + 1`) and `replayed`. Binds `@p_max`.
 *
 * The update itself is the count: at READ COMMITTED it holds locks on the rows it changed only
 * (a row it read and left is unlocked at once), so the requeue locks at most `max + 1` rows, as
 * PostgreSQL's does. A count under `UPDLOCK, HOLDLOCK` before it would hold a range lock on every
 * row it read, matching or not: every filter but `ids` and `asRead` scans the table, and at most
 * `max` rows match, so `TOP` never ends the scan early, and the whole table would stay locked
 * (enqueues blocked, claims finding nothing) until the requeue commits.
 */
export function boundedReplayText(table: string, where: string[], set: string, seekHint = ''): string {
  return `SET XACT_ABORT ON;
DECLARE @v_matched INT;
DECLARE @v_replayed INT = 0;
BEGIN TRANSACTION;
UPDATE TOP (@p_max + 1) ${table}${withHints('ROWLOCK', seekHint)}
   ${set}
 WHERE ${where.join('\n   AND ')};
SET @v_matched = @@ROWCOUNT;
IF @v_matched > @p_max
BEGIN
  ROLLBACK TRANSACTION;
END
ELSE
BEGIN
  SET @v_replayed = @v_matched;
  COMMIT TRANSACTION;
END;
SELECT @v_matched AS matched, @v_replayed AS replayed;`;
}

/** A bounded outbox replay (`boundedReplayText`); `matchedTopics` as for `buildOutboxReplay`. */
export function buildOutboxReplayBounded(names: MssqlNames, f: ReplayFilter, max: number, matchedTopics?: string[]): MssqlStatement {
  const { where, params } = replayConditions(f, matchedTopics);
  return { text: boundedReplayText(names.outbox, where, REPLAY_SET, replaySeekHint(names.outboxTable, f)), params: [...params, param('p_max', mssql().Int, max)] };
}

/** Deletes at most `limit` rows of one finished state older than `olderThanMs` (by `updated_at`). */
export function buildOutboxDeleteFinished(names: MssqlNames, p: DeleteFinishedParams): MssqlStatement {
  if (p.state !== 'sent' && p.state !== 'dead') throw new UsageError(`outbox retention deletes only sent or dead rows, not ${p.state}`);
  return buildDeleteFinished(names.outbox, p.state, 'updated_at', p.limit, p.olderThanMs);
}
export async function outboxDeleteFinished(runner: MssqlRunner, names: MssqlNames, p: DeleteFinishedParams): Promise<number> {
  return runDeleteFinished(runner, buildOutboxDeleteFinished(names, p));
}
