/**
 * PostgreSQL inbox operations (driver methods `inbox*`).
 *
 * Deduplication is the unique constraint on `(source, idempotency_key)`. The relay claim runs
 * under a transaction-scoped advisory lock keyed on the table, so two relays cannot both see an
 * aggregate as free and each claim a row of it. Every finishing write is fenced on id +
 * `processing` + token + `lease_expires_at > clock_timestamp()`; batches settle in one statement
 * via `unnest`. The relay only ever touches `consumption = 'push'` rows.
 */
import { randomUUID } from 'node:crypto';
import { gaugeGateName, SKIPPED_STATS, type ClaimRef, type DeadItem, type DeadRowSummary, type DeleteFinishedParams, type InboxForwardItem, type InboxInsertResult, type InboxMessageInput, type InboxRow, type ReclaimResult, type RetryItem, type StatsScope, type TableStats } from '../driver.ts';
import { gatedRead } from './maintenance-queries.ts';
import { copyKeepingPayloadLazy, withLazyPayload } from '../lazy-payload.ts';
import { PayloadRejectedError, QueueBoxError, UsageError } from '../../errors.ts';
import { msInterval, type PgContext } from './context.ts';
import type { PgNames } from './names.ts';
import { claimRetryingInFlight, oncePerNamesAndLimit, OLDEST_WINDOW, windowLeftRoom } from './claim-text.ts';
import { PINNED_CLAIM_PLAN } from './claim-functions.ts';
import { claimSet, FENCE, fencedDeadMany, fencedQuery, idsChanged, fencedReleaseMany, fencedRenewMany, fencedRetryMany, isConnectionLost, lockWithinLease, reclaimExpired } from './fenced-writes.ts';
import { LOOK_AHEAD, outboxInsert } from './outbox-queries.ts';
import { leaseWithinBudget } from '../statement-budget.ts';
import { pgClaimQuery, pgQuery, pgTransaction, type PgQueryable } from './pg-pool.ts';
import { deadList, tableStats } from './table-reads.ts';
import { epochMs, epochTime, type EpochMs } from './epoch-time.ts';
import { parseStoredTraceContext, serializeTraceContext } from '../../observability/trace-context.ts';
import { claimArrayParams } from './uuid-array.ts';


/** An inbox row as the claim statements return it. */
export interface InboxDbRow {
  id: string;
  source: string;
  idempotency_key: string;
  aggregate_id: string | null;
  event_type: string | null;
  /** `payload::text`: the stored JSON text (a jsonb column would be parsed, and large numbers rounded). */
  payload_text: string;
  headers: Record<string, string>;
  correlation_id: string | null;
  attempt: number;
  sequence: string;
  /** `created_at` and `lease_expires_at` as ms since the epoch (`epochMs`): `pg` parses no other `DateStyle` than ISO. */
  created_ms: EpochMs;
  claim_token: string;
  lease_expires_ms: EpochMs;
  trace_context: unknown;
}

/**
 * Maps a claimed inbox row to the driver's `InboxRow`. Its `payload` is parsed on first read
 * (`withLazyPayload`): the relay forwards the text, and a claim of large bodies parsed up front
 * took many times their text's memory.
 */
export function toInboxRow(r: InboxDbRow): InboxRow {
  return withLazyPayload({
    id: r.id,
    source: r.source,
    idempotencyKey: r.idempotency_key,
    aggregateId: r.aggregate_id,
    eventType: r.event_type,
    payloadText: r.payload_text,
    headers: r.headers,
    correlationId: r.correlation_id,
    attempt: r.attempt,
    createdAt: epochTime(r.created_ms),
    claimToken: r.claim_token,
    leaseExpiresAt: epochTime(r.lease_expires_ms),
    trace: parseStoredTraceContext(r.trace_context),
  });
}

/**
 * Stores a message once per `(source, idempotency_key)`; a second store returns the first row's
 * id with `duplicate: true`. With `deadReason` the row is written directly as `dead` in the same
 * statement. Any payload is kept: a non-JSON body arrives as a string and is stored as a JSON
 * string value.
 *
 * Concurrency: `ON CONFLICT DO NOTHING` waits for a concurrent insert of the same key to commit.
 * The fallback `SELECT` then runs in a new statement (a new READ COMMITTED snapshot), so it sees
 * the row the conflict was about.
 */
export async function inboxInsert(ctx: PgContext, db: PgQueryable, m: InboxMessageInput): Promise<InboxInsertResult> {
  // Another pass is needed only when the conflicting row vanished (retention) in between.
  for (let pass = 0; pass < 3; pass++) {
    const result = await insertOnce(ctx, db, m);
    if (result !== undefined) return result;
  }
  throw new QueueBoxError(`inbox insert of ${m.source}/${m.idempotencyKey} neither inserted nor found a row`);
}

/**
 * What the insert's JSON casts raise for a text `jsonb` refuses: invalid text (22P02), a number
 * beyond `numeric` (22003), a `\u` escape the database cannot hold (22P05). The payload is the
 * only JSON of the insert that is not QueueBox's own serialization.
 */
const JSON_REFUSED = new Set(['22P02', '22003', '22P05']);

