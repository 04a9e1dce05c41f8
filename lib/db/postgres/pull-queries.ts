/**
 * PostgreSQL pull operations (driver methods `pull*`, spec §6, seed: pull worker).
 *
 * The claim is one statement with `FOR UPDATE SKIP LOCKED`, after a per-source claim lock. It
 * returns at most one row per (source, aggregate), because only the aggregate's *head* can be a
 * candidate: the open (`pending`/`processing`) row with the lowest `sequence` (receive order),
 * and only while no other row of the aggregate is under a live lease. A later row of the
 * aggregate is never a candidate while an earlier one is open — also not while the earlier row
 * waits for a retry (`pending`, not due), which is what keeps per-aggregate handling in receive
 * order. The claim lock makes claims of one source see each other's committed claims (a row that
 * commits late cannot go in flight beside a later row of its aggregate claimed meanwhile).
 *
 * Every other write is fenced on id + `processing` + token + `lease_expires_at >
 * clock_timestamp()` and reports true only when exactly one row changed.
 */
import type { ClaimRef, DeadItem, InboxRow, RetryItem } from '../driver.ts';
import { msInterval, type PgContext } from './context.ts';
import { oncePerNames, OLDEST_WINDOW, windowLeftRoom } from './claim-text.ts';
import { PINNED_CLAIM_PLAN } from './claim-functions.ts';
import { claimSet, fencedQuery, fencedWriteCount, LEASE_START, lockWithinLease } from './fenced-writes.ts';
import { CLAIM_LOCK_IDLE_SETTING, claimPositionSetConfig, claimPositionSetting, claimPositionValues, epochMicros, fromMicros, nextClaimPosition, toInboxRow, type ClaimPosition, type ClaimPositionRow, type InboxDbRow } from './inbox-queries.ts';
import { LOOK_AHEAD } from './outbox-queries.ts';
import type { PgNames } from './names.ts';
import { epochMs } from './epoch-time.ts';
import { leaseWithinBudget } from '../statement-budget.ts';
import { pgClaimQuery, pgQuery, pgTransaction, type PgQueryable } from './pg-pool.ts';

/** The pull fence on `$1` (id) and `$2` (token), with `bound` bounding the lock wait by the lease. */
const pullFence = (bound: string) => `id = $1 AND consumption = 'pull' AND state = 'processing' AND claim_token = $2 AND lease_expires_at > pg_catalog.clock_timestamp() AND ${bound}`;
const FENCE = pullFence(lockWithinLease(''));

/**
 * Claims up to `limit` rows of one pull source: due `pending` rows and `processing` rows whose
 * lease expired (no separate reclaim; the lost lease counts as a failed attempt, `LOST_LEASE_SET`), at most one per aggregate (its head), none of an aggregate
 * with a row under a live lease; rows without aggregate (NULL or `''`) freely; due retries
 * (`attempt > 0`) first, then first attempts in `scheduled_at, created_at, id` order — the oldest
 * open rows, and when their aggregates are busy (the window gave less than half the batch), the
 * heads that can move among a bounded read past the window and rows without aggregate, merged in
 * that one order. The bounded read, as the relay's (`inboxClaimPushMany`): the next `LOOK_AHEAD`
 * batches of open rows of the source past the sweep position (up to its horizon, then from the
 * start again) and the heads of the next `LOOK_AHEAD` batches' worth of the source's open
 * aggregates past the aggregate cursor (a loose scan of the source's head index, wrapping to the
 * first), a batch being at least `PULL_READ_FLOOR` rows, carried from claim to claim of the driver
 * and source (`ClaimPosition`): a claim's work does not grow with the number of open aggregates,
 * and the wait of a row that can move is bounded by `pullClaimBound` (docs/pull-workers.md). Claims of one source run one at a time (`pg_advisory_xact_lock` on table and source,
 * taken in an earlier statement), so each claim's snapshot includes every claim committed before
 * it: a row that commits late, behind a later row of its aggregate already claimed, waits. The
 * claim commits before it returns, so it is durable before any handler runs.
 */
