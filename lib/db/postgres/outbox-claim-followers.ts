/**
 * Several rows of a key in one outbox claim (`outbox.rowsPerKey`): the part of the claim statement
 * that extends the chosen heads of keys with the rows right after them. It only adds CTEs after
 * `candidates` and what the `UPDATE` sets and takes; the choice of the candidates is the claim's own.
 */

/**
 * The CTEs (to follow `candidates`) that extend the claimed heads of keys with the next rows of
 * their keys, `rowsPerKey - 1` at most per key, within the batch size `limit`. `claim_heads`
 * reads the candidates once (only when they left room); `next_rows` reads the rows after each
 * keyed candidate in `sequence` order (the key-head index; no more per key than the room the
 * heads left in the batch); `keyless_left` is the first keyless first attempt the claim left out
 * (see below); `follower_choice` keeps the consecutive due `pending` ones before it (`run_end`: a
 * row not due, in flight, or after that keyless row ends the run of its key), by rank, so
 * that every key gets its second row before any gets its third; `followers` locks them (SKIP
 * LOCKED); `kept` drops a key's rows after one that could not be locked (`lock_gap`);
 * `key_tokens` is one claim token per key with followers, for its head and followers alike, and
 * `follower_ids` the followers' ids, each one jsonb object the `UPDATE` looks up per row. A
 * follower is never a candidate (a row of its key comes first). Each step is linear in the rows
 * read, or nearly (per-key minimums joined back, rows ranked within their key as they are read,
 * lookups by key and id in jsonb objects: no sort of all keys' rows by key, no pairwise comparison;
 * a claim of 500 heads and 500 followers went from 124 to 53 ms: bench/claim-followers.ts).
 *
 * `keyless_left`: a keyless row is never passed by a later first attempt (`outboxClaimBound`), and
 * a follower is one. The candidates were taken in `scheduled_at, sequence` order, each keyless row
 * among them as it came (the window, or the full claim's merge of heads and keyless rows), so a
 * keyless first attempt the claim left out lies past the last first attempt among the
 * candidates — a due one before it was held by a concurrent claim (`SKIP LOCKED`). When the window
 * held by a key in flight left room, such a row may lie just past the window while a key whose
 * head is in the window has its next rows after it: those rows wait for the next claim, which
 * takes the keyless row. One probe of the keyless rows' index, past the candidates' last first
 * attempt, and only when some key has next rows to take; a keyless row past it that a concurrent
 * claim holds ends the runs too (the snapshot cannot tell), which costs followers, not order.
 */
