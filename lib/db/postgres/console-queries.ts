/**
 * PostgreSQL reads of the operator console (driver methods `outboxStatsByState`,
 * `outboxBlockedKeys`, `inboxDeadSearch`…).
 *
 * Every statement is bounded on any table size: counts stop at `countCap` (`count(*)` over a
 * `LIMIT`ed subquery), candidate rows are read through the partial indexes of the claim path and
 * capped at `scanLimit`, and key-head checks probe the key-head indexes. `docs/console.md` shows
 * each plan on a 1,000,000-row outbox.
 */
import { deadGroupQuery } from '../dead-groups.ts';
import type { ConsoleBlockedHead, ConsoleClaim, ConsoleDeadGroupQuery, ConsoleDeadGroups, ConsoleDeadPage, ConsoleDeadQuery, ConsoleRow, ConsoleStateCounts } from '../driver.ts';
import type { PgContext } from './context.ts';
import { pgQuery } from './pg-pool.ts';
import { oldestDueFromSql, oldestPullDueFromSql } from './table-reads.ts';
import { DATE_LIMIT_MS, epochMs, epochTime, epochTimeOrNull, spanSeconds, type EpochMs } from './epoch-time.ts';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** `count(*)` of at most `$1` rows matching `where` (an index range on the partial indexes). */
const capped = (table: string, where: string) => `(SELECT count(*) FROM (SELECT 1 FROM ${table} WHERE ${where} LIMIT $1) c)::int`;

/** SQL: the interval `expr` in seconds, an exact numeric (`spanSeconds`: no float8, whose text `extra_float_digits` rounds). */
const AGE = (expr: string) => spanSeconds(expr);

/**
 * SQL: ms from the time `now` to the timestamptz `at` (NULL when `at` is), as text: the exact
 * numeric, or `Infinity` / `-Infinity` when `at` is `infinity` or `-infinity` (plain SQL writes
 * them; subtracting one is an error); a numeric holds neither on PostgreSQL 13. Read by `finiteMs`.
 */
const MS_UNTIL = (at: string, now: string) =>
  `CASE WHEN isfinite(${at}) THEN (${AGE(`${at} - ${now}`)} * 1000)::text WHEN ${at} = 'infinity' THEN 'Infinity' WHEN ${at} = '-infinity' THEN '-Infinity' END`;

/** A `MS_UNTIL` as a number of ms: ±Infinity is the span to the latest or earliest `Date` (`epochTime`). */
const finiteMs = (ms: string | null) => Math.round(Math.max(-DATE_LIMIT_MS, Math.min(DATE_LIMIT_MS, Number(ms ?? 0))));

/** A row of counts (int4: numbers) and an age (`AGE`: a numeric's text). */
type Counts = Record<string, number | string | null>;

function toCounts(row: Counts, names: readonly string[], prefix = ''): Record<string, number> {
  return Object.fromEntries(names.map((s) => [s, Number(row[`${prefix}${s}`] ?? 0)]));
}

/** Outbox: capped rows per state, the oldest due pending age, sent/dead in the last hour and minute. */
export async function outboxStatsByState(ctx: PgContext, p: { countCap: number }): Promise<ConsoleStateCounts> {
  const t = ctx.names.outbox;
  // statement_timestamp(), not clock_timestamp(): a stable value is an index bound, a volatile one only a filter.
  const since = (state: string, span: string) => capped(t, `state = '${state}' AND updated_at > statement_timestamp() - interval '${span}'`);
  const { rows } = await pgQuery<Counts>(
    ctx.pool,
    `SELECT ${capped(t, `state = 'pending'`)} AS pending,
            ${capped(t, `state = 'processing'`)} AS processing,
            ${capped(t, `state = 'sent'`)} AS sent,
            ${capped(t, `state = 'dead'`)} AS dead,
            ${AGE(`clock_timestamp() - ${oldestDueFromSql(t)}`)} AS oldest,
            ${since('sent', '1 hour')} AS h_sent, ${since('dead', '1 hour')} AS h_dead,
            ${since('sent', '1 minute')} AS m_sent, ${since('dead', '1 minute')} AS m_dead`,
    [p.countCap],
  );
  const r = rows[0]!;
  return {
    counts: toCounts(r, ['pending', 'processing', 'sent', 'dead']),
    countCap: p.countCap,
    oldestPendingAgeSeconds: Math.max(0, Number(r.oldest ?? 0)),
    finishedLastHour: toCounts(r, ['sent', 'dead'], 'h_'),
    finishedLastMinute: toCounts(r, ['sent', 'dead'], 'm_'),
  };
}

