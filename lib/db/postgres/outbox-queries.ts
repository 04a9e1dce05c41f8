/**
 * PostgreSQL outbox operations (driver methods `outbox*`).
 *
 * Every finishing write is fenced on id + `processing` + token + `lease_expires_at >
 * clock_timestamp()` and settles a whole batch in one statement via `unnest` of parallel arrays.
 */
import { gaugeGateName, SKIPPED_STATS, type DeadItem, type DeadRowSummary, type DeleteFinishedParams, type ClaimRef, type OutboxClaimedRows, type OutboxMessageInput, type OutboxRow, type ReclaimResult, type ReplayFilter, type RetryItem, type StatsScope, type TableStats } from '../driver.ts';
import { gatedRead } from './maintenance-queries.ts';
import { UsageError } from '../../errors.ts';
import { msInterval, type PgContext } from './context.ts';
import { leaseWithinBudget } from '../statement-budget.ts';
import { pgClaimQuery, pgQuery, type PgQueryable } from './pg-pool.ts';
import { claimRetryingInFlight, oncePerNamesAndLimit, OLDEST_WINDOW, windowLeftRoom } from './claim-text.ts';
import { PINNED_CLAIM_PLAN, runClaimStatement, type ClaimStatement } from './claim-functions.ts';
import { claimFollowers } from './outbox-claim-followers.ts';
import { claimSet, FENCE, fencedChangedIds, fencedDeadMany, fencedReleaseMany, fencedRenewMany, fencedRetryMany, reclaimExpired, type WholeClaim } from './fenced-writes.ts';
import type { PgNames } from './names.ts';
import { deadList, tableStats } from './table-reads.ts';
import { copyKeepingPayloadLazy, withLazyPayload } from '../lazy-payload.ts';
import { binder, replayMove, replayWhere } from './replay-preview.ts';
import { pgOutboxInsertStatement } from './caller-statements.ts';
import { parseStoredTraceContext } from '../../observability/trace-context.ts';
import { randomUUID } from 'node:crypto';
import { claimArrayParams } from './uuid-array.ts';
import { DATE_LIMIT_MS, epochTime } from './epoch-time.ts';


interface OutboxDbRow {
  id: string;
  topic: string;
  key: string | null;
  /** `payload::text`: the stored JSON text, not parsed (a jsonb column would be parsed, and large numbers rounded). */
  payload_text: string;
  headers: Record<string, string>;
  attempt: number;
  max_attempts: number;
  sequence: string;
  replay_count: number;
  /**
   * Epoch microseconds, a bigint's text (`claimedTime`): the same in every DateStyle, and whole,
   * so no `extra_float_digits` rounds it.
   */
  created_us: string;
  claim_token: string;
  lease_expires_us: string;
  trace_context: unknown;
}

function toOutboxRow(r: OutboxDbRow): OutboxRow {
  return withLazyPayload({
    id: r.id,
    topic: r.topic,
    key: r.key,
    payloadText: r.payload_text,
    headers: r.headers,
    attempt: r.attempt,
    maxAttempts: r.max_attempts,
    sequence: r.sequence,
    replayCount: r.replay_count,
    createdAt: epochTime(Number(r.created_us) / 1000),
    claimToken: r.claim_token,
    leaseExpiresAt: epochTime(Number(r.lease_expires_us) / 1000),
    trace: parseStoredTraceContext(r.trace_context),
  });
}

/**
 * Inserts one outbox row through `db` (the caller's transaction or a relay transaction) and returns
 * its id. The id is chosen here — the message's own, else a random UUID, as the column's default
 * (`gen_random_uuid()`) would give — so it is known without reading the answer: an object whose
 * `query` forwards may not hand back the answer of a query that carries a transaction check with
 * the INSERT (`enqueue` through such an object).
 */
export async function outboxInsert(names: PgNames, db: PgQueryable, m: OutboxMessageInput, defaults: { maxAttempts: number }): Promise<string> {
  const id = (m.id ?? randomUUID()).toLowerCase();
  // Not a spread: it would parse a lazy payload (the relay's messages), whose text is what is written.
  const { text, values } = pgOutboxInsertStatement(names, copyKeepingPayloadLazy(m, { id }), defaults);
  await pgQuery(db, text, values);
  return id;
}

/** Keyless: no key, or the empty key. */
const KEYLESS = `(c.key IS NULL OR c.key = '')`;

/**
 * `c` is the head of a key with no row in flight (bind nothing; `c` is the candidate). The
 * in-flight test comes first, so a row of a key in flight (every row of a window a hot key blocks)
 * is turned down before the head test's index probe: one probe of the index of the keys of rows in
 * flight (`<table>_key_busy_idx`, migration 10). It asks for any row in flight, not the key's
 * holder (`key_first`) only: a pass that stops waiting settles its answered rows, the key's first
 * row among them, and leaves a follower whose call is still open `processing` — the key is still
 * held (`follower-left-in-flight.test.ts`). Without that index PostgreSQL intersected a bitmap of
 * every row in flight with the key's rows per candidate: an empty claim at 1,000 keys in flight
 * took 473 ms instead of 33, and grew with the keys in flight (`claim-fairness.test.ts`).
 */
const FREE_HEAD = `NOT EXISTS (
                  SELECT 1 FROM %T b
                   WHERE b.key = c.key AND b.key <> '' AND b.state = 'processing')
                -- the lowest sequence of its key among the rows not finished
                AND NOT EXISTS (
                  SELECT 1 FROM %T h
                   WHERE h.key = c.key
                     AND h.state IN ('pending', 'processing')
                     AND h.sequence < c.sequence)`;