async function insertOnce(ctx: PgContext, db: PgQueryable, m: InboxMessageInput): Promise<InboxInsertResult | undefined> {
  const t = ctx.names.inbox;
  const dead = m.deadReason !== undefined;
  const insert = await pgQuery<{ id: string; duplicate: boolean }>(
    db,
    `WITH ins AS (
       INSERT INTO ${t} (source, idempotency_key, aggregate_id, event_type, payload, headers, correlation_id,
                         consumption, state, last_error, scheduled_at, created_at, updated_at, trace_context)
       VALUES ($1, $2, $3, $4, $5::jsonb, $6::jsonb, $7, $8, $9, $10,
               pg_catalog.clock_timestamp() + ${msInterval('$11')}, pg_catalog.clock_timestamp(), pg_catalog.clock_timestamp(), $12::text::jsonb)
       ON CONFLICT (source, idempotency_key) DO NOTHING
       RETURNING id)
     SELECT id, false AS duplicate FROM ins
     UNION ALL
     SELECT id, true AS duplicate FROM ${t}
      WHERE source = $1 AND idempotency_key = $2 AND NOT EXISTS (SELECT 1 FROM ins)`,
    [
      m.source,
      m.idempotencyKey,
      m.aggregateId ?? null,
      m.eventType ?? null,
      m.payloadText ?? JSON.stringify(m.payload ?? null),
      JSON.stringify(m.headers ?? {}),
      m.correlationId ?? null,
      m.consumption,
      dead ? 'dead' : 'pending',
      dead ? m.deadReason : null,
      m.delayMs ?? 0,
      serializeTraceContext(m.trace),
    ],
  ).catch((error: unknown) => {
    const code = (error as { code?: unknown }).code;
    if (typeof code === 'string' && JSON_REFUSED.has(code)) {
      throw new PayloadRejectedError(`the database refused the message's JSON: ${(error as Error).message}`, code, { cause: error });
    }
    throw error;
  });
  if (insert.rows[0]) return { id: insert.rows[0].id, duplicate: insert.rows[0].duplicate };
  // The conflicting row was committed after this statement's snapshot: look again.
  const { rows } = await pgQuery<{ id: string }>(db, `SELECT id FROM ${t} WHERE source = $1 AND idempotency_key = $2`, [m.source, m.idempotencyKey]);
  return rows[0] ? { id: rows[0].id, duplicate: true } : undefined;
}

/**
 * Where a relay or pull claim reads on past its window of the oldest rows, kept per driver (and per
 * source for pull; a new container starts again at the start): a sweep position in claim order
 * (`at`, µs since the epoch of `scheduled_at`, and its tie-breakers: the relay's `sequence`; the
 * pull's `created_at` in µs and `id`), the sweep's horizon (µs since the epoch, the database
 * clock: rows due later wait for the next sweep, so a sweep ends however fast rows arrive; never
 * read past now) and the aggregate cursor (the last aggregate the turn read: the relay's `source`
 * and `aggregate`, the pull's `aggregate`). `null` everywhere: the start of a sweep and of a turn.
 * A stale or wrong position can only cost a turn: it says where the bounded reads start, never
 * which rows may be claimed.
 *
 * The position travels as settings of the claim's transaction (`queuebox.claim_*`, set by the
 * statement that takes the claim lock), not as bind parameters, so the claim statement keeps its
 * parameters (`$1` the lease; the pull's source, limit and lease): run without them (EXPLAIN, a
 * statement sent by hand), it reads from the start.
 */
export interface ClaimPosition {
  at: string | null;
  tie: string | null;
  id: string | null;
  horizon: string | null;
  source: string | null;
  aggregate: string | null;
}

const POSITION_FIELDS = ['at', 'tie', 'id', 'horizon', 'source', 'aggregate'] as const;

/** SQL: the `field` of the carried position (NULL when the transaction set none), as `type`. */
export function claimPositionSetting(field: (typeof POSITION_FIELDS)[number], type: string): string {
  return `NULLIF(pg_catalog.current_setting('queuebox.claim_${field}', true), '')::${type}`;
}

/**
 * SQL: the `set_config` calls that carry a position into the claim's transaction, from bind
 * parameters `$first` on (one per field, in `POSITION_FIELDS` order; `claimPositionValues`).
 */
export function claimPositionSetConfig(first: number): string {
  return POSITION_FIELDS.map((field, i) => `pg_catalog.set_config('queuebox.claim_${field}', $${first + i}::text, true)`).join(', ');
}

/**
 * The longest a claim transaction holding a claim lock (the relay's on its table, a pull claim's
 * on its source) may sit idle between its statements: `idle_in_transaction_session_timeout`, set
 * with the lock for that transaction only. A client frozen there (a GC pause, a stopped process, a
 * network partition, a Lambda container frozen or killed mid-claim) would otherwise hold the lock,
 * and stall every other claim of the table or source, until its session ended: with an
 * application's own pool, which sets no such timeout, indefinitely. The server ends the session
 * after this long instead, the lock with it; the claim's transaction rolls back, so it took nothing.
 * A healthy claim sends its next statement at once. A shorter timeout of the session is kept (the
 * role's or database's, or `database.idleInTransactionTimeoutMs` on QueueBox's own pool).
 */
export const CLAIM_LOCK_IDLE_MS = 5_000;

/** SQL: `CLAIM_LOCK_IDLE_MS` (or the session's shorter one) for the claim's transaction, beside its lock. */
export const CLAIM_LOCK_IDLE_SETTING = `pg_catalog.set_config('idle_in_transaction_session_timeout',
  (SELECT CASE WHEN s.setting::bigint BETWEEN 1 AND ${CLAIM_LOCK_IDLE_MS - 1} THEN s.setting ELSE '${CLAIM_LOCK_IDLE_MS}' END
     FROM pg_catalog.pg_settings s WHERE s.name = 'idle_in_transaction_session_timeout'), true)`;

/** The bind values of `claimPositionSetConfig` (`''`: none). */
export function claimPositionValues(position: ClaimPosition | undefined): string[] {
  return POSITION_FIELDS.map((field) => position?.[field] ?? '');
}

/** The next position, as the claim statements return it with every row (`next_*` columns). */
export interface ClaimPositionRow {
  next_at: string | null;
  next_tie: string | null;
  next_id: string | null;
  next_horizon: string | null;
  next_source: string | null;
  next_aggregate: string | null;
}

/** The position a claim's answer carries (its first row: every row carries the same). */
export function nextClaimPosition(rows: ClaimPositionRow[]): ClaimPosition | undefined {
  const r = rows[0];
  if (r === undefined) return undefined;
  return { at: r.next_at, tie: r.next_tie, id: r.next_id, horizon: r.next_horizon, source: r.next_source, aggregate: r.next_aggregate };
}

