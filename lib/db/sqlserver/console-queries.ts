/**
 * SQL Server reads of the operator console (driver methods `outboxStatsByState`,
 * `outboxBlockedKeys`, `inboxDeadSearch`…), as pure statement builders plus runners.
 *
 * The same bounds as on PostgreSQL: counts stop at `@p_cap` (`COUNT(*)` over a `TOP`), candidate
 * rows come from the filtered indexes of the claim path, `TOP (@p_scan)` each, and head checks
 * probe the key-head indexes.
 */
import { mssql } from './mssql-module.ts';
import { deadGroupQuery } from '../dead-groups.ts';
import { PULL_AGE_SOURCE_LIMIT, type ConsoleBlockedHead, type ConsoleClaim, type ConsoleDeadGroupQuery, type ConsoleDeadGroups, type ConsoleDeadPage, type ConsoleDeadQuery, type ConsoleRow, type ConsoleStateCounts } from '../driver.ts';
import { lowerUuid, param, runStatement, type MssqlRunner, type MssqlStatement } from './mssql-pool.ts';
import { KEY_COLLATION } from './migration-ddl.ts';
import type { MssqlNames } from './names.ts';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const NOW = 'DECLARE @v_now DATETIME2(7) = SYSUTCDATETIME();';
const capped = (table: string, where: string) => `(SELECT COUNT(*) FROM (SELECT TOP (@p_cap) 1 AS x FROM ${table} WHERE ${where}) c)`;
const within = (column: string, unit: 'hour' | 'minute') => `${column} > DATEADD(${unit}, ${unit === 'hour' && column === 'created_at' ? -2 : -1}, @v_now)`;

type Counts = Record<string, number | string | null>;
const toCounts = (row: Counts, names: readonly string[], prefix = '') => Object.fromEntries(names.map((s) => [s, Number(row[`${prefix}${s}`] ?? 0)]));

/**
 * T-SQL setting `@v_pull_oldest` to the earliest `scheduled_at` of the due pending pull rows of the
 * inbox `t` (NULL when none): their open rows are indexed per source (`…_pull_open_idx`), so the
 * sources with open pull rows are visited one after another, each by one seek for the next source
 * and one for its earliest pending row (it steps over the source's rows in flight), not by a read
 * of every open row; at most `PULL_AGE_SOURCE_LIMIT`, the first by name. A source is visited once
 * per value its collation tells apart; its probe reads the rows of every spelling that collation
 * takes as equal.
 */
function pullOldest(t: string): string {
  const open = `state IN (N'pending', N'processing') AND consumption = N'pull'`;
  return `DECLARE @v_pull_oldest DATETIME2(7);
DECLARE @v_pull_due DATETIME2(7);
DECLARE @v_pull_sources INT = 0;
DECLARE @v_pull_source NVARCHAR(255) = (SELECT MIN(source) FROM ${t} WHERE ${open});
WHILE @v_pull_source IS NOT NULL AND @v_pull_sources < ${PULL_AGE_SOURCE_LIMIT}
BEGIN
  SET @v_pull_due = (SELECT MIN(scheduled_at) FROM ${t} WHERE source = @v_pull_source AND ${open} AND state = N'pending' AND scheduled_at <= @v_now);
  IF @v_pull_due < @v_pull_oldest OR @v_pull_oldest IS NULL SET @v_pull_oldest = @v_pull_due;
  SET @v_pull_sources = @v_pull_sources + 1;
  SET @v_pull_source = (SELECT MIN(source) FROM ${t} WHERE ${open} AND source > @v_pull_source);
END;`;
}