export async function pullClaimMany(ctx: PgContext, p: { source: string; limit: number; leaseMs: number }): Promise<InboxRow[]> {
  let positions = pullPositions.get(ctx.names);
  if (positions === undefined) pullPositions.set(ctx.names, (positions = new Map()));
  const rows = await pgTransaction(ctx.pool, async (client) => {
    // Waits while another claim holds it, as long as the statement may run (the time left in a pass):
    // `pgTransaction` sets no `lock_timeout` for it, whatever the role's.
    await pgQuery(client, `SELECT pg_advisory_xact_lock(hashtext($1), hashtext($2)), ${CLAIM_LOCK_IDLE_SETTING}, ${claimPositionSetConfig(3)}`, [`queuebox_pull_claim_${ctx.names.inbox}`, p.source, ...claimPositionValues(positions.get(p.source))]);
    return (await pgClaimQuery<Partial<InboxDbRow> & ClaimPositionRow>(client, pullClaimText(ctx.names), () => [p.source, p.limit, leaseWithinBudget(p.leaseMs)], ctx.prepared, PINNED_CLAIM_PLAN)).rows;
  });
  const next = nextClaimPosition(rows);
  if (next !== undefined) positions.set(p.source, next);
  // A claim that took nothing answers one row without an id: the position only.
  return rows.filter((r): r is InboxDbRow & ClaimPositionRow => r.id !== null && r.id !== undefined).map(toInboxRow);
}

/**
 * The fewest rows the sweep and aggregates the turn read past a blocked window, whatever the
 * claim's limit. A pull claim's limit is its worker's free handler slots, often 1: reads sized by
 * it spent themselves on the aggregates in a handler (with 45 slots busy, a new aggregate's row
 * waited 27 claims, each followed by a poll interval). With this floor, a source with up to this
 * many open aggregates has every one read at each claim past a blocked window (the turn wraps),
 * as an unbounded read would; past it a claim's reads stay this size however many aggregates are
 * open (and rows due since the sweep began are read apart: a new aggregate's row waits for no
 * turn). Measured at 50,000 open aggregates, a claim of 100 with its window blocked: 6,300 buffers
 * (16 ms), 1.5x an unblocked claim (1.7x with a sweep and a turn carried; 200 made it 1.95-2.1x);
 * reading every open aggregate's head, 456,000 (500 ms).
 */
export const PULL_READ_FLOOR = 100;

/**
 * The bound of the pull claim's order (docs/pull-workers.md), the relay's (`inboxClaimBound`) with
 * reads of at least `PULL_READ_FLOOR`: a due first attempt that can move is claimed within this
 * many claims of its source by one worker (one driver: each carries its own position; claims
 * filled by due retries aside), `queued` being the number of due open rows of the source at the
 * moment it can move, `inFlight` its rows under a live lease then, `limit` the claims' row limit.
 * A row in a handler counts as a queued one: its lease may end before the row is claimed, and it
 * then comes back older than the row (and the sweep reads it anyway, an open row).
 */
export function pullClaimBound(queued: number, inFlight: number, limit: number): number {
  const ahead = queued + inFlight;
  return Math.ceil(ahead / Math.ceil(limit / 2)) + 2 * Math.ceil(ahead / (LOOK_AHEAD * Math.max(limit, PULL_READ_FLOOR))) + 3;
}

/** The pull claims' positions, by driver (its table names) and source. */
const pullPositions = new WeakMap<PgNames, Map<string, ClaimPosition>>();

/** Claimable by state: due pending, or processing with an expired lease. */
const CLAIMABLE = (a: string) => `((${a}.state = 'pending' AND ${a}.scheduled_at <= pg_catalog.clock_timestamp())
            OR (${a}.state = 'processing' AND ${a}.lease_expires_at <= pg_catalog.clock_timestamp()))`;

/**
 * What the claim of an expired row counts (the SET sees the row before the claim): its lost lease
 * is a failed attempt, `attempt + 1`, and `last_error` says so. The worker dead-letters a row
 * whose `attempt` reached its `maxAttempts` before running a handler (`handlePullMessage`).
 */