/** SQL: µs since the epoch of the timestamp `at` (NULL for an infinite one). */
export const epochMicros = (at: string) => `CASE WHEN isfinite(${at}) THEN (extract(epoch FROM ${at}) * 1000000)::bigint END`;
/** SQL: the timestamp of µs since the epoch `micros`, or `otherwise` when NULL. */
export const fromMicros = (micros: string, otherwise: string) => `COALESCE(timestamptz 'epoch' + ${micros} * interval '1 microsecond', ${otherwise})`;

/**
 * The bound of the relay claim's order (stated in docs/inbox.md): a due first attempt that can
 * move — without aggregate, or the head of an aggregate with nothing in flight — is claimed within
 * this many claims (of one driver; claims filled by due retries aside), `queued` being the number of due open
 * rows at the moment it can move; rows that arrive after it do not count.
 *
 * Why: a claim that does not take the row either takes at least half a batch of rows due before it
 * (the window, which then reads nothing past itself; or the merged heads and rows without
 * aggregate, in claim order, which the row would be among had it been found, and of which the
 * batch then took only earlier ones) or moves the sweep position on by `LOOK_AHEAD` batches of
 * due rows, or ends a sweep; the row is reached by the sweep that was under way when it could move
 * or by the next one (twice the sweep, two sweep ends); then the claim that takes it.
 */
export function inboxClaimBound(queued: number, limit: number): number {
  const half = Math.ceil(limit / 2);
  return Math.ceil(queued / half) + 2 * Math.ceil(queued / (LOOK_AHEAD * limit)) + 3;
}

/** The relay claims' positions, by driver (its table names). */
const relayPositions = new WeakMap<PgNames, ClaimPosition>();

/**
 * Claims due push rows in one transaction: first `pg_advisory_xact_lock` on the table (released
 * at COMMIT), then `FOR UPDATE SKIP LOCKED`. An aggregate is scoped by its source: a row of
 * `(source, aggregate_id)` is claimable only when it is that aggregate's head (no
 * `pending`/`processing` push row of it with a lower `sequence`, so a row waiting for a retry
 * holds its aggregate) and no row of the aggregate is `processing` (an expired one holds it until
 * the reclaim step returns it). Rows without aggregate (NULL or `''`) are free. Order: due retries
 * (`attempt > 0`) first, then first attempts by `scheduled_at, sequence` — the oldest rows, and
 * when their aggregates are in flight (the window gave less than half the batch), the heads that
 * can move among a bounded read past the window and rows without aggregate, merged in that one
 * order. The bounded read: the next `LOOK_AHEAD` batches of due rows past the sweep position (up
 * to the sweep's horizon, then from the start again) and the heads of the next `LOOK_AHEAD`
 * batches' worth of open aggregates past the aggregate cursor (a loose scan of the head index,
 * one probe each, wrapping to the first aggregate) — carried from claim to claim of the driver
 * (`ClaimPosition`) — so a claim's work does not grow with the number of open aggregates; the
 * wait of a row that can move is bounded by `inboxClaimBound` (docs/inbox.md, "The wait of a row
 * that can move"). Because the lock is taken in an earlier statement, the claim statement's
 * snapshot includes every claim committed before it; the unique index on the aggregate of
 * `processing` rows backs the rule.
 */
export async function inboxClaimPushMany(ctx: PgContext, p: { limit: number; leaseMs: number }): Promise<InboxRow[]> {
  const rows = await claimRetryingInFlight(() =>
    pgTransaction(ctx.pool, async (client) => {
      // Waits while another claim holds it, as long as the statement may run (the time left in a pass):
      // `pgTransaction` sets no `lock_timeout` for it, whatever the role's.
      await pgQuery(client, `SELECT pg_advisory_xact_lock(hashtext($1)), ${CLAIM_LOCK_IDLE_SETTING}, ${claimPositionSetConfig(2)}`, [`queuebox_inbox_claim_${ctx.names.inbox}`, ...claimPositionValues(relayPositions.get(ctx.names))]);
      return (await pgClaimQuery<Partial<InboxDbRow> & ClaimPositionRow>(client, relayClaimText(ctx.names, p.limit), () => [leaseWithinBudget(p.leaseMs)], ctx.prepared, PINNED_CLAIM_PLAN)).rows;
    }),
  );
  const next = nextClaimPosition(rows);
  if (next !== undefined) relayPositions.set(ctx.names, next);
  // A claim that took nothing answers one row without an id: the position only.
  const claimed = rows.filter((r): r is InboxDbRow & ClaimPositionRow => r.id !== null && r.id !== undefined);
  return claimed.sort((a, b) => (BigInt(a.sequence) < BigInt(b.sequence) ? -1 : 1)).map(toInboxRow);
}

/** No aggregate: NULL or the empty string. */
const NO_AGGREGATE = `(c.aggregate_id IS NULL OR c.aggregate_id = '')`;

/**
 * The relay claim statement of `names` for batches of `limit` rows (bind parameter `$1`: the lease
 * in ms; the position from the transaction's settings, `ClaimPosition`). Every row it answers
 * carries the next position (`next_*`); a claim that takes nothing answers one row with a NULL `id`
 * that carries it.
 */