/**
 * Inbox: as the outbox. The inbox indexes its finished rows by `created_at`, so the throughput
 * counts rows received within the last two hours that finished within the window. The oldest due
 * pending row is the earlier of the push rows' (two probes of the relay's pending index) and the
 * pull rows' (`oldestPullDueFromSql`: a few probes per source with open pull rows).
 */
export async function inboxStatsByState(ctx: PgContext, p: { countCap: number }): Promise<ConsoleStateCounts> {
  const t = ctx.names.inbox;
  const since = (state: string, span: string) =>
    capped(t, `state = '${state}' AND created_at > statement_timestamp() - interval '2 hours' AND updated_at > statement_timestamp() - interval '${span}'`);
  const { rows } = await pgQuery<Counts>(
    ctx.pool,
    `SELECT (SELECT count(*) FROM (
              (SELECT 1 FROM ${t} WHERE state = 'pending' AND consumption = 'push' LIMIT $1)
              UNION ALL (SELECT 1 FROM ${t} WHERE state = 'pending' AND consumption = 'pull' LIMIT $1) LIMIT $1) c)::int AS pending,
            ${capped(t, `state = 'processing'`)} AS processing,
            ${capped(t, `state = 'processed'`)} AS processed,
            ${capped(t, `state = 'dead'`)} AS dead,
            ${AGE(`clock_timestamp() - LEAST(${oldestDueFromSql(t, `consumption = 'push'`)}, ${oldestPullDueFromSql(t)})`)} AS oldest,
            ${since('processed', '1 hour')} AS h_processed, ${since('dead', '1 hour')} AS h_dead,
            ${since('processed', '1 minute')} AS m_processed, ${since('dead', '1 minute')} AS m_dead`,
    [p.countCap],
  );
  const r = rows[0]!;
  return {
    counts: toCounts(r, ['pending', 'processing', 'processed', 'dead']),
    countCap: p.countCap,
    oldestPendingAgeSeconds: Math.max(0, Number(r.oldest ?? 0)),
    finishedLastHour: toCounts(r, ['processed', 'dead'], 'h_'),
    finishedLastMinute: toCounts(r, ['processed', 'dead'], 'm_'),
  };
}

interface ClaimDbRow {
  id: string;
  label: string;
  key: string | null;
  attempt: number;
  claimed_ms: EpochMs | null;
  lease_expires_ms: EpochMs | null;
  lease_left_ms: string | null;
}

const toClaim = (r: ClaimDbRow): ConsoleClaim => ({
  id: r.id,
  label: r.label,
  key: r.key,
  attempt: r.attempt,
  claimedAt: epochTimeOrNull(r.claimed_ms),
  leaseExpiresAt: epochTimeOrNull(r.lease_expires_ms),
  leaseLeftMs: finiteMs(r.lease_left_ms),
});

async function claimsInFlight(ctx: PgContext, table: string, label: string, key: string, limit: number): Promise<ConsoleClaim[]> {
  const { rows } = await pgQuery<ClaimDbRow>(
    ctx.pool,
    `SELECT id, ${label} AS label, ${key} AS key, attempt, ${epochMs('claimed_at')} AS claimed_ms, ${epochMs('lease_expires_at')} AS lease_expires_ms,
            ${MS_UNTIL('lease_expires_at', 'clock_timestamp()')} AS lease_left_ms
       FROM ${table} WHERE state = 'processing' ORDER BY lease_expires_at LIMIT $1`,
    [limit],
  );
  return rows.map(toClaim);
}