/** Capped counts per state, oldest due pending age (ms), finished rows in the last hour and minute. */
export function buildStatsByState(names: MssqlNames, table: 'outbox' | 'inbox', cap: number): MssqlStatement {
  const t = names[table];
  const outbox = table === 'outbox';
  const finished = outbox ? 'sent' : 'processed';
  // The inbox indexes finished rows by created_at: the window's rows are those received within two hours.
  const recent = (state: string, unit: 'hour' | 'minute') =>
    capped(t, `state = N'${state}' AND ${outbox ? '' : `${within('created_at', 'hour')} AND `}${within('updated_at', unit)}`);
  const pending = outbox
    ? capped(t, `state = N'pending'`)
    : `(SELECT COUNT(*) FROM (SELECT TOP (@p_cap) x FROM (
         SELECT x FROM (SELECT TOP (@p_cap) 1 AS x FROM ${t} WHERE state = N'pending' AND consumption = N'push') a
         UNION ALL SELECT x FROM (SELECT TOP (@p_cap) 1 AS x FROM ${t} WHERE state = N'pending' AND consumption = N'pull') b) u) c)`;
  // The oldest due pending row: the outbox's, or the earlier of the inbox's push rows' (their
  // pending index) and its pull rows' (`pullOldest`: a loose scan of the sources).
  const due = `(SELECT MIN(scheduled_at) FROM ${t} WHERE state = N'pending'${outbox ? '' : ` AND consumption = N'push'`} AND scheduled_at <= @v_now)`;
  const oldest = outbox ? due : '@v_oldest';
  const inboxOldest = `
${pullOldest(t)}
DECLARE @v_oldest DATETIME2(7) = ${due};
IF @v_pull_oldest < @v_oldest OR @v_oldest IS NULL SET @v_oldest = @v_pull_oldest;`;
  return {
    text: `${NOW}${outbox ? '' : inboxOldest}
SELECT ${pending} AS pending, ${capped(t, `state = N'processing'`)} AS processing,
       ${capped(t, `state = N'${finished}'`)} AS ${finished}, ${capped(t, `state = N'dead'`)} AS dead,
       DATEDIFF_BIG(millisecond, ${oldest}, @v_now) AS oldest_ms,
       ${recent(finished, 'hour')} AS h_${finished}, ${recent('dead', 'hour')} AS h_dead,
       ${recent(finished, 'minute')} AS m_${finished}, ${recent('dead', 'minute')} AS m_dead;`,
    params: [param('p_cap', mssql().Int, cap)],
  };
}

async function statsByState(runner: MssqlRunner, names: MssqlNames, table: 'outbox' | 'inbox', cap: number): Promise<ConsoleStateCounts> {
  const { recordset } = await runStatement<Counts>(runner, buildStatsByState(names, table, cap));
  const r = recordset[0]!;
  const finished = table === 'outbox' ? 'sent' : 'processed';
  return {
    counts: toCounts(r, ['pending', 'processing', finished, 'dead']),
    countCap: cap,
    oldestPendingAgeSeconds: Math.max(0, Number(r.oldest_ms ?? 0) / 1000),
    finishedLastHour: toCounts(r, [finished, 'dead'], 'h_'),
    finishedLastMinute: toCounts(r, [finished, 'dead'], 'm_'),
  };
}

/** Outbox: capped rows per state, oldest due pending age, sent/dead in the last hour and minute. */
export const outboxStatsByState = (runner: MssqlRunner, names: MssqlNames, p: { countCap: number }) => statsByState(runner, names, 'outbox', p.countCap);
/** Inbox: as the outbox; the windows count rows received within two hours. */
export const inboxStatsByState = (runner: MssqlRunner, names: MssqlNames, p: { countCap: number }) => statsByState(runner, names, 'inbox', p.countCap);

const LABELS = {
  outbox: { label: 'topic', key: '[key]', maxAttempts: 'r.max_attempts' },
  inbox: { label: 'source', key: 'aggregate_id', maxAttempts: 'CAST(NULL AS INT)' },
} as const;

/** `processing` rows, soonest lease expiry first. */
export function buildClaimsInFlight(names: MssqlNames, table: 'outbox' | 'inbox', limit: number): MssqlStatement {
  const l = LABELS[table];
  return {
    text: `${NOW}
SELECT TOP (@p_limit) id, ${l.label} AS label, ${l.key} AS [key], attempt, claimed_at, lease_expires_at,
       DATEDIFF_BIG(millisecond, @v_now, lease_expires_at) AS lease_left_ms
  FROM ${names[table]} WHERE state = N'processing' ORDER BY lease_expires_at;`,
    params: [param('p_limit', mssql().Int, limit)],
  };
}