/**
 * `rows` (a subquery of due pending rows with `ctid`, `scheduled_at`, `sequence` and `key`) less
 * the keyed rows that have a row of the same key with a lower `sequence` among `rows`: that row is
 * pending in the same snapshot, so the head test (`FREE_HEAD`) would turn them down — after an
 * index probe each (of the key's lower rows, or of its rows in flight). Keyless rows all stay.
 * What is left is the first row of each key among `rows`, not necessarily its head: that is
 * still for `FREE_HEAD` to say. On a table whose backlog a few keys hold, the full claim's window
 * of 3,000 rows (a batch of 1,000) over 100 keys keeps 100 rows: 100 probes instead of 3,000 (at
 * 1,000,000 rows over 100 keys, 29.6 ms of the full claim's 92 ms were the window's probes). The
 * full claim's only: the window claim serves tables where the window fills the batch, reading it
 * lazily, and there ranking the whole window costs more than the probes it saves.
 */
function firstOfKeyIn(rows: string): string {
  return `(SELECT r.ctid, r.scheduled_at, r.sequence FROM (
             SELECT f.ctid, f.scheduled_at, f.sequence, f.key, min(f.sequence) OVER (PARTITION BY f.key) AS key_first
               FROM ${rows} f) r
            WHERE r.key IS NULL OR r.key = '' OR r.sequence = r.key_first)`;
}

/**
 * The retried and oldest CTEs both claim statements start with (see `outboxClaimMany`); with
 * `firstOfKey` (the full claim) the window's rows are narrowed to the first of each key
 * (`firstOfKeyIn`) before their head test.
 */
function retriedAndOldest(t: string, limit: number, firstOfKey = false): string {
  const freeHead = FREE_HEAD.replaceAll('%T', t);
  const window = `(
           SELECT w.ctid, w.scheduled_at, w.sequence, w.key FROM ${t} w
            WHERE w.state = 'pending' AND w.scheduled_at <= pg_catalog.statement_timestamp()
            ORDER BY w.scheduled_at, w.sequence
            LIMIT ${limit * OLDEST_WINDOW})`;
  return `retried AS (
       SELECT c.id FROM ${t} c
        WHERE c.state = 'pending' AND c.attempt > 0 AND c.scheduled_at <= pg_catalog.statement_timestamp()
          AND (${KEYLESS} OR (${freeHead}))
        ORDER BY c.scheduled_at, c.sequence
        LIMIT ${limit}
        FOR UPDATE SKIP LOCKED
     ),
     -- the oldest due rows: in a table where most keys can move, the batch is found here. The
     -- window is read in index order and joined back by ctid (one heap visit; in the window claim
     -- no sort, in the full claim narrowed to the first row of each key first, then sorted); a
     -- row updated meanwhile fails the ctid recheck of its lock and is skipped like a locked one.
     oldest AS (
       SELECT c.id, w.scheduled_at, w.sequence FROM ${firstOfKey ? firstOfKeyIn(window) : window} w
         JOIN ${t} c ON c.ctid = w.ctid
        WHERE c.state = 'pending' AND c.attempt = 0
          AND (${KEYLESS} OR (${freeHead}))
        ORDER BY w.scheduled_at, w.sequence
        LIMIT ${limit}
        FOR UPDATE OF c SKIP LOCKED
     )`;
}

/** The result columns of both claim statements (`OutboxDbRow` and `window_rows`), for their functions. */
const CLAIM_RESULT = `id uuid, topic varchar, key varchar, payload_text text, headers jsonb, attempt integer,
    max_attempts integer, sequence bigint, replay_count integer, claim_token uuid, created_us bigint,
    lease_expires_us bigint, trace_context jsonb, window_rows integer`;

/**
 * Returned with every claimed row: how many rows the claim's window gave (see `outboxClaimMany`),
 * and one more when the window filled the batch and a row that can move follows its last row
 * within the window's reach (`outboxClaimMany`'s `exhausted`: a claim that took every row the
 * window had, or one that left some). The row is only looked at, not locked: a concurrent claim
 * may take it.
 */
function windowRows(t: string, limit: number): string {
  const freeHead = FREE_HEAD.replaceAll('%T', t);
  return `,
            ((SELECT count(*) FROM oldest)
             + CASE WHEN (SELECT count(*) FROM oldest) >= ${limit} AND EXISTS (
                 SELECT 1 FROM (SELECT scheduled_at, sequence FROM oldest ORDER BY scheduled_at DESC, sequence DESC LIMIT 1) l
                  CROSS JOIN LATERAL (
                    SELECT w.ctid FROM ${t} w
                     WHERE w.state = 'pending' AND w.scheduled_at <= pg_catalog.statement_timestamp()
                       AND (w.scheduled_at, w.sequence) > (l.scheduled_at, l.sequence)
                     ORDER BY w.scheduled_at, w.sequence
                     LIMIT ${limit * (OLDEST_WINDOW - 1)}) w
                  JOIN ${t} c ON c.ctid = w.ctid
                 WHERE c.state = 'pending' AND c.attempt = 0 AND (${KEYLESS} OR (${freeHead})))
               THEN 1 ELSE 0 END)::int AS window_rows`;
}

/**
 * What both claim statements set and return. With `rowsPerKey` above 1 the claim also takes the
 * followers (`followerCtes`); `key_first` is true on the first row of each key in the claim (the
 * candidate) and false on its followers — the unique index `…_key_holder_in_flight_idx` holds
 * one first row per key in flight, so one claim per key.
 */
function claimUpdate(t: string, limit: number, rowsPerKey: number): string {
  const parts = claimUpdateParts(t, limit, rowsPerKey);
  return `${parts.ctes}${parts.update}`;
}

/**
 * `claimUpdate` in two parts: the follower CTEs (empty, or `,\n name AS (…)…` to follow
 * `candidates`) and the `UPDATE … RETURNING` itself — the full claim wraps the latter in a CTE.
 */