const LOST_LEASE_SET = `attempt = CASE WHEN i.state = 'processing' THEN i.attempt + 1 ELSE i.attempt END,
            last_error = CASE WHEN i.state = 'processing'
              THEN 'lease expired during attempt ' || (i.attempt + 1) || ' (the handler did not finish within its lease)'
              ELSE i.last_error END`;

/**
 * The pull claim statement of `names` (bind parameters: `$1` the source, `$2` the limit, `$3` the
 * lease in ms; the position from the transaction's settings, `ClaimPosition`). Every row it answers
 * carries the next position (`next_*`); a claim that takes nothing answers one row with a NULL `id`
 * that carries it.
 */
export const pullClaimText = oncePerNames((names) => {
  const t = names.inbox;
  const look = `GREATEST($2::int, ${PULL_READ_FLOOR}) * ${LOOK_AHEAD}`;
  const room = windowLeftRoom('$2');
  const sweepAt = fromMicros(claimPositionSetting('at', 'bigint'), `'-infinity'::timestamptz`);
  const sweepCreated = fromMicros(claimPositionSetting('tie', 'bigint'), `'-infinity'::timestamptz`);
  const sweepId = `COALESCE(${claimPositionSetting('id', 'uuid')}, '00000000-0000-0000-0000-000000000000'::uuid)`;
  const sweep = `(${sweepAt}, ${sweepCreated}, ${sweepId})`;
  const horizon = fromMicros(claimPositionSetting('horizon', 'bigint'), 'pg_catalog.statement_timestamp()');
  const cursor = claimPositionSetting('aggregate', 'text');
  const left = `GREATEST(0, $2 - (SELECT count(*) FROM retried) - (SELECT count(*) FROM oldest))`;
  // an open pull row of source $1 (the predicate of the pull indexes, for alias `a`)
  const open = (a: string) => `${a}.source = $1 AND ${a}.consumption = 'pull' AND ${a}.state IN ('pending', 'processing')`;
  const noAggregate = `(c.aggregate_id IS NULL OR c.aggregate_id = '')`;
  const free = (c: string, aggregate: string) => `NOT EXISTS (
                SELECT 1 FROM ${t} b
                 WHERE b.source = $1 AND b.consumption = 'pull' AND b.aggregate_id = ${aggregate}
                   AND b.state = 'processing' AND b.lease_expires_at > pg_catalog.clock_timestamp() AND b.id <> ${c}.id)`;
  const freeHead = `-- only the head: no open row of the aggregate received earlier
                NOT EXISTS (
                  SELECT 1 FROM ${t} h
                   WHERE ${open('h')} AND h.aggregate_id = c.aggregate_id AND h.sequence < c.sequence)
                -- and no row of the aggregate under a live lease
                AND ${free('c', 'c.aggregate_id')}`;
  // of a read of open rows (`rows`: a CTE's name or a subquery), the heads that can move: tested
  // only on the first row of each aggregate there (the others have an earlier open row of their
  // aggregate in the same snapshot), joined back by ctid
  const headsAmong = (rows: string) => `
       SELECT c.id, c.ctid, a.scheduled_at, a.created_at FROM (
           SELECT f.ctid, f.scheduled_at, f.created_at, f.sequence, f.aggregate_id,
                  min(f.sequence) OVER (PARTITION BY f.aggregate_id) AS first_of_aggregate
             FROM ${rows} f) a
         JOIN ${t} c ON c.ctid = a.ctid
        WHERE a.aggregate_id > '' AND a.sequence = a.first_of_aggregate
          AND ${open('c')} AND c.attempt = 0 AND ${CLAIMABLE('c')} AND (${noAggregate} OR (${freeHead}))
          AND c.id NOT IN (SELECT id FROM oldest)
     `;
  // the columns the turn reads of an aggregate's head (for alias `a`)
  const headColumns = (a: string) => `${a}.aggregate_id, ${a}.id, ${a}.ctid, ${a}.state, ${a}.attempt, ${a}.scheduled_at, ${a}.created_at, ${a}.lease_expires_at`;
  // a part of the turn: a recursive loose scan of the head index from the first open aggregate
  // matching `start` (its rows numbered from `first`), each next one past the previous (and
  // matching `upTo`), until the turn has `look` aggregates
  const turnPart = (name: string, start: string, first: string, upTo: string) => `${name} AS (
       (SELECT ${headColumns('k')}, ${first} AS n FROM ${t} k
         WHERE ${open('k')} AND ${start} ${upTo} AND ${room}
         ORDER BY k.aggregate_id, k.sequence LIMIT 1)
       UNION ALL
       SELECT ${headColumns('n')}, a.n + 1
         FROM ${name} a
         CROSS JOIN LATERAL (
           SELECT ${headColumns('k')} FROM ${t} k
            WHERE ${open('k')} AND k.aggregate_id > a.aggregate_id ${upTo}
            ORDER BY k.aggregate_id, k.sequence LIMIT 1) n
        WHERE a.n < ${look}
     )`;
  return `WITH RECURSIVE
     retried AS (
       SELECT c.id FROM ${t} c
        WHERE ${open('c')} AND c.attempt > 0 AND ${CLAIMABLE('c')}
          AND (${noAggregate} OR (${freeHead}))
        ORDER BY c.scheduled_at, c.created_at, c.id
        LIMIT $2
        FOR UPDATE SKIP LOCKED
     ),
     -- the oldest rows in index order, joined back by ctid (see the outbox claim)
     oldest AS (
       SELECT c.id FROM (
           SELECT w.ctid, w.scheduled_at, w.created_at, w.id FROM ${t} w
            WHERE ${open('w')}
            ORDER BY w.scheduled_at, w.created_at, w.id
            LIMIT $2 * ${OLDEST_WINDOW}) w
         JOIN ${t} c ON c.ctid = w.ctid
        WHERE ${open('c')} AND c.attempt = 0 AND ${CLAIMABLE('c')}
          AND (${noAggregate} OR (${freeHead}))
        ORDER BY w.scheduled_at, w.created_at, w.id
        LIMIT $2
        FOR UPDATE OF c SKIP LOCKED
     ),
     -- past the window, only when it left room (see windowLeftRoom). The sweep: the source's next
     -- open rows past its position (at a sweep's start, past the window: skipped in the index, not
     -- tested again), up to its horizon
     ahead AS (
       SELECT w.ctid, w.scheduled_at, w.created_at, w.id, w.sequence, w.aggregate_id FROM ${t} w
        WHERE ${open('w')}
          -- never past now, whatever the carried horizon says (a clock stepped back, a failover)
          AND w.scheduled_at <= LEAST(${horizon}, pg_catalog.statement_timestamp())
          AND (w.scheduled_at, w.created_at, w.id) > ${sweep}
          AND ${room}
        ORDER BY w.scheduled_at, w.created_at, w.id
        LIMIT ${look} OFFSET CASE WHEN ${claimPositionSetting('at', 'bigint')} IS NULL THEN $2 * ${OLDEST_WINDOW} ELSE 0 END
     ),
     -- ... of which the heads that can move (rows without aggregate come from their own index),
     -- tested only on the first row of each aggregate there: the others have an earlier open row
     -- of their aggregate in the same snapshot (a backlog behind a row in flight: one probe, not
     -- one per row)
     ahead_heads AS (${headsAmong('ahead')}),
     -- the rows due since the sweep's horizon (it reads them in its next round), their first
     -- look rows, of which the heads that can move: a new aggregate's row does not wait for the
     -- sweep to come round while the older open aggregates keep the window and the turn busy
     fresh AS (${headsAmong(`(
               SELECT w.ctid, w.scheduled_at, w.created_at, w.id, w.sequence, w.aggregate_id FROM ${t} w
                WHERE ${open('w')} AND ${claimPositionSetting('horizon', 'bigint')} IS NOT NULL
                  AND w.scheduled_at > ${horizon} AND w.scheduled_at <= pg_catalog.statement_timestamp()
                  AND ${room}
                ORDER BY w.scheduled_at, w.created_at, w.id
                LIMIT ${look})`)}),
     -- the turn: the source's next open aggregates after the cursor (NULL: the first), at most as
     -- many as the sweep reads rows, one index probe each (a loose scan of the head index), which
     -- reads the aggregate's head too: the head index's first entry past the previous aggregate;
     -- when fewer are left after the cursor, on from the first aggregate up to the cursor (below)
     ${turnPart('open_aggregates', `k.aggregate_id > COALESCE(${cursor}, '')`, '1', '')},
     -- ... wrapped in the claim: a turn never stops short of the aggregates before the cursor, so
     -- that an aggregate before it is not left unread while the cursor waits on a head after it
     ${turnPart('wrapped', `k.aggregate_id > '' AND (SELECT count(*) FROM open_aggregates) < ${look}`, '(SELECT count(*) FROM open_aggregates) + 1', `AND k.aggregate_id <= ${cursor}`)},
     turn AS (
       SELECT * FROM open_aggregates
       UNION ALL
       SELECT * FROM wrapped
     ),
     -- the heads of those aggregates that can move: claimable, first attempt, nothing of it under a live lease
     heads AS (
       SELECT h.id, h.ctid, h.scheduled_at, h.created_at, h.aggregate_id, h.n
         FROM turn h
        WHERE h.attempt = 0 AND ${CLAIMABLE('h')}
          AND ${free('h', 'h.aggregate_id')}
          AND h.id NOT IN (SELECT id FROM oldest)
     ),
     keyless AS (
       SELECT k.id, k.ctid, k.scheduled_at, k.created_at FROM ${t} k
        WHERE ${open('k')} AND k.attempt = 0 AND (k.aggregate_id IS NULL OR k.aggregate_id = '') AND ${CLAIMABLE('k')}
          AND k.id NOT IN (SELECT id FROM oldest) AND ${room}
        ORDER BY k.scheduled_at, k.created_at, k.id
        LIMIT $2
     ),
     -- the heads and the rows without aggregate, in one claim order (a row without aggregate never
     -- waits for younger heads, nor a head for younger rows without aggregate: the wait of a row
     -- that can move is bounded, see pullClaimBound)
     merged AS (
       SELECT id, ctid, scheduled_at, created_at FROM ahead_heads
       UNION
       SELECT id, ctid, scheduled_at, created_at FROM fresh
       UNION
       SELECT id, ctid, scheduled_at, created_at FROM heads
       UNION ALL
       SELECT id, ctid, scheduled_at, created_at FROM keyless
     ),
     -- ... locked in claim order, joined back by ctid as the window is (joined by id, a plan kept
     -- from a few rows drove the join from a scan of the source's index), until the batch is full
     taken AS (
       SELECT m.id, m.scheduled_at, m.created_at
         FROM merged m
         JOIN ${t} c ON c.ctid = m.ctid
        -- still claimable, tested in an OR no index serves (the source and the consumption,
        -- which never change, are not tested again): the ctid is the way in
        WHERE ${CLAIMABLE('c')}
        ORDER BY m.scheduled_at, m.created_at, m.id
        LIMIT ${left}
        FOR UPDATE OF c SKIP LOCKED
     ),
     -- where the next claim of the source reads on (as the relay claim's)
     sweep AS (
       SELECT CASE
                WHEN NOT ${room} THEN 'keep'
                WHEN (SELECT count(*) FROM taken) >= ${left}
                 AND (l.scheduled_at IS NULL OR (l.scheduled_at, l.created_at, l.id) <= ${sweep}) THEN 'keep'
                WHEN (SELECT count(*) FROM taken) >= ${left}
                 AND (l.scheduled_at, l.created_at, l.id) < (e.scheduled_at, e.created_at, e.id) THEN 'taken'
                WHEN (SELECT count(*) FROM ahead) < ${look} THEN 'start'
                ELSE 'ahead'
              END AS next,
              l.scheduled_at AS taken_at, l.created_at AS taken_created, l.id AS taken_id,
              e.scheduled_at AS ahead_at, e.created_at AS ahead_created, e.id AS ahead_id,
              CASE
                WHEN NOT ${room} THEN ${cursor}
                -- just before the first aggregate, in the turn's order, whose head the turn found and
                -- the batch did not take (the cursor as it was when that is the turn's first)
                WHEN u.n = 1 THEN ${cursor}
                WHEN u.n IS NOT NULL THEN (SELECT k.aggregate_id FROM turn k WHERE k.n = u.n - 1)
                -- a full turn: past its last aggregate; else every open aggregate was read: the first next
                WHEN (SELECT count(*) FROM turn) >= ${look} THEN (SELECT k.aggregate_id FROM turn k ORDER BY k.n DESC LIMIT 1)
              END AS next_aggregate
         FROM (SELECT NULL) one
         LEFT JOIN LATERAL (SELECT scheduled_at, created_at, id FROM taken ORDER BY scheduled_at DESC, created_at DESC, id DESC LIMIT 1) l ON true
         LEFT JOIN LATERAL (SELECT scheduled_at, created_at, id FROM ahead ORDER BY scheduled_at DESC, created_at DESC, id DESC LIMIT 1) e ON true
         LEFT JOIN LATERAL (SELECT min(n) AS n FROM heads WHERE id NOT IN (SELECT id FROM taken)) u ON true
     ),
     next_position AS (
       SELECT CASE next WHEN 'keep' THEN ${claimPositionSetting('at', 'bigint')} WHEN 'taken' THEN ${epochMicros('taken_at')} WHEN 'ahead' THEN ${epochMicros('ahead_at')} END::text AS next_at,
              CASE next WHEN 'keep' THEN ${claimPositionSetting('tie', 'bigint')} WHEN 'taken' THEN ${epochMicros('taken_created')} WHEN 'ahead' THEN ${epochMicros('ahead_created')} END::text AS next_tie,
              CASE next WHEN 'keep' THEN ${claimPositionSetting('id', 'uuid')} WHEN 'taken' THEN taken_id WHEN 'ahead' THEN ahead_id END::text AS next_id,
              CASE WHEN next = 'start' OR (next = 'keep' AND ${claimPositionSetting('at', 'bigint')} IS NULL) THEN NULL ELSE ${epochMicros(horizon)} END::text AS next_horizon,
              NULL::text AS next_source,
              next_aggregate::text AS next_aggregate
         FROM sweep
     ),
     candidates AS (
       SELECT id FROM retried
       UNION ALL
       SELECT id FROM oldest
       UNION ALL
       SELECT id FROM taken
       LIMIT $2
     ),
     -- by id from the array of candidates, not a join (see the outbox claim)
     claimed AS (
     UPDATE ${t} i
        SET ${claimSet('$3')},
            ${LOST_LEASE_SET}
      WHERE i.id = ANY (ARRAY(SELECT id FROM candidates))
  RETURNING i.id, i.source, i.idempotency_key, i.aggregate_id, i.event_type, i.payload::text AS payload_text, i.headers,
            i.correlation_id, i.attempt, i.created_at, i.scheduled_at, i.claim_token,
            i.lease_expires_at, i.trace_context)
     -- UPDATE ... RETURNING does not keep the candidates' order; restore the claim order here,
     -- in the database, where timestamps keep their microseconds. Times are read as ms since
     -- the epoch: pg parses timestamps in no other DateStyle than ISO (epoch-time.ts). Every row
     -- carries the next position; none claimed: one row without an id, for the position.
     SELECT c.id, c.source, c.idempotency_key, c.aggregate_id, c.event_type, c.payload_text, c.headers, c.correlation_id, c.attempt,
            ${epochMs('c.created_at')} AS created_ms, c.claim_token, ${epochMs('c.lease_expires_at')} AS lease_expires_ms, c.trace_context, p.*
       FROM next_position p LEFT JOIN claimed c ON true
      ORDER BY c.attempt = 0, c.scheduled_at, c.created_at, c.id`;
});