export const relayClaimText = oncePerNamesAndLimit((names, limit) => {
  const t = names.inbox;
  const window = limit * OLDEST_WINDOW;
  const look = limit * LOOK_AHEAD;
  const room = windowLeftRoom(String(limit));
  const sweepAt = fromMicros(claimPositionSetting('at', 'bigint'), `'-infinity'::timestamptz`);
  const sweepSequence = `COALESCE(${claimPositionSetting('tie', 'bigint')}, -1)`;
  const horizon = fromMicros(claimPositionSetting('horizon', 'bigint'), 'pg_catalog.statement_timestamp()');
  const cursorSource = claimPositionSetting('source', 'text');
  const cursorAggregate = claimPositionSetting('aggregate', 'text');
  // what the batch has room for past the window
  const left = `GREATEST(0, ${limit} - (SELECT count(*) FROM retried) - (SELECT count(*) FROM oldest))`;
  // an open push row of an aggregate (the predicate of the head index, for alias `a`)
  const open = (a: string) => `${a}.state IN ('pending', 'processing') AND ${a}.consumption = 'push' AND ${a}.aggregate_id <> ''`;
  // two probes, not one OR: each is an index range (head; in-flight rows)
  const freeHead = `NOT EXISTS (
                    SELECT 1 FROM ${t} h
                     WHERE h.source = c.source AND h.aggregate_id = c.aggregate_id
                       AND ${open('h')}
                       AND h.sequence < c.sequence)
                  AND NOT EXISTS (
                    SELECT 1 FROM ${t} b
                     WHERE b.source = c.source AND b.aggregate_id = c.aggregate_id AND b.aggregate_id <> ''
                       AND b.consumption = 'push' AND b.state = 'processing')`;
  // of a read of due rows (`rows`: a CTE's name or a subquery), the heads that can move: tested only
  // on the first row of each aggregate there (the others have an earlier open row of their
  // aggregate in the same snapshot), joined back by ctid
  const headsAmong = (rows: string) => `
         SELECT c.id, c.ctid, a.scheduled_at, a.sequence FROM (
             SELECT f.ctid, f.scheduled_at, f.sequence, f.aggregate_id,
                    min(f.sequence) OVER (PARTITION BY f.source, f.aggregate_id) AS first_of_aggregate
               FROM ${rows} f) a
           JOIN ${t} c ON c.ctid = a.ctid
          WHERE a.aggregate_id <> '' AND a.sequence = a.first_of_aggregate
            AND c.state = 'pending' AND c.consumption = 'push' AND c.attempt = 0 AND c.aggregate_id <> ''
            AND (${NO_AGGREGATE} OR (${freeHead}))
            AND c.id NOT IN (SELECT id FROM oldest)
       `;
  return `WITH RECURSIVE
       retried AS (
         SELECT c.id FROM ${t} c
          WHERE c.state = 'pending' AND c.consumption = 'push' AND c.attempt > 0
            AND c.scheduled_at <= pg_catalog.clock_timestamp()
            AND (${NO_AGGREGATE} OR (${freeHead}))
          ORDER BY c.scheduled_at, c.sequence
          LIMIT ${limit}
          FOR UPDATE SKIP LOCKED
       ),
       -- the oldest rows in index order, joined back by ctid (see the outbox claim)
       oldest AS (
         SELECT c.id, w.scheduled_at, w.sequence FROM (
             SELECT w.ctid, w.scheduled_at, w.sequence FROM ${t} w
              WHERE w.state = 'pending' AND w.consumption = 'push' AND w.scheduled_at <= pg_catalog.clock_timestamp()
              ORDER BY w.scheduled_at, w.sequence
              LIMIT ${window}) w
           JOIN ${t} c ON c.ctid = w.ctid
          WHERE c.state = 'pending' AND c.consumption = 'push' AND c.attempt = 0
            AND (${NO_AGGREGATE} OR (${freeHead}))
          ORDER BY w.scheduled_at, w.sequence
          LIMIT ${limit}
          FOR UPDATE OF c SKIP LOCKED
       ),
       -- past the window, only when it left room (see windowLeftRoom). The sweep: the next due rows
       -- past its position (at a sweep's start, past the window: its rows are skipped in the index,
       -- not tested again), up to its horizon
       ahead AS (
         SELECT w.ctid, w.scheduled_at, w.sequence, w.source, w.aggregate_id FROM ${t} w
          WHERE w.state = 'pending' AND w.consumption = 'push'
            -- never past now, whatever the carried horizon says (a clock stepped back, a failover)
            AND w.scheduled_at <= LEAST(${horizon}, pg_catalog.statement_timestamp())
            AND (w.scheduled_at, w.sequence) > (${sweepAt}, ${sweepSequence})
            AND ${room}
          ORDER BY w.scheduled_at, w.sequence
          LIMIT ${look} OFFSET CASE WHEN ${claimPositionSetting('at', 'bigint')} IS NULL THEN ${window} ELSE 0 END
       ),
       -- ... of which the heads that can move (rows without aggregate come from their own index),
       -- tested only on the first row of each aggregate there: the others have an earlier open row
       -- of their aggregate in the same snapshot (a backlog behind a row in flight: one probe, not
       -- one per row)
       ahead_heads AS (${headsAmong('ahead')}),
       -- the rows due since the sweep's horizon (it reads them in its next round), their first
       -- look rows, of which the heads that can move: a new aggregate's row does not wait for the
       -- sweep to come round while older aggregates keep the window and the turn busy
       fresh AS (${headsAmong(`(
                 SELECT w.ctid, w.scheduled_at, w.sequence, w.source, w.aggregate_id FROM ${t} w
                  WHERE w.state = 'pending' AND w.consumption = 'push' AND ${claimPositionSetting('horizon', 'bigint')} IS NOT NULL
                    AND w.scheduled_at > ${horizon} AND w.scheduled_at <= pg_catalog.statement_timestamp()
                    AND ${room}
                  ORDER BY w.scheduled_at, w.sequence
                  LIMIT ${look})`)}),
       -- the turn: the next open (source, aggregate) after the cursor (NULL: the first), at most as
       -- many as the sweep reads rows, one index probe each (a loose scan of the head index), which
       -- reads the aggregate's head too: the head index's first entry past the previous aggregate
       open_aggregates AS (
         (SELECT k.source, k.aggregate_id, k.id, k.ctid, k.state, k.attempt, k.scheduled_at, k.sequence, 1 AS n FROM ${t} k
           WHERE ${open('k')} AND (k.source, k.aggregate_id) > (COALESCE(${cursorSource}, ''), COALESCE(${cursorAggregate}, '')) AND ${room}
           ORDER BY k.source, k.aggregate_id, k.sequence LIMIT 1)
         UNION ALL
         SELECT n.source, n.aggregate_id, n.id, n.ctid, n.state, n.attempt, n.scheduled_at, n.sequence, a.n + 1
           FROM open_aggregates a
           CROSS JOIN LATERAL (
             SELECT k.source, k.aggregate_id, k.id, k.ctid, k.state, k.attempt, k.scheduled_at, k.sequence FROM ${t} k
              WHERE ${open('k')}
                AND (k.source, k.aggregate_id) > (a.source, a.aggregate_id)
              ORDER BY k.source, k.aggregate_id, k.sequence LIMIT 1) n
          WHERE a.n < ${look}
       ),
       -- the heads of those aggregates that can move: due, first attempt, nothing of it in flight
       heads AS (
         SELECT h.id, h.ctid, h.scheduled_at, h.sequence, h.source, h.aggregate_id
           FROM open_aggregates h
          WHERE h.state = 'pending' AND h.attempt = 0 AND h.scheduled_at <= pg_catalog.clock_timestamp()
            AND NOT EXISTS (
              SELECT 1 FROM ${t} b
               WHERE b.source = h.source AND b.aggregate_id = h.aggregate_id AND b.aggregate_id <> ''
                 AND b.consumption = 'push' AND b.state = 'processing')
            AND h.id NOT IN (SELECT id FROM oldest)
       ),
       keyless AS (
         SELECT k.id, k.ctid, k.scheduled_at, k.sequence FROM ${t} k
          WHERE k.state = 'pending' AND k.consumption = 'push' AND k.attempt = 0
            AND (k.aggregate_id IS NULL OR k.aggregate_id = '')
            AND k.scheduled_at <= pg_catalog.clock_timestamp()
            AND k.id NOT IN (SELECT id FROM oldest) AND ${room}
          ORDER BY k.scheduled_at, k.sequence
          LIMIT ${limit}
       ),
       -- the heads and the rows without aggregate, in one claim order (a row without aggregate never
       -- waits for younger heads, nor a head for younger rows without aggregate: the wait of a row
       -- that can move is bounded, see inboxClaimBound)
       merged AS (
         SELECT id, ctid, scheduled_at, sequence FROM ahead_heads
         UNION
         SELECT id, ctid, scheduled_at, sequence FROM fresh
         UNION
         SELECT id, ctid, scheduled_at, sequence FROM heads
         UNION ALL
         SELECT id, ctid, scheduled_at, sequence FROM keyless
       ),
       -- ... locked in claim order, joined back by ctid as the window is (joined by id, a plan kept
       -- from a few rows drove the join from a scan of the whole table), until the batch is full
       taken AS (
         SELECT m.id, m.scheduled_at, m.sequence
           FROM merged m
           JOIN ${t} c ON c.ctid = m.ctid
          -- the state written so that no partial index's predicate matches it: the ctid is the way in
          WHERE (c.state || '') = 'pending'
          ORDER BY m.scheduled_at, m.sequence
          LIMIT ${left}
          FOR UPDATE OF c SKIP LOCKED
       ),
       -- where the next claim reads on (as the outbox's full claim): unchanged when the window did
       -- not leave room; the last row taken when the batch filled before the end of the sweep's
       -- read (never back); the start (a new sweep) when the read reached the horizon; else the end
       -- of the read. The cursor: unchanged when the window did not leave room; just before the
       -- first aggregate whose head the turn found and the batch did not take; else past the
       -- turn's last aggregate, or the first again (NULL) when the turn ran out
       sweep AS (
         SELECT CASE
                  WHEN NOT ${room} THEN 'keep'
                  WHEN (SELECT count(*) FROM taken) >= ${left}
                   AND (l.scheduled_at IS NULL OR (l.scheduled_at, l.sequence) <= (${sweepAt}, ${sweepSequence})) THEN 'keep'
                  WHEN (SELECT count(*) FROM taken) >= ${left}
                   AND (l.scheduled_at, l.sequence) < (e.scheduled_at, e.sequence) THEN 'taken'
                  WHEN (SELECT count(*) FROM ahead) < ${look} THEN 'start'
                  ELSE 'ahead'
                END AS next,
                l.scheduled_at AS taken_at, l.sequence AS taken_sequence, e.scheduled_at AS ahead_at, e.sequence AS ahead_sequence,
                CASE
                  WHEN NOT ${room} THEN 'keep'
                  WHEN u.source IS NOT NULL THEN 'before'
                  WHEN (SELECT count(*) FROM open_aggregates) >= ${look} THEN 'last'
                  ELSE 'start'
                END AS turn,
                b.source AS before_source, b.aggregate_id AS before_aggregate, z.source AS last_source, z.aggregate_id AS last_aggregate
           FROM (SELECT NULL) one
           LEFT JOIN LATERAL (SELECT scheduled_at, sequence FROM taken ORDER BY scheduled_at DESC, sequence DESC LIMIT 1) l ON true
           LEFT JOIN LATERAL (SELECT scheduled_at, sequence FROM ahead ORDER BY scheduled_at DESC, sequence DESC LIMIT 1) e ON true
           LEFT JOIN LATERAL (SELECT source, aggregate_id FROM heads WHERE id NOT IN (SELECT id FROM taken) ORDER BY source, aggregate_id LIMIT 1) u ON true
           LEFT JOIN LATERAL (SELECT source, aggregate_id FROM open_aggregates k WHERE (k.source, k.aggregate_id) < (u.source, u.aggregate_id) ORDER BY source DESC, aggregate_id DESC LIMIT 1) b ON true
           LEFT JOIN LATERAL (SELECT source, aggregate_id FROM open_aggregates ORDER BY n DESC LIMIT 1) z ON true
       ),
       next_position AS (
         SELECT CASE next WHEN 'keep' THEN ${claimPositionSetting('at', 'bigint')} WHEN 'taken' THEN ${epochMicros('taken_at')} WHEN 'ahead' THEN ${epochMicros('ahead_at')} END::text AS next_at,
                CASE next WHEN 'keep' THEN ${claimPositionSetting('tie', 'bigint')} WHEN 'taken' THEN taken_sequence WHEN 'ahead' THEN ahead_sequence END::text AS next_tie,
                NULL::text AS next_id,
                CASE WHEN next = 'start' OR (next = 'keep' AND ${claimPositionSetting('at', 'bigint')} IS NULL) THEN NULL ELSE ${epochMicros(horizon)} END::text AS next_horizon,
                -- before the first aggregate not taken: the one before it in the turn, else the cursor as it was
                CASE turn WHEN 'keep' THEN ${cursorSource} WHEN 'before' THEN COALESCE(before_source, ${cursorSource}) WHEN 'last' THEN last_source END AS next_source,
                CASE turn WHEN 'keep' THEN ${cursorAggregate} WHEN 'before' THEN CASE WHEN before_source IS NULL THEN ${cursorAggregate} ELSE before_aggregate END WHEN 'last' THEN last_aggregate END AS next_aggregate
           FROM sweep
       ),
       candidates AS (
         SELECT id FROM retried
         UNION ALL
         SELECT id FROM oldest
         UNION ALL
         SELECT id FROM taken
         LIMIT ${limit}
       ),
       -- by id from the array of candidates, not a join (see the outbox claim)
       claimed AS (
         UPDATE ${t} i
            SET ${claimSet('$1')}
          WHERE i.id = ANY (ARRAY(SELECT id FROM candidates))
      RETURNING i.id, i.source, i.idempotency_key, i.aggregate_id, i.event_type, i.payload::text AS payload_text, i.headers,
                i.correlation_id, i.attempt, i.sequence, ${epochMs('i.created_at')} AS created_ms, i.claim_token,
                ${epochMs('i.lease_expires_at')} AS lease_expires_ms, i.trace_context
       )
    -- every row claimed with the next position; none claimed: one row without an id, for the position
    SELECT c.*, p.* FROM next_position p LEFT JOIN claimed c ON true`;
});