function claimUpdateParts(t: string, limit: number, rowsPerKey: number): { ctes: string; update: string } {
  const followers = claimFollowers(t, limit, rowsPerKey);
  // By id from the array of candidates, not a join: a join's order follows the row estimates, and
  // a plan kept from a nearly empty table would scan the whole table once per candidate.
  return { ctes: followers.ctes, update: `UPDATE ${t} o
        SET ${followers.set(claimSet('$1'))}
      WHERE o.id = ANY (ARRAY(${followers.claimed}))
  RETURNING o.id, o.topic, o.key, o.payload::text AS payload_text, o.headers, o.attempt, o.max_attempts, o.sequence,
            o.replay_count, o.claim_token,
            ${claimedTime('o.created_at')} AS created_us,
            ${claimedTime('o.lease_expires_at')} AS lease_expires_us, o.trace_context${windowRows(t, limit)}` };
}

/**
 * SQL: the timestamptz `at` of a claimed row as whole microseconds since the epoch, a bigint:
 * computed in float8 (`date_part`, cheaper than `epochMs`'s numeric, twice per claimed row), then
 * rounded to the whole microsecond. Exact from 1833-11-24 to 2106-02-07 (within 2^32 s of 1970,
 * where the float8 seconds hold every microsecond); outside that range a time can read 1 µs off, and
 * so 1 ms at a millisecond's edge, as the float8 milliseconds read before. A claim meets such a
 * time only in a row written by hand: `created_at` is the insert's `now()`, and a lease ends within
 * days. A bigint's text is the same under any `extra_float_digits`: a float8 answer was not (at
 * -15, set on a role or database, it kept one significant digit: a time in 2024 read as 2033).
 * `infinity` and `-infinity` become the latest and earliest time a `Date` holds (`epochTime`).
 */
function claimedTime(at: string): string {
  return `least(greatest(date_part('epoch', ${at}) * 1000000, ${-DATE_LIMIT_MS * 1000}), ${DATE_LIMIT_MS * 1000})::bigint`;
}

/**
 * How many batches' worth the full claim reads past its window, twice: due rows past its sweep
 * position, and open keys past its key cursor (their heads). A fixed number, so that the work of
 * a claim does not grow with the number of open keys nor with the rows waiting behind a key in
 * flight (a claim of 100 whose window a key in flight held read 10,528 buffers at 1,000 open keys
 * and 123,503 at 20,000 when it took the head of every open key; now about 4,700 at either).
 */
export const LOOK_AHEAD = 1;

/**
 * The bound of the full claim's order (stated in docs/claims-and-leases.md): a due first attempt
 * that can move — keyless, or the head of a key with nothing in flight — is claimed within this
 * many claims of one poller (claims filled by due retries aside), `queued` being the number of due
 * pending rows at the moment it can move; rows that arrive after it do not count. A keyless row is,
 * besides, never passed by a later first attempt, the rows a claim takes after its heads
 * (`outbox.rowsPerKey`) included: they stop before a keyless row the claim left out (`claimFollowers`).
 *
 * Why: a claim that does not take the row either takes at least half a batch of rows due before it
 * (the window; the merged heads and keyless rows, in claim order) or moves the sweep position on
 * by `LOOK_AHEAD` batches of such rows; the row is reached by the sweep that was under way when it
 * could move or by the next one (twice the sweep); and a window claim that gave less than half a
 * batch hands over to the full claim, so at most every other claim is one (twice again, plus one).
 */
export function outboxClaimBound(queued: number, limit: number): number {
  const half = Math.ceil(limit / 2);
  return 2 * (Math.ceil(queued / half) + 2 * Math.ceil(queued / (LOOK_AHEAD * limit)) + 2) + 1;
}

/** The sweep position from bind parameters `$2`, `$3` (µs since the epoch, sequence; NULL: the start). */
const SWEEP_AT = `COALESCE(timestamptz 'epoch' + $2::bigint * interval '1 microsecond', '-infinity'::timestamptz)`;
const SWEEP_SEQUENCE = `COALESCE($3::bigint, -1)`;
/** The sweep's horizon from `$4` (µs since the epoch; NULL: a new sweep, due by now). */
const SWEEP_HORIZON = `COALESCE(timestamptz 'epoch' + $4::bigint * interval '1 microsecond', pg_catalog.statement_timestamp())`;
const micros = (at: string) => `CASE WHEN isfinite(${at}) THEN (extract(epoch FROM ${at}) * 1000000)::bigint END`;

/**
 * The full claim statement of `names` for batches of `limit` rows (bind parameters: `$1` the
 * lease in ms; `$2`–`$5` the sweep position, its horizon and the key cursor, see `SweepPosition`):
 * retries, the window, and — when the window filled less than half the batch — the heads that can
 * move among the next `LOOK_AHEAD` batches of due rows past the sweep position and of the next
 * `LOOK_AHEAD` batches' worth of open keys past the key cursor, merged with keyless rows in claim
 * order (`scheduled_at, sequence`). Each row also returns `window_rows`, how many rows the window
 * gave, and the next sweep position; a claim that takes nothing returns one row with a NULL `id`
 * that carries them.
 */