/** Outbox rows in `processing`, soonest lease expiry first (the lease index). */
export const outboxClaimsInFlight = (ctx: PgContext, p: { limit: number }) => claimsInFlight(ctx, ctx.names.outbox, 'topic', 'key', p.limit);
/** Inbox rows in `processing`, soonest lease expiry first. */
export const inboxClaimsInFlight = (ctx: PgContext, p: { limit: number }) => claimsInFlight(ctx, ctx.names.inbox, 'source', 'aggregate_id', p.limit);

interface BlockedDbRow extends ClaimDbRow {
  state: string;
  max_attempts: number | null;
  scheduled_ms: EpochMs;
  due_in_ms: string;
  last_error: string | null;
  updated_ms: EpochMs;
  waiting: number;
}

const toBlocked = (r: BlockedDbRow): ConsoleBlockedHead => ({
  ...toClaim(r),
  state: r.state,
  maxAttempts: r.max_attempts,
  scheduledAt: epochTime(r.scheduled_ms),
  dueInMs: finiteMs(r.due_in_ms),
  lastError: r.last_error,
  updatedAt: epochTime(r.updated_ms),
  waitingBehind: Number(r.waiting),
});

interface BlockedParams {
  limit: number;
  scanLimit: number;
  poisonAttempts: number;
  waitingCap: number;
}

/**
 * A head row is stuck when its lease expired, it waits for a retry, it failed `$3` times or more,
 * or it is scheduled in the future with rows of its key waiting behind it. `waiting` is the
 * number of open rows behind the head (capped at `$4`).
 */
const STUCK = `(r.state = 'processing' AND r.lease_expires_at <= n.t
        OR r.state = 'pending' AND (r.attempt >= $3 OR r.attempt > 0 AND r.scheduled_at > n.t OR r.scheduled_at > n.t AND w.waiting > 0))`;

const BLOCKED_COLUMNS = `r.id, r.state, r.attempt, ${epochMs('r.scheduled_at')} AS scheduled_ms, ${epochMs('r.claimed_at')} AS claimed_ms,
       ${epochMs('r.lease_expires_at')} AS lease_expires_ms, r.last_error, ${epochMs('r.updated_at')} AS updated_ms, w.waiting,
       ${MS_UNTIL('r.scheduled_at', 'n.t')} AS due_in_ms, ${MS_UNTIL('r.lease_expires_at', 'n.t')} AS lease_left_ms`;

/** Heads of outbox keys that are not moving, most rows waiting first. */
export async function outboxBlockedKeys(ctx: PgContext, p: BlockedParams): Promise<ConsoleBlockedHead[]> {
  const t = ctx.names.outbox;
  const { rows } = await pgQuery<BlockedDbRow>(
    ctx.pool,
    `WITH n AS MATERIALIZED (SELECT clock_timestamp() AS t),
     cand AS (
       (SELECT id FROM ${t} WHERE state = 'processing' AND lease_expires_at <= (SELECT t FROM n) ORDER BY lease_expires_at LIMIT $2)
       UNION (SELECT id FROM ${t} WHERE state = 'pending' AND attempt > 0 ORDER BY scheduled_at, sequence LIMIT $2)
       UNION (SELECT id FROM ${t} WHERE state = 'pending' AND scheduled_at > (SELECT t FROM n) ORDER BY scheduled_at, sequence LIMIT $2))
     SELECT ${BLOCKED_COLUMNS}, r.topic AS label, r.key, r.max_attempts
       FROM cand JOIN ${t} r USING (id) CROSS JOIN n
      CROSS JOIN LATERAL (SELECT count(*)::int AS waiting FROM (
              SELECT 1 FROM ${t} b WHERE b.key = r.key AND b.state IN ('pending', 'processing') AND b.sequence > r.sequence LIMIT $4) c) w
      WHERE r.key <> '' AND ${STUCK}
        AND NOT EXISTS (SELECT 1 FROM ${t} e WHERE e.key = r.key AND e.state IN ('pending', 'processing') AND e.sequence < r.sequence)
      ORDER BY w.waiting DESC, r.scheduled_at, r.sequence
      LIMIT $1`,
    [p.limit, p.scanLimit, p.poisonAttempts, p.waitingCap],
  );
  return rows.map(toBlocked);
}