/** Fenced lease renewal; returns the ids renewed. */
export async function inboxRenewMany(ctx: PgContext, p: { claims: ClaimRef[]; leaseMs: number }): Promise<string[]> {
  return fencedRenewMany(ctx.pool, ctx.names.inbox, p.claims, p.leaseMs);
}

/**
 * An open outbox row relayed from `source` with `key` (the relay's key under the other
 * `inbox.relay.outboxKey` form): while one exists, the aggregate's next row takes that key too
 * (`InboxForwardItem.keyWhileOpen`). Served by the key-head index.
 */
const openRelayedRowWithKey = (outbox: string, key: string, source: string) => `EXISTS (
         SELECT 1 FROM ${outbox} o
          WHERE o.key = ${key} AND o.state IN ('pending', 'processing') AND o.headers ->> 'x-source' = ${source})`;

/** Marks the lost claim inside `inboxForward` so its transaction rolls back. */
class ForwardClaimLost extends Error {}

/**
 * One transaction: insert the outbox row (with `keyWhileOpen.key` while an open row relayed from
 * that source has it), then the fenced mark `processed`. When the mark changes
 * no row the claim was lost: the transaction rolls back (no outbox row) and the result is false.
 *
 * The outbox row's id is chosen here (unless the message has one), so that when the connection
 * ends under the transaction — the answer to its COMMIT may be all that was lost — the forward
 * can tell whether it landed (`forwardLanded`): then it counts as forwarded (true), not as an
 * error, whose retry write would find the row no longer under its claim and count a lost claim.
 */