function outboxClaimText(names: PgNames, limit: number, rowsPerKey: number): string {
  const t = names.outbox;
  const window = limit * OLDEST_WINDOW;
  const look = limit * LOOK_AHEAD;
  const room = windowLeftRoom(String(limit));
  const freeHead = FREE_HEAD.replaceAll('%T', t);
  const update = claimUpdateParts(t, limit, rowsPerKey);
  return `WITH RECURSIVE ${retriedAndOldest(t, limit, true)},
     -- the sweep: the next due rows past its position (at a sweep's start, past the window: its
     -- rows are skipped in the index, not tested again), up to its horizon; read only when the
     -- window left room
     ahead AS (
       SELECT w.ctid, w.scheduled_at, w.sequence, w.key FROM ${t} w
        WHERE w.state = 'pending' AND w.scheduled_at <= ${SWEEP_HORIZON}
          AND (w.scheduled_at, w.sequence) > (${SWEEP_AT}, ${SWEEP_SEQUENCE})
          AND ${room}
        ORDER BY w.scheduled_at, w.sequence
        LIMIT ${look} OFFSET CASE WHEN $2::bigint IS NULL THEN ${window} ELSE 0 END
     ),
     -- the next open keys after the key cursor ($5; NULL: the first key), at most as many as the
     -- look-ahead reads rows: one index probe each (a loose scan of the key-head index), so that
     -- the heads of a few keys with long backlogs are all found in one claim, and those of many
     -- keys in turn, a bounded number per claim
     open_keys AS (
       (SELECT k.key, 1 AS n FROM ${t} k
         WHERE k.state IN ('pending', 'processing') AND k.key > COALESCE($5::text, '') AND ${room}
         ORDER BY k.key LIMIT 1)
       UNION ALL
       SELECT (SELECT k.key FROM ${t} k
                WHERE k.state IN ('pending', 'processing') AND k.key > open_keys.key
                ORDER BY k.key LIMIT 1), open_keys.n + 1
         FROM open_keys WHERE open_keys.key IS NOT NULL AND open_keys.n < ${look}
     ),
     -- the head of each of those keys that can move: due, first attempt, nothing of its key in flight
     key_heads AS (
       SELECT h.id, h.ctid, h.scheduled_at, h.sequence, open_keys.key
         FROM open_keys
         CROSS JOIN LATERAL (
           SELECT o.id, o.ctid, o.state, o.attempt, o.scheduled_at, o.sequence FROM ${t} o
            WHERE o.key = open_keys.key AND o.state IN ('pending', 'processing')
            ORDER BY o.sequence LIMIT 1) h
        WHERE h.state = 'pending' AND h.attempt = 0 AND h.scheduled_at <= pg_catalog.statement_timestamp()
          AND NOT EXISTS (
            SELECT 1 FROM ${t} b WHERE b.key = open_keys.key AND b.key <> '' AND b.state = 'processing')
          AND h.id NOT IN (SELECT id FROM oldest)
     ),
     -- ... of which the keyed first attempts that can move (keyless rows come from their own index).
     -- The head test is written as in the window, inside an OR: as a bare NOT EXISTS the planner
     -- turns it into an anti join, which a plan kept from a small table runs as a scan of the
     -- whole key-head index per row (14,751 buffers instead of about 2,000 at 20,000 rows)
     ahead_heads AS (
       SELECT c.id, c.ctid, a.scheduled_at, a.sequence FROM ${firstOfKeyIn('ahead')} a
         JOIN ${t} c ON c.ctid = a.ctid
        WHERE c.state = 'pending' AND c.attempt = 0 AND c.key > '' AND (${KEYLESS} OR (${freeHead}))
          AND c.id NOT IN (SELECT id FROM oldest)
     ),
     keyless AS (
       SELECT c.id, c.ctid, c.scheduled_at, c.sequence FROM ${t} c
        WHERE c.state = 'pending' AND c.attempt = 0 AND ${KEYLESS}
          AND c.scheduled_at <= pg_catalog.statement_timestamp()
          AND c.id NOT IN (SELECT id FROM oldest) AND ${room}
        ORDER BY c.scheduled_at, c.sequence
        LIMIT ${limit}
        FOR UPDATE SKIP LOCKED
     ),
     -- the heads and the keyless rows (counted too: did the claim take them all)
     merged AS (
       SELECT id, ctid, scheduled_at, sequence FROM ahead_heads
       UNION
       SELECT id, ctid, scheduled_at, sequence FROM key_heads
       UNION ALL
       SELECT id, ctid, scheduled_at, sequence FROM keyless
     ),
     -- ... locked in claim order, joined back by ctid as the window is, until the batch is full:
     -- a row a concurrent claim holds is skipped, and so is one changed since this statement's
     -- snapshot (its ctid recheck fails): taken by a concurrent claim, or taken and given back
     -- (released, or retried with its backoff) - left to the next claim. One lock step over the ordered rows,
     -- not a locking probe per row: a probe inside a lateral subquery ends its recheck state at
     -- every row, and the next row that needs a recheck starts it again, which sets up every
     -- subplan of this statement - about 0.25 ms a row, so that a claim meeting the 1,000 heads
     -- another pass had just taken ran for 300 ms, keeping that pass's sent mark waiting on the
     -- rows it locked and skipped (docs/performance.md)
     taken AS (
       SELECT m.id, m.scheduled_at, m.sequence
         FROM merged m
         JOIN ${t} c ON c.ctid = m.ctid
        -- the state written so that no partial index's predicate matches it: the ctid is the way in
        WHERE (c.state || '') = 'pending'
        ORDER BY m.scheduled_at, m.sequence
        LIMIT GREATEST(0, ${limit} - (SELECT count(*) FROM retried) - (SELECT count(*) FROM oldest))
          FOR UPDATE OF c SKIP LOCKED
     ),
     -- where the next full claim reads on: unchanged when the window did not leave room; the last
     -- row taken when the batch filled before the end of the look-ahead (never back); the start
     -- (a new sweep) when the look-ahead reached the horizon; else the end of the look-ahead
     sweep AS (
       SELECT CASE
                WHEN NOT ${room} THEN 'keep'
                WHEN (SELECT count(*) FROM taken) >= GREATEST(0, ${limit} - (SELECT count(*) FROM retried) - (SELECT count(*) FROM oldest))
                 AND (l.scheduled_at IS NULL OR (l.scheduled_at, l.sequence) <= (${SWEEP_AT}, ${SWEEP_SEQUENCE})) THEN 'keep'
                WHEN (SELECT count(*) FROM taken) >= GREATEST(0, ${limit} - (SELECT count(*) FROM retried) - (SELECT count(*) FROM oldest))
                 AND (l.scheduled_at, l.sequence) < (e.scheduled_at, e.sequence) THEN 'taken'
                WHEN (SELECT count(*) FROM ahead) < ${look} THEN 'start'
                ELSE 'ahead'
              END AS next,
              l.scheduled_at AS taken_at, l.sequence AS taken_sequence, e.scheduled_at AS ahead_at, e.sequence AS ahead_sequence,
              -- the key cursor: unchanged when the window did not leave room; just before the first
              -- key whose head the turn found and the batch had no room for (or a concurrent claim
              -- held); else past the turn's last key, or the first key again when the turn ran out
              CASE
                WHEN NOT ${room} THEN $5::text
                WHEN u.key IS NOT NULL THEN COALESCE((SELECT max(k.key) FROM open_keys k WHERE k.key < u.key), $5::text)
                WHEN (SELECT count(key) FROM open_keys) >= ${look} THEN (SELECT max(key) FROM open_keys)
              END AS key_cursor
         FROM (SELECT NULL) one
         LEFT JOIN LATERAL (SELECT scheduled_at, sequence FROM taken ORDER BY scheduled_at DESC, sequence DESC LIMIT 1) l ON true
         LEFT JOIN LATERAL (SELECT scheduled_at, sequence FROM ahead ORDER BY scheduled_at DESC, sequence DESC LIMIT 1) e ON true
         LEFT JOIN LATERAL (SELECT min(key) AS key FROM key_heads WHERE id NOT IN (SELECT id FROM taken)) u ON true
     ),
     sweep_next AS (
       SELECT CASE next WHEN 'keep' THEN $2::bigint WHEN 'taken' THEN ${micros('taken_at')} WHEN 'ahead' THEN ${micros('ahead_at')} END AS sweep_at_us,
              CASE next WHEN 'keep' THEN $3::bigint WHEN 'taken' THEN taken_sequence WHEN 'ahead' THEN ahead_sequence END AS sweep_sequence,
              CASE WHEN next = 'start' OR (next = 'keep' AND $2::bigint IS NULL) THEN NULL ELSE ${micros(SWEEP_HORIZON)} END AS sweep_horizon_us,
              key_cursor AS sweep_key
         FROM sweep
     ),
     candidates AS (
       SELECT id FROM retried
       UNION ALL
       SELECT id FROM oldest
       UNION ALL
       SELECT id FROM taken
       LIMIT ${limit}
     )${update.ctes},
     claimed AS (
       ${update.update}
     )
  SELECT claimed.*, s.sweep_at_us, s.sweep_sequence, s.sweep_horizon_us, s.sweep_key,
         -- every row that could move was taken: all the heads and keyless rows found past the
         -- window, on a turn of the open keys that started at the first key and read the last
         (SELECT count(*) FROM merged) <= (SELECT count(*) FROM taken) AND $5::text IS NULL
           -- the next open key past the turn's last, probed as the turn probes (the key-head index)
           AND (SELECT k.key FROM ${t} k WHERE k.state IN ('pending', 'processing') AND k.key > (SELECT max(key) FROM open_keys) ORDER BY k.key LIMIT 1) IS NULL AS took_all
    FROM claimed CROSS JOIN sweep_next s
  UNION ALL
  -- nothing claimed: one row without an id, for the sweep position
  SELECT NULL::uuid, NULL::varchar, NULL::varchar, NULL::text, NULL::jsonb, NULL::integer, NULL::integer, NULL::bigint,
         NULL::integer, NULL::uuid, NULL::bigint, NULL::bigint, NULL::jsonb,
         (SELECT count(*) FROM oldest)::int, s.sweep_at_us, s.sweep_sequence, s.sweep_horizon_us, s.sweep_key, NULL::boolean
    FROM sweep_next s WHERE NOT EXISTS (SELECT 1 FROM claimed)`;
}