interface ClaimDbRow {
  id: string;
  label: string;
  key: string | null;
  attempt: number;
  claimed_at: Date | null;
  lease_expires_at: Date | null;
  lease_left_ms: string | number | null;
}

const toClaim = (r: ClaimDbRow): ConsoleClaim => ({
  id: lowerUuid(r.id),
  label: r.label,
  key: r.key,
  attempt: r.attempt,
  claimedAt: r.claimed_at,
  leaseExpiresAt: r.lease_expires_at,
  leaseLeftMs: Number(r.lease_left_ms ?? 0),
});

async function claimsInFlight(runner: MssqlRunner, names: MssqlNames, table: 'outbox' | 'inbox', limit: number): Promise<ConsoleClaim[]> {
  const { recordset } = await runStatement<ClaimDbRow>(runner, buildClaimsInFlight(names, table, limit));
  return recordset.map(toClaim);
}

/** Outbox rows in `processing`, soonest lease expiry first. */
export const outboxClaimsInFlight = (runner: MssqlRunner, names: MssqlNames, p: { limit: number }) => claimsInFlight(runner, names, 'outbox', p.limit);
/** Inbox rows in `processing`, soonest lease expiry first. */
export const inboxClaimsInFlight = (runner: MssqlRunner, names: MssqlNames, p: { limit: number }) => claimsInFlight(runner, names, 'inbox', p.limit);

interface BlockedParams {
  limit: number;
  scanLimit: number;
  poisonAttempts: number;
  waitingCap: number;
}

/** Heads not moving: expired lease, retry, `@p_poison` failures, or a future schedule with rows behind. */
export function buildBlockedHeads(names: MssqlNames, table: 'outbox' | 'inbox', p: BlockedParams): MssqlStatement {
  const t = names[table];
  const l = LABELS[table];
  const top = (where: string, order = 'scheduled_at, [sequence]') => `SELECT id FROM (SELECT TOP (@p_scan) id FROM ${t} WHERE ${where} ORDER BY ${order}) s`;
  const candidates =
    table === 'outbox'
      ? [top(`state = N'pending' AND attempt > 0`), top(`state = N'pending' AND scheduled_at > @v_now`)]
      : [
          top(`state = N'pending' AND consumption = N'push' AND attempt > 0`),
          top(`state = N'pending' AND consumption = N'pull' AND attempt > 0`, 'source, scheduled_at'),
          top(`state = N'pending' AND consumption = N'push' AND scheduled_at > @v_now`),
        ];
  const open = (alias: string) =>
    table === 'outbox'
      ? `${alias}.[key] = r.[key] AND ${alias}.state IN (N'pending', N'processing')`
      : `${alias}.source = r.source AND ${alias}.aggregate_id = r.aggregate_id AND ${alias}.state IN (N'pending', N'processing') AND ${alias}.consumption = r.consumption`;
  return {
    text: `${NOW}
WITH cand AS (
  ${top(`state = N'processing' AND lease_expires_at <= @v_now`, 'lease_expires_at')}
  UNION ${candidates.join('\n  UNION ')})
SELECT TOP (@p_limit) r.id, r.${l.label} AS label, r.${l.key} AS [key], r.state, r.attempt, ${l.maxAttempts} AS max_attempts, r.scheduled_at,
       r.claimed_at, r.lease_expires_at, r.last_error, r.updated_at, w.waiting,
       DATEDIFF_BIG(millisecond, @v_now, r.scheduled_at) AS due_in_ms, DATEDIFF_BIG(millisecond, @v_now, r.lease_expires_at) AS lease_left_ms
  FROM cand JOIN ${t} r ON r.id = cand.id
 CROSS APPLY (SELECT COUNT(*) AS waiting FROM (SELECT TOP (@p_waiting) 1 AS x FROM ${t} b WHERE ${open('b')} AND b.[sequence] > r.[sequence]) c) w
 WHERE r.${l.key} <> N''
   AND (r.state = N'processing' AND r.lease_expires_at <= @v_now
        OR r.state = N'pending' AND (r.attempt >= @p_poison OR r.attempt > 0 AND r.scheduled_at > @v_now OR r.scheduled_at > @v_now AND w.waiting > 0))
   AND NOT EXISTS (SELECT 1 FROM ${t} e WHERE ${open('e')} AND e.[sequence] < r.[sequence])
 ORDER BY w.waiting DESC, r.scheduled_at, r.[sequence];`,
    params: [
      param('p_limit', mssql().Int, p.limit),
      param('p_scan', mssql().Int, p.scanLimit),
      param('p_poison', mssql().Int, p.poisonAttempts),
      param('p_waiting', mssql().Int, p.waitingCap),
    ],
  };
}