/** Fenced lease renewal: the lease becomes the statement's start (`LEASE_START`, db clock) + `leaseMs`. */
export async function pullRenew(ctx: PgContext, p: ClaimRef & { leaseMs: number }): Promise<boolean> {
  const { rowCount } = await fencedQuery(
    ctx.pool,
    `UPDATE ${ctx.names.inbox} SET lease_expires_at = ${LEASE_START} + ${msInterval('$3')} WHERE ${FENCE}`,
    () => [p.id, p.token, leaseWithinBudget(p.leaseMs)],
  );
  return rowCount === 1;
}

/**
 * Fenced `processed`, through `db` (the caller's open transaction): one statement, which leaves
 * the transaction's `lock_timeout` as it found it (`fencedWriteCount`).
 */
export async function pullComplete(ctx: PgContext, db: PgQueryable, c: ClaimRef): Promise<boolean> {
  const written = await fencedWriteCount(
    db,
    (bound) => `UPDATE ${ctx.names.inbox}
        SET state = 'processed', processed_at = pg_catalog.clock_timestamp(), lease_expires_at = NULL,
            last_error = NULL, updated_at = pg_catalog.clock_timestamp()
      WHERE ${pullFence(bound)}
      RETURNING id`,
    [c.id, c.token],
  );
  return written === 1;
}