/**
 * The window claim: retries and the window of the oldest rows only — the same rows the full claim
 * takes whenever the window fills at least half the batch, for a fraction of its planning (no
 * recursive scan, no head or keyless branch to plan: 0.5 ms instead of 1.4 ms per claim). Each
 * row also returns `window_rows`.
 */
function outboxWindowClaimText(names: PgNames, limit: number, rowsPerKey: number): string {
  const t = names.outbox;
  return `WITH ${retriedAndOldest(t, limit)},
     candidates AS (
       SELECT id FROM retried
       UNION ALL
       SELECT id FROM oldest
       LIMIT ${limit}
     )
     ${claimUpdate(t, limit, rowsPerKey)}`;
}

/** The full claim's result: the claim's columns, then the next sweep position (see `outboxClaimMany`). */
const FULL_CLAIM_RESULT = `${CLAIM_RESULT}, sweep_at_us bigint, sweep_sequence bigint, sweep_horizon_us bigint, sweep_key text, took_all boolean`;

/**
 * Where the full claim of a driver reads on past the window, kept per driver (a new container
 * starts a new sweep; concurrent pollers each sweep, and `SKIP LOCKED` shares the rows out):
 * a position in claim order (µs since the epoch of `scheduled_at`, `sequence`; `null`: the start
 * of a sweep), the horizon of the sweep (µs since the epoch, the database clock: rows due later
 * wait for the next sweep, so a sweep ends however fast rows arrive) and the key cursor.
 */
interface SweepPosition {
  at: string | null;
  sequence: string | null;
  horizon: string | null;
  /** The last key the full claim's loose scan read (`null`: it starts again at the first key). */
  key: string | null;
}

/** The claim statements of `names` at batch size `limit`, by rows per key. */
const claimStatementsByDepth = oncePerNamesAndLimit(() => new Map<number, { window: ClaimStatement; full: ClaimStatement }>());

/**
 * The window claim and the full claim of `names` at batch size `limit`, taking up to
 * `rowsPerKey` rows of a key (`outbox.rowsPerKey`; 1: the head only). Built once each.
 */
export function outboxClaimStatements(names: PgNames, limit: number, rowsPerKey = 1): { window: ClaimStatement; full: ClaimStatement } {
  if (!Number.isSafeInteger(rowsPerKey) || rowsPerKey < 1) throw new RangeError(`rows per key must be a positive integer, not ${rowsPerKey}`);
  const byDepth = claimStatementsByDepth(names, limit);
  let statements = byDepth.get(rowsPerKey);
  if (statements === undefined) {
    statements = {
      window: { table: names.outboxTable, text: outboxWindowClaimText(names, limit, rowsPerKey), params: ['double precision'], returns: CLAIM_RESULT },
      full: {
        table: names.outboxTable,
        text: outboxClaimText(names, limit, rowsPerKey),
        params: ['double precision', 'bigint', 'bigint', 'bigint', 'text'],
        returns: FULL_CLAIM_RESULT,
      },
    };
    byDepth.set(rowsPerKey, statements);
  }
  return statements;
}