function followerCtes(t: string, limit: number, rowsPerKey: number): string {
  return `,
     claim_heads AS (
       SELECT c.key, c.sequence, c.scheduled_at, c.attempt FROM ${t} c
        WHERE c.id = ANY (ARRAY(SELECT id FROM candidates))
          -- no room left: the heads filled the batch, nothing to read
          AND (SELECT count(*) FROM candidates) < ${limit}
     ),
     next_rows AS (
       SELECT n.id, h.key, n.state, n.scheduled_at, n.sequence, n.rank
         FROM (SELECT c.key, c.sequence FROM claim_heads c WHERE c.key <> '') h
         CROSS JOIN LATERAL (
           -- ranked within the key's own rows (read in sequence order), not by a sort of all keys' rows
           SELECT n.id, n.state, n.scheduled_at, n.sequence, row_number() OVER (ORDER BY n.sequence) AS rank
             FROM (SELECT n.id, n.state, n.scheduled_at, n.sequence FROM ${t} n
                    WHERE n.key = h.key AND n.state IN ('pending', 'processing') AND n.sequence > h.sequence
                    ORDER BY n.sequence
                    LIMIT greatest(0, least(${rowsPerKey - 1}, ${limit} - (SELECT count(*) FROM candidates)))) n) n
     ),
     -- the last first attempt among the candidates (none: the start)
     last_first AS (
       SELECT c.scheduled_at, c.sequence FROM claim_heads c WHERE c.attempt = 0
        ORDER BY c.scheduled_at DESC, c.sequence DESC LIMIT 1
     ),
     -- the first keyless first attempt past it, due: the claim left it out, so no follower may
     -- come after it (the keyless rows' index, only when some key has next rows)
     keyless_left AS (
       SELECT k.scheduled_at, k.sequence FROM ${t} k
        WHERE k.state = 'pending' AND (k.key IS NULL OR k.key = '')
          AND k.attempt = 0 AND k.scheduled_at <= pg_catalog.statement_timestamp()
          AND (k.scheduled_at, k.sequence) > (COALESCE((SELECT scheduled_at FROM last_first), '-infinity'::timestamptz), COALESCE((SELECT sequence FROM last_first), -1))
          AND EXISTS (SELECT 1 FROM next_rows)
        ORDER BY k.scheduled_at, k.sequence LIMIT 1
     ),
     -- per key, the first of its next rows that is not due, not pending, or after the keyless row
     -- left out: the run ends before it
     run_end AS (
       SELECT r.key, min(r.rank) AS rank FROM next_rows r
        WHERE r.state <> 'pending' OR r.scheduled_at > pg_catalog.statement_timestamp()
           OR (r.scheduled_at, r.sequence) > (SELECT l.scheduled_at, l.sequence FROM keyless_left l)
        GROUP BY r.key
     ),
     follower_choice AS (
       SELECT r.id, r.key, r.rank FROM next_rows r
         LEFT JOIN run_end e ON e.key = r.key
        WHERE e.rank IS NULL OR r.rank < e.rank
        ORDER BY r.rank, r.sequence
        LIMIT greatest(0, ${limit} - (SELECT count(*) FROM candidates))
     ),
     followers AS (
       SELECT c.id FROM ${t} c
        WHERE c.id = ANY (ARRAY(SELECT id FROM follower_choice)) AND (c.state || '') = 'pending'
          FOR UPDATE SKIP LOCKED
     ),
     -- per key, the first chosen row another transaction held locked: the run ends before it
     lock_gap AS (
       SELECT f.key, min(f.rank) AS rank FROM follower_choice f
        WHERE f.id NOT IN (SELECT id FROM followers)
        GROUP BY f.key
     ),
     kept AS (
       SELECT f.id, f.key FROM follower_choice f
         LEFT JOIN lock_gap g ON g.key = f.key
        WHERE g.rank IS NULL OR f.rank < g.rank
     ),
     -- one token per key with followers, as one jsonb object (key -> token) the UPDATE reads once:
     -- a lookup by key per claimed row, not a scan of every key's token per row
     key_tokens AS (SELECT jsonb_object_agg(k.key, pg_catalog.gen_random_uuid()) AS tokens FROM (SELECT DISTINCT key FROM kept) k),
     -- the followers' ids as one jsonb object (id -> true): key_first is a lookup per row
     follower_ids AS (SELECT jsonb_object_agg(id::text, true) AS ids FROM kept)
     `;
}

/** What the claim `UPDATE` of `rowsPerKey` needs: CTEs to put before it, its `SET` list, the ids it takes. */
export interface ClaimFollowers {
  /** Text to put between the `candidates` CTE and the `UPDATE` (empty, or `, next_rows AS (…) …`). */
  ctes: string;
  /** The `SET` list from the claim's (`claimSet`): one token per key, `key_first`. */
  set(claimSet: string): string;
  /** The subquery of the ids the `UPDATE` claims. */
  claimed: string;
}

/**
 * The followers part of the claim of table `t` at batch size `limit`: with `rowsPerKey` 1 the
 * claim takes its candidates and marks each the first row of its key (`key_first = true`); above
 * 1 it also takes the followers (`followerCtes`), which share their head's token and have
 * `key_first = false`.
 */
export function claimFollowers(t: string, limit: number, rowsPerKey: number): ClaimFollowers {
  if (rowsPerKey <= 1) return { ctes: '', set: (claimSet) => `${claimSet},\n            key_first = true`, claimed: 'SELECT id FROM candidates' };
  return {
    ctes: followerCtes(t, limit, rowsPerKey),
    set: (claimSet) => {
      const perKey = claimSet.replace('claim_token = pg_catalog.gen_random_uuid()', 'claim_token = coalesce(((SELECT k.tokens FROM key_tokens k) ->> o.key::text)::uuid, pg_catalog.gen_random_uuid())');
      if (perKey === claimSet) throw new Error('claimSet no longer sets claim_token = pg_catalog.gen_random_uuid(): update claimFollowers');
      return `${perKey},\n            key_first = NOT coalesce((SELECT f.ids FROM follower_ids f) ? o.id::text, false)`;
    },
    claimed: 'SELECT id FROM candidates UNION ALL SELECT id FROM kept',
  };
}