/**
 * Heads of inbox aggregates that are not moving, per source and aggregate (as the push and pull
 * claims order them: an aggregate id of one source never waits for another source's rows). An
 * empty aggregate id is no aggregate (the claims treat it as keyless). Future first attempts are
 * read for push rows only (the pull indexes lead with the source).
 */
export async function inboxBlockedAggregates(ctx: PgContext, p: BlockedParams): Promise<ConsoleBlockedHead[]> {
  const t = ctx.names.inbox;
  const open = `state IN ('pending', 'processing') AND source = r.source AND aggregate_id = r.aggregate_id`;
  // `aggregate_id <> ''` as a literal lets the planner use the push head index (its predicate).
  const push = `consumption = 'push' AND aggregate_id <> '' AND ${open}`;
  const pull = `consumption = 'pull' AND ${open}`;
  const { rows } = await pgQuery<BlockedDbRow>(
    ctx.pool,
    `WITH n AS MATERIALIZED (SELECT clock_timestamp() AS t),
     cand AS (
       (SELECT id FROM ${t} WHERE state = 'processing' AND lease_expires_at <= (SELECT t FROM n) ORDER BY lease_expires_at LIMIT $2)
       UNION (SELECT id FROM ${t} WHERE state = 'pending' AND consumption = 'push' AND attempt > 0 ORDER BY scheduled_at, sequence LIMIT $2)
       UNION (SELECT id FROM ${t} WHERE state = 'pending' AND consumption = 'pull' AND attempt > 0 LIMIT $2)
       UNION (SELECT id FROM ${t} WHERE state = 'pending' AND consumption = 'push' AND scheduled_at > (SELECT t FROM n) ORDER BY scheduled_at, sequence LIMIT $2))
     SELECT ${BLOCKED_COLUMNS}, r.source AS label, r.aggregate_id AS key, NULL::int AS max_attempts
       FROM cand JOIN ${t} r USING (id) CROSS JOIN n
      CROSS JOIN LATERAL (SELECT CASE WHEN r.consumption = 'push'
              THEN (SELECT count(*) FROM (SELECT 1 FROM ${t} WHERE ${push} AND sequence > r.sequence LIMIT $4) c)
              ELSE (SELECT count(*) FROM (SELECT 1 FROM ${t} WHERE ${pull} AND sequence > r.sequence LIMIT $4) c) END::int AS waiting) w
      WHERE r.aggregate_id <> '' AND ${STUCK}
        AND CASE WHEN r.consumption = 'push'
              THEN NOT EXISTS (SELECT 1 FROM ${t} WHERE ${push} AND sequence < r.sequence)
              ELSE NOT EXISTS (SELECT 1 FROM ${t} WHERE ${pull} AND sequence < r.sequence) END
      ORDER BY w.waiting DESC, r.scheduled_at, r.sequence
      LIMIT $1`,
    [p.limit, p.scanLimit, p.poisonAttempts, p.waitingCap],
  );
  return rows.map(toBlocked);
}

interface RowDbRow {
  id: string;
  label: string;
  key: string | null;
  state: string;
  attempt: number;
  max_attempts: number | null;
  payload: unknown;
  headers: Record<string, string>;
  sequence: string;
  scheduled_ms: EpochMs;
  created_ms: EpochMs;
  updated_ms: EpochMs;
  claimed_ms: EpochMs | null;
  lease_expires_ms: EpochMs | null;
  last_error: string | null;
  replay_count: number | null;
  processed_ms: EpochMs | null;
  details: Record<string, string | null>;
  trace_context: unknown;
}