export async function inboxForward(ctx: PgContext, item: InboxForwardItem, defaults: { maxAttempts: number }): Promise<boolean> {
  const outboxId = item.outbox.id ?? randomUUID();
  try {
    await pgTransaction(ctx.pool, async (client) => {
      // Copies that leave the relay's lazy payload unparsed: the text is what is written.
      let message = copyKeepingPayloadLazy(item.outbox, { id: outboxId });
      if (item.keyWhileOpen !== undefined) {
        const { rows } = await pgQuery<{ held: boolean }>(client, `SELECT ${openRelayedRowWithKey(ctx.names.outbox, '$1', '$2')} AS held`, [item.keyWhileOpen.key, item.keyWhileOpen.source]);
        if (rows[0]?.held === true) message = copyKeepingPayloadLazy(message, { key: item.keyWhileOpen.key });
      }
      await outboxInsert(ctx.names, client, message, defaults);
      const { rowCount } = await pgQuery(
        client,
        `UPDATE ${ctx.names.inbox} t
            SET state = 'processed', processed_at = pg_catalog.clock_timestamp(), updated_at = pg_catalog.clock_timestamp(),
                lease_expires_at = NULL, last_error = NULL
           FROM (SELECT $1::uuid AS id, $2::uuid AS token) s
          WHERE t.id = s.id AND ${FENCE}`,
        [item.id, item.token],
      );
      if (rowCount !== 1) throw new ForwardClaimLost();
    });
    return true;
  } catch (error) {
    if (error instanceof ForwardClaimLost) return false;
    if (isConnectionLost(error) && (await forwardLanded(ctx, item, outboxId))) return true;
    throw error;
  }
}

/**
 * Whether the forward of `item` committed although its connection ended under it: its row
 * `processed` under its token, with the outbox row `outboxId` it wrote. A row another claim
 * finished has another token; one this claim's token finished through another forward lacks that
 * outbox row. First a wait for the row's lock, bounded by the lease as a fenced write's: a COMMIT
 * the server is still finishing holds it, and a read before it ends would not see its outcome.
 * False when either statement fails: the outcome stays unknown, and the forward's own error is
 * what the caller gets.
 */