const sweeps = new WeakMap<PgNames, SweepPosition>();

/**
 * Which claim a driver sends first: the window claim while the window has been filling batches
 * (keyless tables, many keys), the full claim while it has not (few keys holding a backlog).
 */
const windowFirst = new WeakMap<PgNames, boolean>();

/**
 * Claims due rows: keyless rows (no key or `''`) freely, keyed rows only when they are the head
 * of their key (no `pending`/`processing` row of the key with a lower `sequence`) and no row of
 * the key is in flight. `SKIP LOCKED` keeps concurrent claims off each other's rows; the head
 * check and the unique index on the key of `processing` rows keep one row per key in flight.
 *
 * Order: due retries (`attempt > 0`) first, then first attempts by `scheduled_at, sequence`: the
 * oldest rows first; when they fill less than half the batch (their keys are in flight), the
 * heads that can move past the window and keyless rows, merged in the same order. The heads come
 * from a sweep of the due rows (a batch per claim, from where the last claim stopped, up to the
 * horizon of the sweep, then from the start again) and a turn of the open keys (a batch of keys per
 * claim, by a loose scan of the key-head index), so a claim reads a bounded number of rows and
 * keys whatever the backlog and the number of open keys; `outboxClaimBound` states how soon a row
 * that can move is claimed. A window a few rows short (held by a concurrent claim) skips both.
 *
 * Two statements: while the window has been filling batches, the window claim (cheaper to plan);
 * it reports how many rows its window gave, and when that was less than half the batch — due
 * retries do not count: they say nothing of the heads past the window — the driver switches to
 * the full claim, at once when the window claim took nothing, else from the next claim on (the
 * rows it took are this claim's). The full claim reports the same count, and the driver switches
 * back when the window alone would have done. Every statement carries the whole batch size, so
 * there are two statement texts per batch size (one prepared statement each).
 */
export async function outboxClaimMany(ctx: PgContext, p: { limit: number; leaseMs: number; rowsPerKey?: number }): Promise<OutboxClaimedRows> {
  const statements = outboxClaimStatements(ctx.names, p.limit, p.rowsPerKey ?? 1);
  const claim = async (statement: ClaimStatement, values: () => unknown[]) =>
    (
      await claimRetryingInFlight(() =>
        runClaimStatement(ctx.names, ctx.claimFunctionLimit === undefined || ctx.claimFunctionLimit === p.limit ? ctx.claimFunctions : undefined, statement, (text) =>
          pgClaimQuery<OutboxDbRow & { window_rows: number } & Partial<SweepRow>>(ctx.pool, text, values, ctx.prepared, PINNED_CLAIM_PLAN),
        ),
      )
    ).rows;
  const windowFilled = (rows: Array<{ window_rows: number }>) => rows.length > 0 && rows[0]!.window_rows * 2 >= p.limit;
  if (windowFirst.get(ctx.names) !== false) {
    const rows = await claim(statements.window, () => [leaseWithinBudget(p.leaseMs)]);
    if (!windowFilled(rows)) windowFirst.set(ctx.names, false);
    if (rows.length > 0) return windowClaimed(rows, p.limit, windowFilled(rows));
  }
  const sweep = sweeps.get(ctx.names);
  const rows = await claim(statements.full, () => [leaseWithinBudget(p.leaseMs), sweep?.at ?? null, sweep?.sequence ?? null, sweep?.horizon ?? null, sweep?.key ?? null]);
  if (windowFilled(rows)) windowFirst.set(ctx.names, true);
  const next = rows[0];
  if (next !== undefined) {
    sweeps.set(ctx.names, { at: next.sweep_at_us ?? null, sequence: next.sweep_sequence ?? null, horizon: next.sweep_horizon_us ?? null, key: next.sweep_key ?? null });
  }
  // A claim that took nothing returns one row without an id: the sweep position only.
  const claimed = windowClaimed(
    rows.filter((r) => r.id !== null),
    p.limit,
    windowFilled(rows),
  );
  // Past the window: the claim took every row that could move (the window's own rows, less than
  // half a batch, all taken too; the heads of every open key, read from the first to the last).
  if (claimed.length > 0 && claimed.exhausted === undefined && typeof next?.took_all === 'boolean') claimed.exhausted = next.took_all;
  return claimed;
}

/**
 * The rows of a claim in claim order; when they came from the window (`fromWindow`: the window
 * claim, or a full claim whose window filled half the batch and read nothing past it), whether the
 * claim took every row the window offered (`exhausted`): a full window counts one more row when a
 * row that can move follows it (`windowRows`), so a window of at most the batch, with the due
 * retries, fit in the claim (its heads' followers, `outbox.rowsPerKey`, are rows no other claim
 * could take).
 */
function windowClaimed(rows: Array<OutboxDbRow & { window_rows: number }>, limit: number, fromWindow: boolean): OutboxClaimedRows {
  const claimed: OutboxClaimedRows = rows.map(toOutboxRow).sort(bySequence);
  if (fromWindow && rows.length > 0) {
    let retried = 0;
    for (const row of claimed) if (row.attempt > 0) retried++;
    claimed.exhausted = rows[0]!.window_rows + retried <= limit;
  }
  return claimed;
}

/** The next sweep position each full claim returns (bigints as text; NULL: a new sweep). */
interface SweepRow {
  sweep_at_us: string | null;
  sweep_sequence: string | null;
  sweep_horizon_us: string | null;
  sweep_key: string | null;
  /** Whether the claim took every row that could move, past a window that gave less than half the batch (NULL: it took nothing). */
  took_all: boolean | null;
}