const toRow = (r: RowDbRow): ConsoleRow => ({
  id: r.id,
  label: r.label,
  key: r.key,
  state: r.state,
  attempt: r.attempt,
  maxAttempts: r.max_attempts,
  payload: r.payload,
  headers: r.headers,
  sequence: r.sequence,
  scheduledAt: epochTime(r.scheduled_ms),
  createdAt: epochTime(r.created_ms),
  updatedAt: epochTime(r.updated_ms),
  claimedAt: epochTimeOrNull(r.claimed_ms),
  leaseExpiresAt: epochTimeOrNull(r.lease_expires_ms),
  lastError: r.last_error,
  replayCount: r.replay_count,
  processedAt: epochTimeOrNull(r.processed_ms),
  details: r.details,
  traceContext: r.trace_context ?? null,
});

const COMMON = `r.id, r.state, r.attempt, r.payload, r.headers, r.sequence, ${epochMs('r.scheduled_at')} AS scheduled_ms, ${epochMs('r.created_at')} AS created_ms,
  ${epochMs('r.updated_at')} AS updated_ms, ${epochMs('r.claimed_at')} AS claimed_ms, ${epochMs('r.lease_expires_at')} AS lease_expires_ms, r.last_error, r.trace_context`;
const OUTBOX_COLUMNS = `${COMMON}, r.topic AS label, r.key, r.max_attempts, r.replay_count, NULL::numeric AS processed_ms, '{}'::jsonb AS details`;
const INBOX_COLUMNS = `${COMMON}, r.source AS label, r.aggregate_id AS key, NULL::int AS max_attempts, NULL::int AS replay_count, ${epochMs('r.processed_at')} AS processed_ms,
  jsonb_build_object('idempotency key', r.idempotency_key, 'event type', r.event_type, 'correlation id', r.correlation_id, 'consumption', r.consumption) AS details`;

async function rowGet(ctx: PgContext, table: string, columns: string, id: string): Promise<ConsoleRow | undefined> {
  if (!UUID.test(id)) return undefined;
  const { rows } = await pgQuery<RowDbRow>(ctx.pool, `SELECT ${columns} FROM ${table} r WHERE r.id = $1`, [id]);
  return rows[0] ? toRow(rows[0]) : undefined;
}

/** One outbox row by id (undefined when absent or not a UUID). */
export const outboxRowGet = (ctx: PgContext, p: { id: string }) => rowGet(ctx, ctx.names.outbox, OUTBOX_COLUMNS, p.id);
/** One inbox row by id (undefined when absent or not a UUID). */
export const inboxRowGet = (ctx: PgContext, p: { id: string }) => rowGet(ctx, ctx.names.inbox, INBOX_COLUMNS, p.id);

/**
 * Dead rows newest first, keyset-paged: scans at most `scanLimit` dead rows of the time range
 * after the cursor, in the cursor's (time, id) order (rows sharing one time beyond a scan are then
 * read by the next page, not skipped), through the finished-rows index (id, label and time only), keeps those of the
 * label, takes the first `limit + 1` by (time, id) descending, and reads the full row — payload
 * included — of the first `limit` only. The cursor's time is the stored value to the microsecond
 * (`at`, as text), so no row of a shared millisecond is skipped or shown twice.
 */