/**
 * Sent again after its connection was lost (`fencedQuery`), a write that sends a claimed pull row
 * back to `pending` (a retry, a release) also matches the row already `pending` under its token —
 * its first run committed — and leaves it as that run wrote it (`keep`), so a write that landed is
 * reported as done, not as `ownership-lost`. The token stays on the pending row for that (a claim
 * sets a new one, a replay clears it).
 */
function pullBackToPending(table: string, sets: (keep: (column: string, value: string) => string) => string): (resent: boolean) => string {
  return (resent) => {
    const keep = resent ? (column: string, value: string) => `${column} = CASE WHEN state = 'processing' THEN ${value} ELSE ${column} END` : (column: string, value: string) => `${column} = ${value}`;
    return `UPDATE ${table}
        SET state = 'pending', ${sets(keep)}, claimed_at = NULL, lease_expires_at = NULL,
            updated_at = ${resent ? "CASE WHEN state = 'processing' THEN pg_catalog.clock_timestamp() ELSE updated_at END" : 'pg_catalog.clock_timestamp()'}
      WHERE ${resent ? `((${FENCE}) OR (id = $1 AND consumption = 'pull' AND state = 'pending' AND claim_token = $2 AND lease_expires_at IS NULL))` : FENCE}`;
  };
}

/** Fenced retry: `pending`, `attempt + 1`, due at db clock + `delayMs`, lease cleared (see `pullBackToPending`). */
export async function pullRetry(ctx: PgContext, p: RetryItem): Promise<boolean> {
  const retry = pullBackToPending(
    ctx.names.inbox,
    (keep) => `${keep('attempt', 'attempt + 1')}, ${keep('scheduled_at', `pg_catalog.clock_timestamp() + ${msInterval('$3')}`)}, ${keep('last_error', '$4')}`,
  );
  const { rowCount } = await fencedQuery(ctx.pool, retry(false), [p.id, p.token, p.delayMs, p.error], retry(true));
  return rowCount === 1;
}