async function forwardLanded(ctx: PgContext, item: InboxForwardItem, outboxId: string): Promise<boolean> {
  try {
    await pgQuery(ctx.pool, `SELECT 1 FROM ${ctx.names.inbox} t WHERE t.id = $1 AND t.claim_token = $2 AND ${lockWithinLease('t')} FOR SHARE OF t`, [item.id, item.token]);
    const { rows } = await pgQuery<{ landed: boolean }>(
      ctx.pool,
      `SELECT EXISTS (SELECT 1 FROM ${ctx.names.inbox} t WHERE t.id = $1 AND t.state = 'processed' AND t.claim_token = $2)
          AND EXISTS (SELECT 1 FROM ${ctx.names.outbox} o WHERE o.id = $3) AS landed`,
      [item.id, item.token, outboxId],
    );
    return rows[0]?.landed === true;
  } catch {
    return false;
  }
}

/**
 * Forwards a batch in one statement (so in one transaction): the fenced mark `processed` of every
 * item, and an outbox row for each item the mark changed, inserted in the items' order, with
 * `keyWhileOpen.key` instead of its key while an open row relayed from that source has it (the
 * batch holds one row per aggregate, so no row of the statement is another's earlier row). Items
 * whose claim was lost get neither. Returns the ids forwarded. Any error (one row the outbox
 * refuses fails them all) changes nothing; the relay then forwards the batch row by row. The
 * server answers with the positions of the items it did not mark (as `fencedChangedIds`).
 *
 * The outbox rows' ids are chosen here (unless a message has one), so a statement sent again
 * after its connection was lost (`fencedQuery`) carries the ids its first run wrote; the resent
 * statement's answer says it was sent again, and the items it did not mark are then looked up
 * (`forwardedEarlier`): those its first run forwarded count as forwarded, not as lost claims.
 */
export async function inboxForwardMany(ctx: PgContext, items: InboxForwardItem[], defaults: { maxAttempts: number }): Promise<string[]> {
  if (items.length === 0) return [];
  // An inbox row given twice would be marked once and forwarded twice (one outbox row per item).
  const ids = new Set<string>();
  for (const item of items) {
    const id = item.id.toLowerCase();
    if (ids.has(id)) throw new UsageError(`inboxForwardMany: inbox row ${item.id} is given twice in one batch; nothing was written`);
    ids.add(id);
  }
  const outboxIds = items.map((i) => i.outbox.id ?? randomUUID());
  const statement = forwardManyStatement(ctx.names);
  const { rows } = await fencedQuery<{ n: number; resent?: boolean }>(
    ctx.pool,
    statement.text,
    [
      ...claimArrayParams(ctx.pool, items.map((i) => i.id), items.map((i) => i.token)),
      outboxIds,
      items.map((i) => i.outbox.topic),
      items.map((i) => i.outbox.key ?? null),
      items.map((i) => i.outbox.payloadText ?? JSON.stringify(i.outbox.payload)),
      items.map((i) => JSON.stringify(i.outbox.headers ?? {})),
      items.map((i) => i.outbox.maxAttempts ?? defaults.maxAttempts),
      items.map((i) => (i.outbox.scheduledAt === undefined ? null : i.outbox.scheduledAt)),
      items.map((i) => i.outbox.delayMs ?? 0),
      items.map((i) => serializeTraceContext(i.outbox.trace)),
      items.map((i) => i.keyWhileOpen?.key ?? null),
      items.map((i) => i.keyWhileOpen?.source ?? null),
    ],
    statement.resent,
  );
  const notForwarded = rows.length > 0 && rows[0]!.resent === true ? await forwardedEarlier(ctx, items, outboxIds, rows) : rows;
  return idsChanged(items.map((i) => i.id), notForwarded);
}

/** The batched forward's statements by table pair: as first sent, and as sent again after a lost connection (built once each). */
const forwardManyStatements = new Map<string, { text: string; resent: string }>();

/**
 * The batched forward of `names` (bind parameters: the arrays of `inboxForwardMany`). Its answer
 * is the positions `n` (1-based) of the items it did not mark; the resent statement's rows also
 * carry `resent` (the same statement otherwise: the fence decides again, and its insert only
 * follows its own mark, so the first run's rows never get a second outbox row).
 */
function forwardManyStatement(names: PgNames): { text: string; resent: string } {
  const cached = forwardManyStatements.get(`${names.inbox} ${names.outbox}`);
  if (cached !== undefined) return cached;
  const text = (resent: boolean) => `WITH s AS (
       SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::text[], $5::text[], $6::jsonb[], $7::jsonb[],
                            $8::integer[], $9::timestamptz[], $10::double precision[], $11::jsonb[], $12::text[], $13::text[])
                WITH ORDINALITY AS s(id, token, outbox_id, topic, key, payload, headers, max_attempts, scheduled_at, delay_ms, trace_context,
                                     other_key, other_source, ord)
     ),
     marked AS (
       UPDATE ${names.inbox} t
          SET state = 'processed', processed_at = pg_catalog.clock_timestamp(), updated_at = pg_catalog.clock_timestamp(),
              lease_expires_at = NULL, last_error = NULL
         FROM s
        WHERE t.id = s.id AND ${FENCE}
    RETURNING t.id
     ),
     forwarded AS (
       INSERT INTO ${names.outbox} (id, topic, key, payload, headers, max_attempts, scheduled_at, trace_context)
       SELECT s.outbox_id, s.topic,
              CASE WHEN s.other_key IS NOT NULL AND ${openRelayedRowWithKey(names.outbox, 's.other_key', 's.other_source')}
                   THEN s.other_key ELSE s.key END,
              s.payload, s.headers, s.max_attempts,
              COALESCE(s.scheduled_at, pg_catalog.clock_timestamp() + ${msInterval('s.delay_ms')}), s.trace_context
         FROM s JOIN marked ON marked.id = s.id
        ORDER BY s.ord
    RETURNING 1
     )
     -- the positions of the items not marked (claims lost), not the ids of those that were
     SELECT s.ord::int AS n${resent ? ', true AS resent' : ''} FROM s WHERE NOT EXISTS (SELECT 1 FROM marked m WHERE m.id = s.id)`;
  const statement = { text: text(false), resent: text(true) };
  forwardManyStatements.set(`${names.inbox} ${names.outbox}`, statement);
  return statement;
}