/** Claim order within a batch: `sequence` (a non-negative bigint as text) without BigInt allocations. */
function bySequence(a: OutboxRow, b: OutboxRow): number {
  return a.sequence.length - b.sequence.length || (a.sequence < b.sequence ? -1 : a.sequence > b.sequence ? 1 : 0);
}

export async function outboxRenewMany(ctx: PgContext, p: { claims: ClaimRef[]; leaseMs: number }): Promise<string[]> {
  return fencedRenewMany(ctx.pool, ctx.names.outbox, p.claims, p.leaseMs);
}

export async function outboxMarkSentMany(ctx: PgContext, p: { claims: ClaimRef[] }): Promise<string[]> {
  if (p.claims.length === 0) return [];
  const ids = p.claims.map((c) => c.id);
  return fencedChangedIds(ctx.pool, outboxMarkSentUpdate(ctx.names.outbox), claimArrayParams(ctx.pool, ids, p.claims.map((c) => c.token)), ids, outboxMarkSentUpdate(ctx.names.outbox, true));
}

/**
 * The fenced sent mark of the claims given as `$1` (ids) and `$2` (tokens), `RETURNING t.id` (for
 * `fencedChangedIds`). `resent`: the same mark sent again after its connection was lost, whose
 * first run may have committed — or may still be running on the server and commit while this one
 * waits for its lock. A row already `sent` under its token is then matched too (the sent mark keeps
 * `claim_token`; a replay clears it, and a later claim has another token): the condition is part
 * of the fence, so PostgreSQL's re-check of a row after a lock wait sees the first run's version.
 */
export function outboxMarkSentUpdate(table: string, resent = false): string {
  return (resent ? resentMarkSentTexts : markSentTexts).get(table) ?? markSentText(table, resent);
}

/** The sent marks' texts by table (built once each: every batch sends one, and builds its resent variant). */
const markSentTexts = new Map<string, string>();
const resentMarkSentTexts = new Map<string, string>();

function markSentText(table: string, resent: boolean): string {
  const text = `UPDATE ${table} t
        SET state = 'sent', updated_at = pg_catalog.clock_timestamp(), lease_expires_at = NULL, last_error = NULL
       FROM unnest($1::uuid[], $2::uuid[]) AS s(id, token)
      WHERE t.id = s.id AND ${resent ? `((${FENCE}) OR (t.state = 'sent' AND t.claim_token = s.token))` : FENCE}
  RETURNING t.id`;
  (resent ? resentMarkSentTexts : markSentTexts).set(table, text);
  return text;
}

export async function outboxRetryMany(ctx: PgContext, p: { items: RetryItem[] }): Promise<string[]> {
  return fencedRetryMany(ctx.pool, ctx.names.outbox, p.items);
}

/** Fenced: claimed rows no call was offered back to `pending`, attempt unchanged. */
export async function outboxReleaseMany(ctx: PgContext, p: { claims: ClaimRef[] }): Promise<string[]> {
  return fencedReleaseMany(ctx.pool, ctx.names.outbox, p.claims);
}

export async function outboxMarkDeadMany(ctx: PgContext, p: { items: DeadItem[] }): Promise<string[]> {
  return fencedDeadMany(ctx.pool, ctx.names.outbox, p.items);
}

/**
 * Expired `processing` rows back to `pending`; gated by the shared throttle. The lost lease is
 * charged once per claim of a key (`lostLeaseCharged`): `attempt + 1`, or `dead` when the lost
 * delivery was the row's last (`max_attempts`); the key's other rows in that claim go back with
 * their attempt unchanged and `LOST_LEASE_NOT_CHARGED` as `last_error`.
 */
export async function outboxReclaimExpired(ctx: PgContext, p: { throttleMs?: number }): Promise<ReclaimResult> {
  const t = ctx.names.outbox;
  return reclaimExpired(
    ctx,
    t,
    `reclaim:${ctx.names.outboxTable}`,
    p.throttleMs,
    { maxAttempts: 't.max_attempts', call: 'delivery', charged: { rows: lostLeaseCharged(t), note: LOST_LEASE_NOT_CHARGED } },
    claimWhole(t),
    [],
    claimLockedWhole(t),
  );
}

/**
 * A row of a key is reclaimed only with every other `processing` row of its claim: a row another
 * transaction holds is skipped, and were the rest of its claim taken without it, its key's first
 * row would be charged then, and the skipped row, coming back later with no earlier row of its
 * claim left, charged again as though it were the first. `partial` is the claims (key and token)
 * of which a `processing` row is not in the locked set `expired`; their rows are left whole.
 */
function claimLockedWhole(t: string): WholeClaim {
  return {
    columns: 't.key, t.claim_token',
    // By counts, claim by claim: a claim is partial when the table holds more of its `processing`
    // rows than `expired` does. One index probe per claim, linear in the claims; an anti-join of
    // the table's rows against `expired` was planned from an estimate of one row as a nested loop
    // that scanned `expired` once per row (20,000 keyed rows: 9 s; 50,000: past any deadline).
    // MATERIALIZED: computed once. Inlined (its one reference), it became the inner side of the
    // UPDATE's anti join, planned from statistics that did not know the expired rows (autovacuum
    // off, or rows inserted just before) as a nested loop that ran it again (a probe per claim)
    // for every row: 3,000 expired keyed rows ran past a 20 s budget, and nothing was reclaimed.
    // `e.key <> ''` (implied by `c.key`) lets the probe use the index of keyed `processing` rows.
    ctes: `partial AS MATERIALIZED (
       SELECT c.key, c.claim_token
         FROM (SELECT x.key, x.claim_token, count(*) AS n FROM expired x WHERE x.key IS NOT NULL AND x.key <> '' GROUP BY x.key, x.claim_token) c
        WHERE (SELECT count(*) FROM ${t} e WHERE e.key = c.key AND e.key <> '' AND e.claim_token = c.claim_token AND e.state = 'processing') > c.n)`,
    condition: `NOT EXISTS (SELECT 1 FROM partial p WHERE p.key = expired.key AND p.claim_token = expired.claim_token)`,
    // Keyed rows only have claim mates; `t.key <> ''` lets the probe use the index of keyed `processing` rows.
    claimOf: (c) => `t.key = ${c}.key AND t.key <> '' AND t.claim_token = ${c}.claim_token`,
  };
}