/**
 * Fenced `dead` with `error` (attempt unchanged). It keeps `claim_token`: sent again after its
 * connection was lost, it also matches the row already `dead` under this token (its first run
 * committed), so a dead-letter that landed is reported as one, not as `ownership-lost`.
 */
export async function pullMarkDead(ctx: PgContext, p: DeadItem): Promise<boolean> {
  const mark = (resent: boolean) => `UPDATE ${ctx.names.inbox}
        SET state = 'dead', last_error = $3, lease_expires_at = NULL, updated_at = pg_catalog.clock_timestamp()
      WHERE ${resent ? `((${FENCE}) OR (id = $1 AND consumption = 'pull' AND state = 'dead' AND claim_token = $2))` : FENCE}`;
  const { rowCount } = await fencedQuery(ctx.pool, mark(false), [p.id, p.token, p.error], mark(true));
  return rowCount === 1;
}

/**
 * Fenced release of a claimed row that no handler started: back to `pending`, attempt and
 * schedule unchanged, lease cleared, so the next claim can take it at once (see `pullBackToPending`).
 */
export async function pullRelease(ctx: PgContext, c: ClaimRef): Promise<boolean> {
  const release = pullBackToPending(ctx.names.inbox, (keep) => keep('attempt', 'attempt'));
  const { rowCount } = await fencedQuery(ctx.pool, release(false), [c.id, c.token], release(true));
  return rowCount === 1;
}