interface BlockedDbRow extends ClaimDbRow {
  state: string;
  max_attempts: number | null;
  scheduled_at: Date;
  due_in_ms: string | number;
  last_error: string | null;
  updated_at: Date;
  waiting: number;
}

async function blockedHeads(runner: MssqlRunner, names: MssqlNames, table: 'outbox' | 'inbox', p: BlockedParams): Promise<ConsoleBlockedHead[]> {
  const { recordset } = await runStatement<BlockedDbRow>(runner, buildBlockedHeads(names, table, p));
  return recordset.map((r) => ({
    ...toClaim(r),
    state: r.state,
    maxAttempts: r.max_attempts,
    scheduledAt: r.scheduled_at,
    dueInMs: Number(r.due_in_ms),
    lastError: r.last_error,
    updatedAt: r.updated_at,
    waitingBehind: Number(r.waiting),
  }));
}

/** Heads of outbox keys that are not moving, most rows waiting first. */
export const outboxBlockedKeys = (runner: MssqlRunner, names: MssqlNames, p: BlockedParams) => blockedHeads(runner, names, 'outbox', p);
/** Heads of inbox aggregates (per source and aggregate, as the claims order them) that are not moving. */
export const inboxBlockedAggregates = (runner: MssqlRunner, names: MssqlNames, p: BlockedParams) => blockedHeads(runner, names, 'inbox', p);

const COLUMNS = {
  outbox: `r.id, r.topic AS label, r.[key] AS [key], r.state, r.attempt, r.max_attempts, r.payload, r.headers, r.[sequence], r.scheduled_at, r.created_at,
  r.updated_at, r.claimed_at, r.lease_expires_at, r.last_error, r.replay_count, r.trace_context`,
  inbox: `r.id, r.source AS label, r.aggregate_id AS [key], r.state, r.attempt, r.payload, r.headers, r.[sequence], r.scheduled_at, r.created_at,
  r.updated_at, r.claimed_at, r.lease_expires_at, r.last_error, r.processed_at, r.idempotency_key, r.event_type, r.correlation_id, r.consumption, r.trace_context`,
} as const;

interface RowDbRow {
  id: string;
  label: string;
  key: string | null;
  state: string;
  attempt: number;
  max_attempts?: number;
  payload: string;
  headers: string;
  sequence: string | number;
  scheduled_at: Date;
  created_at: Date;
  updated_at: Date;
  claimed_at: Date | null;
  lease_expires_at: Date | null;
  last_error: string | null;
  replay_count?: number;
  processed_at?: Date | null;
  idempotency_key?: string;
  event_type?: string | null;
  correlation_id?: string | null;
  consumption?: string;
  trace_context: string | null;
}

function toRow(r: RowDbRow, table: 'outbox' | 'inbox'): ConsoleRow {
  return {
    id: lowerUuid(r.id),
    label: r.label,
    key: r.key,
    state: r.state,
    attempt: r.attempt,
    maxAttempts: r.max_attempts ?? null,
    payload: JSON.parse(r.payload) as unknown,
    headers: JSON.parse(r.headers) as Record<string, string>,
    sequence: String(r.sequence),
    scheduledAt: r.scheduled_at,
    createdAt: r.created_at,
    updatedAt: r.updated_at,
    claimedAt: r.claimed_at,
    leaseExpiresAt: r.lease_expires_at,
    lastError: r.last_error,
    replayCount: r.replay_count ?? null,
    processedAt: r.processed_at ?? null,
    details:
      table === 'outbox'
        ? {}
        : { 'idempotency key': r.idempotency_key ?? null, 'event type': r.event_type ?? null, 'correlation id': r.correlation_id ?? null, consumption: r.consumption ?? null },
    traceContext: r.trace_context ?? null,
  };
}