/**
 * `notMarked` (the resent forward's answer) less the items its earlier run forwarded: row
 * `processed` under the item's token, with the outbox row of the item's id (chosen by this call
 * unless the message had one, so no other forward wrote it). A row another claim finished has
 * another token; one this claim's token finished through another forward lacks that outbox row:
 * both stay not forwarded.
 *
 * A statement of its own, after the resent one: an earlier run that commits while the resent one
 * waits for its rows' locks does so after the resent statement's snapshot (which a read within it
 * would use), but before the resent statement ends — it waited for every row that run held — so
 * before this read. When the read fails, `notMarked` is the answer: rows reported lost that were
 * forwarded, as before the read existed, but nothing forwarded a second time (an error would send
 * the relay to forward the batch again row by row).
 */
async function forwardedEarlier(ctx: PgContext, items: InboxForwardItem[], outboxIds: string[], notMarked: Array<{ n: number }>): Promise<Array<{ n: number }>> {
  const at = notMarked.map((r) => r.n - 1);
  try {
    const { rows } = await pgQuery<{ n: number }>(
      ctx.pool,
      `SELECT a.n FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::int[]) AS a(id, token, outbox_id, n)
        WHERE EXISTS (SELECT 1 FROM ${ctx.names.inbox} t WHERE t.id = a.id AND t.state = 'processed' AND t.claim_token = a.token)
          AND EXISTS (SELECT 1 FROM ${ctx.names.outbox} o WHERE o.id = a.outbox_id)`,
      [
        ...claimArrayParams(ctx.pool, at.map((i) => items[i]!.id), at.map((i) => items[i]!.token)),
        at.map((i) => outboxIds[i]!),
        notMarked.map((r) => r.n),
      ],
    );
    const earlier = new Set(rows.map((r) => r.n));
    return notMarked.filter((r) => !earlier.has(r.n));
  } catch {
    return notMarked;
  }
}

/** Fenced retry: back to `pending`, `attempt + 1`, due after `delayMs`; returns ids changed. */
export async function inboxRetryMany(ctx: PgContext, p: { items: RetryItem[] }): Promise<string[]> {
  return fencedRetryMany(ctx.pool, ctx.names.inbox, p.items);
}

/** Fenced `dead`; returns ids changed. */
/** Fenced: claimed push rows the relay wrote nothing for back to `pending`, attempt unchanged. */
export async function inboxReleaseMany(ctx: PgContext, p: { claims: ClaimRef[] }): Promise<string[]> {
  return fencedReleaseMany(ctx.pool, ctx.names.inbox, p.claims);
}

export async function inboxMarkDeadMany(ctx: PgContext, p: { items: DeadItem[] }): Promise<string[]> {
  return fencedDeadMany(ctx.pool, ctx.names.inbox, p.items);
}

/**
 * Expired `processing` push rows back to `pending` with `attempt + 1`, or `dead` when the lost
 * forward was the row's last of the relay's `maxAttempts`; gated by the shared throttle
 * `reclaim:<inbox table>`. Pull rows are left alone: the pull claim takes expired rows itself.
 */
export async function inboxReclaimExpired(ctx: PgContext, p: { throttleMs?: number; maxAttempts: number }): Promise<ReclaimResult> {
  return reclaimExpired(ctx, ctx.names.inbox, `reclaim:${ctx.names.inboxTable}`, p.throttleMs, { maxAttempts: '$3::int', call: 'forward' }, `t.consumption = 'push'`, [p.maxAttempts]);
}

/** Counts per state and the age in seconds of the oldest due pending row (push and pull); `pendingOnly` (the relay's gauge): push rows only. */
export async function inboxStats(ctx: PgContext, scope: StatsScope = {}): Promise<TableStats> {
  const read = () => tableStats(ctx.pool, ctx.names.inbox, ['pending', 'processing', 'processed', 'dead'], `consumption = 'push'`, scope);
  if (scope.onceEveryMs === undefined) return read();
  return (await gatedRead(ctx, gaugeGateName(ctx.names.inboxTable), scope.onceEveryMs, read)) ?? SKIPPED_STATS;
}

/** The latest dead rows, newest first; `topicOrSource` is the source. */
export async function inboxDeadList(ctx: PgContext, p: { limit: number }): Promise<DeadRowSummary[]> {
  return deadList(ctx.pool, ctx.names.inbox, 'source', p.limit);
}

/**
 * Deletes at most `limit` `processed` or `dead` rows created more than `olderThanMs` ago; rows of
 * the `keep` sources only once also older than `keep.olderThanMs` (their keys answer replays).
 * As `outboxDeleteFinished`: rows locked as picked, their state tested again by the DELETE itself.
 */
export async function inboxDeleteFinished(ctx: PgContext, p: DeleteFinishedParams): Promise<number> {
  if (p.state !== 'processed' && p.state !== 'dead') throw new UsageError(`inbox retention deletes only processed or dead rows, not ${p.state}`);
  const { rowCount } = await pgQuery(
    ctx.pool,
    `WITH picked AS MATERIALIZED (
       SELECT id FROM ${ctx.names.inbox}
        WHERE state = $1 AND created_at < pg_catalog.clock_timestamp() - ${msInterval('$2')}
          AND (source <> ALL($4::text[]) OR created_at < pg_catalog.clock_timestamp() - ${msInterval('$5')})
        LIMIT $3
        FOR UPDATE SKIP LOCKED)
     DELETE FROM ${ctx.names.inbox} i USING picked WHERE i.id = picked.id AND i.state = $1`,
    [p.state, p.olderThanMs, p.limit, p.keep?.sources ?? [], p.keep?.olderThanMs ?? 0],
  );
  return rowCount ?? 0;
}