async function deadSearch(ctx: PgContext, table: string, columns: string, label: string, time: string, q: ConsoleDeadQuery): Promise<ConsoleDeadPage> {
  if (q.before && !UUID.test(q.before.id)) return { rows: [], more: false, scanCapped: false };
  const { rows } = await pgQuery<RowDbRow & { scanned: number; found: number; at: string }>(
    ctx.pool,
    `WITH scan AS (
       SELECT id, ${label} AS label, ${time} AS t FROM ${table}
        WHERE state = 'dead' AND ${time} >= COALESCE($1::timestamptz, '-infinity') AND ${time} < COALESCE($2::timestamptz, 'infinity')
          AND ($6::timestamptz IS NULL OR ${time} <= $6::timestamptz AND (${time} < $6::timestamptz OR id < $7::uuid))
        ORDER BY ${time} DESC, id DESC LIMIT $3),
     hit AS (SELECT id, t FROM scan WHERE $4::text IS NULL OR label = $4 ORDER BY t DESC, id DESC LIMIT $5 + 1)
     SELECT (SELECT count(*) FROM scan)::int AS scanned, (SELECT count(*) FROM hit)::int AS found, p.* FROM (SELECT 1) one
       LEFT JOIN LATERAL (
         SELECT ${columns}, to_char(r.${time} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS at
           FROM ${table} r WHERE r.id IN (SELECT id FROM hit ORDER BY t DESC, id DESC LIMIT $5)
          ORDER BY r.${time} DESC, r.id DESC) p ON true`,
    [q.from ?? null, q.to ?? null, q.scanLimit, q.label ?? null, q.limit, q.before?.at ?? null, q.before?.id ?? null],
  );
  const shown = rows.filter((r) => r.id !== null);
  const more = (rows[0]?.found ?? 0) > q.limit;
  const last = shown.at(-1);
  return {
    rows: shown.map(toRow),
    more,
    scanCapped: (rows[0]?.scanned ?? 0) >= q.scanLimit,
    ...(more && last ? { next: { at: last.at, id: last.id } } : {}),
  };
}

/** Dead outbox rows by `updated_at` (when they died), optionally of one topic. */
export const outboxDeadSearch = (ctx: PgContext, q: ConsoleDeadQuery) => deadSearch(ctx, ctx.names.outbox, OUTBOX_COLUMNS, 'topic', 'updated_at', q);
/** Dead inbox rows by `created_at` (when they were received), optionally of one source. */
export const inboxDeadSearch = (ctx: PgContext, q: ConsoleDeadQuery) => deadSearch(ctx, ctx.names.inbox, INBOX_COLUMNS, 'source', 'created_at', q);

/**
 * The newest `scanLimit` dead rows through the finished-rows index (by `time`), grouped by label
 * (and `consumption`) and the first `errorChars` characters of `last_error`; the `limit` largest groups.
 */
async function deadGroups(ctx: PgContext, table: string, label: string, consumption: string, time: string, input: ConsoleDeadGroupQuery): Promise<ConsoleDeadGroups> {
  const q = deadGroupQuery(input);
  const { rows } = await pgQuery<{ label: string | null; consumption: 'push' | 'pull' | null; error: string | null; n: number; latest_ms: EpochMs | null; scanned: number }>(
    ctx.pool,
    `WITH scan AS (
       SELECT ${label} AS label, ${consumption} AS consumption, left(last_error, $2) AS error, ${time} AS t FROM ${table}
        WHERE state = 'dead' ORDER BY ${time} DESC LIMIT $1),
     g AS (SELECT label, consumption, error, count(*)::int AS n, max(t) AS latest FROM scan
            GROUP BY label, consumption, error ORDER BY n DESC, latest DESC, label LIMIT $3)
     SELECT g.label, g.consumption, g.error, g.n, ${epochMs('g.latest')} AS latest_ms, (SELECT count(*) FROM scan)::int AS scanned
       FROM (SELECT 1) one LEFT JOIN g ON true`,
    [q.scanLimit, q.errorChars, q.limit],
  );
  const scanned = rows[0]?.scanned ?? 0;
  return {
    groups: rows.filter((r) => r.label !== null).map((r) => ({ label: r.label!, consumption: r.consumption, error: r.error, count: r.n, latest: epochTime(r.latest_ms!) })),
    scanned,
    scanCapped: scanned >= q.scanLimit,
  };
}

/** Dead outbox rows grouped by topic and error start (the newest by when they died). */
export const outboxDeadGroups = (ctx: PgContext, q: ConsoleDeadGroupQuery) => deadGroups(ctx, ctx.names.outbox, 'topic', 'NULL::text', 'updated_at', q);
/** Dead inbox rows grouped by source, consumption and error start (the newest by when they were received). */
export const inboxDeadGroups = (ctx: PgContext, q: ConsoleDeadGroupQuery) => deadGroups(ctx, ctx.names.inbox, 'source', 'consumption', 'created_at', q);