/** One row by id, every column the console shows. */
export function buildRowGet(names: MssqlNames, table: 'outbox' | 'inbox', id: string): MssqlStatement {
  return { text: `SELECT ${COLUMNS[table]} FROM ${names[table]} r WHERE r.id = @p_id;`, params: [param('p_id', mssql().UniqueIdentifier, id)] };
}

async function rowGet(runner: MssqlRunner, names: MssqlNames, table: 'outbox' | 'inbox', id: string): Promise<ConsoleRow | undefined> {
  if (!UUID.test(id)) return undefined;
  const { recordset } = await runStatement<RowDbRow>(runner, buildRowGet(names, table, id));
  return recordset[0] ? toRow(recordset[0], table) : undefined;
}

/** One outbox row by id (undefined when absent or not a UUID). */
export const outboxRowGet = (runner: MssqlRunner, names: MssqlNames, p: { id: string }) => rowGet(runner, names, 'outbox', p.id);
/** One inbox row by id (undefined when absent or not a UUID). */
export const inboxRowGet = (runner: MssqlRunner, names: MssqlNames, p: { id: string }) => rowGet(runner, names, 'inbox', p.id);

/**
 * Dead rows newest first, keyset-paged as on PostgreSQL: at most `@p_scan` dead rows of the time
 * range after the cursor (id, label and time only), those of exactly the label (binary, by byte
 * length: the default collation may ignore case), the first `@p_limit + 1`
 * by (time, id) descending, and the full rows — payload included — of the first `@p_limit` only.
 * The cursor's time travels as ISO-8601 text with all seven fractional digits (style 126).
 */
export function buildDeadSearch(names: MssqlNames, table: 'outbox' | 'inbox', q: ConsoleDeadQuery): MssqlStatement {
  const time = table === 'outbox' ? 'updated_at' : 'created_at';
  return {
    text: `DECLARE @v_before DATETIME2(7) = CONVERT(DATETIME2(7), @p_before_at, 126);
WITH scan AS (
  SELECT TOP (@p_scan) id, ${LABELS[table].label} AS label, ${time} AS t FROM ${names[table]}
   WHERE state = N'dead' AND (@p_from IS NULL OR ${time} >= @p_from) AND (@p_to IS NULL OR ${time} < @p_to)
     AND (@v_before IS NULL OR ${time} < @v_before OR ${time} = @v_before AND id < @p_before_id)
   ORDER BY ${time} DESC, id DESC),
hit AS (SELECT TOP (@p_limit + 1) id, t FROM scan
         WHERE @p_label IS NULL OR label COLLATE ${KEY_COLLATION} = @p_label AND DATALENGTH(label) = DATALENGTH(@p_label)
         ORDER BY t DESC, id DESC)
SELECT (SELECT COUNT(*) FROM scan) AS scanned, (SELECT COUNT(*) FROM hit) AS found, p.* FROM (SELECT 1 AS one) one
OUTER APPLY (SELECT ${COLUMNS[table]}, CONVERT(VARCHAR(27), r.${time}, 126) + 'Z' AS at FROM ${names[table]} r
              WHERE r.id IN (SELECT TOP (@p_limit) id FROM hit ORDER BY t DESC, id DESC)) p
ORDER BY p.${time} DESC, p.id DESC;`,
    params: [
      param('p_scan', mssql().Int, q.scanLimit),
      param('p_from', mssql().DateTime2(7), q.from ?? null),
      param('p_to', mssql().DateTime2(7), q.to ?? null),
      param('p_label', mssql().NVarChar(255), q.label ?? null),
      param('p_limit', mssql().Int, q.limit),
      param('p_before_at', mssql().VarChar(30), q.before ? q.before.at.replace(/Z$/, '') : null),
      param('p_before_id', mssql().UniqueIdentifier, q.before?.id ?? null),
    ],
  };
}