/**
 * The reclaim takes a row of a key only when no row of its claim still has a lease (rows of table
 * `t`, alias `t`): a claim of a key is reclaimed whole. Its rows share one lease, but a renewal
 * reads the clock row by row (the fence), so one that passes the end of the lease partway renews
 * the key's first row and not its follower; the follower alone went back to `pending` while the
 * first row was still held and published (`reclaim-instant.test.ts`). Now the follower waits
 * until its claim is settled or its lease has ended too; the pass had already let it go (its
 * renewal failed), so it was not published. Keyless rows are claims of one row each.
 */
function claimWhole(t: string): string {
  return `(t.key IS NULL OR t.key = '' OR NOT EXISTS (
                SELECT 1 FROM ${t} e
                 WHERE e.key = t.key AND e.key <> '' AND e.state = 'processing' AND e.claim_token = t.claim_token
                   AND e.lease_expires_at > pg_catalog.statement_timestamp()))`;
}

/** `last_error` of a row an expired claim was not charged to (`lostLeaseCharged`). */
export const LOST_LEASE_NOT_CHARGED = 'lease expired while its claim held an earlier row of its key (no attempt charged: the delivery of this row may not have started)';

/**
 * The rows of table `t` (alias `t`) an expired claim is charged to: per claim token, the row of
 * lowest `sequence` still `processing` — a keyless row, the only row of its key in its claim, or
 * the first row of a key whose claim also holds the next rows (`outbox.rowsPerKey`). The pass
 * offers a key's rows one call after another, the next only once the previous answered, so a
 * claim of a key had at most one delivery in flight when its lease ended: one attempt is lost,
 * not one per row. The first row is the one surely offered; a follower may never have been
 * (its round had not come), and its delivery, if it was made, is not known to the database (the
 * pass marks the claim's rows `sent` together, at its end). So the followers go back with their
 * attempt unchanged; the key still moves on, since every lost lease charges its first row.
 * `key_first` names that row without a look-up; the look-up (the key's in-flight rows) covers a
 * claim whose first row left `processing` before its followers.
 */
function lostLeaseCharged(t: string): string {
  // `e.key <> ''` (implied by a claim mate's key) lets the probe use the index of keyed
  // `processing` rows whatever the statistics say: planned from statistics of a nearly empty
  // table, it scanned the lease index instead, thousands of rows per reclaimed row.
  return `t.key_first OR NOT EXISTS (
                SELECT 1 FROM ${t} e
                 WHERE e.key = t.key AND e.key <> '' AND e.state = 'processing' AND e.claim_token = t.claim_token AND e.sequence < t.sequence)`;
}

export async function outboxStats(ctx: PgContext, scope: StatsScope = {}): Promise<TableStats> {
  const read = () => tableStats(ctx.pool, ctx.names.outbox, ['pending', 'processing', 'sent', 'dead'], 'TRUE', scope);
  if (scope.onceEveryMs === undefined) return read();
  return (await gatedRead(ctx, gaugeGateName(ctx.names.outboxTable), scope.onceEveryMs, read)) ?? SKIPPED_STATS;
}

export async function outboxDeadList(ctx: PgContext, p: { limit: number }): Promise<DeadRowSummary[]> {
  return deadList(ctx.pool, ctx.names.outbox, 'topic', p.limit);
}

const REPLAY_SET = `SET state = 'pending', attempt = 0, scheduled_at = pg_catalog.clock_timestamp(), last_error = NULL,
            claim_token = NULL, claimed_at = NULL, lease_expires_at = NULL,
            replay_count = replay_count + 1, updated_at = pg_catalog.clock_timestamp()`;

/**
 * Moves the matching rows back to `pending`; returns how many moved. With `maxRows`, one
 * statement locks at most `maxRows + 1` matching rows and moves them only when there are no more
 * than `maxRows` (the UPDATE re-checks the filter on each locked row), else throws `ReplayLimitError`.
 */
export async function outboxReplay(ctx: PgContext, f: ReplayFilter): Promise<number> {
  const { values, bind } = binder();
  const where = replayWhere(f, bind);
  return replayMove(ctx, { table: ctx.names.outbox, set: REPLAY_SET, where, values, bind, maxRows: f.maxRows });
}

/**
 * Deletes up to `limit` finished rows older than `olderThanMs`. The rows are locked as they are
 * picked (`FOR UPDATE SKIP LOCKED`: a row another transaction holds — a replay moving it back to
 * `pending` — is left for the next run), and the state is tested again on the row the DELETE
 * deletes: a row a concurrent replay committed as `pending` after the pick is not deleted
 * (PostgreSQL re-checks the DELETE's own conditions on the new row version, not the subquery's).
 */
export async function outboxDeleteFinished(ctx: PgContext, p: DeleteFinishedParams): Promise<number> {
  if (p.state !== 'sent' && p.state !== 'dead') throw new UsageError(`outbox retention deletes only sent or dead rows, not ${p.state}`);
  const { rowCount } = await pgQuery(
    ctx.pool,
    // the pick is a CTE: run once, so LIMIT bounds the delete (a subquery in IN may be run again
    // per outer row, picking the next unlocked rows each time)
    `WITH picked AS MATERIALIZED (
       SELECT id FROM ${ctx.names.outbox}
        WHERE state = $1 AND updated_at < pg_catalog.clock_timestamp() - ${msInterval('$2')}
        LIMIT $3
        FOR UPDATE SKIP LOCKED)
     DELETE FROM ${ctx.names.outbox} o USING picked WHERE o.id = picked.id AND o.state = $1`,
    [p.state, p.olderThanMs, p.limit],
  );
  return rowCount ?? 0;
}