async function deadSearch(runner: MssqlRunner, names: MssqlNames, table: 'outbox' | 'inbox', q: ConsoleDeadQuery): Promise<ConsoleDeadPage> {
  if (q.before && !UUID.test(q.before.id)) return { rows: [], more: false, scanCapped: false };
  const { recordset } = await runStatement<RowDbRow & { scanned: number; found: number; at: string }>(runner, buildDeadSearch(names, table, q));
  const shown = recordset.filter((r) => r.id !== null);
  const more = Number(recordset[0]?.found ?? 0) > q.limit;
  const last = shown.at(-1);
  return {
    rows: shown.map((r) => toRow(r, table)),
    more,
    scanCapped: Number(recordset[0]?.scanned ?? 0) >= q.scanLimit,
    ...(more && last ? { next: { at: last.at, id: lowerUuid(last.id) } } : {}),
  };
}

/** Dead outbox rows by `updated_at`, optionally of one topic. */
export const outboxDeadSearch = (runner: MssqlRunner, names: MssqlNames, q: ConsoleDeadQuery) => deadSearch(runner, names, 'outbox', q);
/** Dead inbox rows by `created_at`, optionally of one source. */
export const inboxDeadSearch = (runner: MssqlRunner, names: MssqlNames, q: ConsoleDeadQuery) => deadSearch(runner, names, 'inbox', q);

/**
 * The newest `@p_scan` dead rows through the finished-rows index, grouped by the exact label
 * (binary and by byte length, as a replay of the group matches it), consumption and the first `errorChars` characters of `last_error` (as `NVARCHAR(errorChars)`,
 * a checked whole number); the `@p_limit` largest groups, then the rows scanned.
 */
export function buildDeadGroups(names: MssqlNames, table: 'outbox' | 'inbox', input: ConsoleDeadGroupQuery): MssqlStatement {
  const q = deadGroupQuery(input);
  const outbox = table === 'outbox';
  const time = outbox ? 'updated_at' : 'created_at';
  return {
    text: `WITH scan AS (
  SELECT TOP (@p_scan) ${outbox ? 'topic' : 'source'} COLLATE ${KEY_COLLATION} AS label, DATALENGTH(${outbox ? 'topic' : 'source'}) AS label_bytes,
         ${outbox ? 'CAST(NULL AS NVARCHAR(10))' : 'consumption'} AS consumption,
         CAST(LEFT(last_error, ${q.errorChars}) AS NVARCHAR(${q.errorChars})) COLLATE ${KEY_COLLATION} AS error, ${time} AS t
    FROM ${names[table]} WHERE state = N'dead' ORDER BY ${time} DESC)
SELECT TOP (@p_limit) label, consumption, error, COUNT(*) AS n, MAX(t) AS latest FROM scan
 GROUP BY label, label_bytes, consumption, error ORDER BY COUNT(*) DESC, MAX(t) DESC, label;
SELECT COUNT(*) AS scanned FROM (SELECT TOP (@p_scan) 1 AS x FROM ${names[table]} WHERE state = N'dead') c;`,
    params: [param('p_scan', mssql().Int, q.scanLimit), param('p_limit', mssql().Int, q.limit)],
  };
}

async function deadGroups(runner: MssqlRunner, names: MssqlNames, table: 'outbox' | 'inbox', q: ConsoleDeadGroupQuery): Promise<ConsoleDeadGroups> {
  const result = await runStatement<unknown>(runner, buildDeadGroups(names, table, q));
  type Group = { label: string; consumption: 'push' | 'pull' | null; error: string | null; n: number; latest: Date };
  const sets = result.recordsets as unknown as [Group[], Array<{ scanned: number }>];
  const scanned = Number(sets[1][0]?.scanned ?? 0);
  return { groups: sets[0].map((r) => ({ label: r.label, consumption: r.consumption, error: r.error, count: Number(r.n), latest: r.latest })), scanned, scanCapped: scanned >= q.scanLimit };
}

/** Dead outbox rows grouped by topic and error start. */
export const outboxDeadGroups = (runner: MssqlRunner, names: MssqlNames, q: ConsoleDeadGroupQuery) => deadGroups(runner, names, 'outbox', q);
/** Dead inbox rows grouped by source, consumption and error start. */
export const inboxDeadGroups = (runner: MssqlRunner, names: MssqlNames, q: ConsoleDeadGroupQuery) => deadGroups(runner, names, 'inbox', q);
