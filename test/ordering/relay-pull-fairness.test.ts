import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import { OLDEST_WINDOW } from '../../lib/db/postgres/claim-text.ts';
import { inboxClaimBound } from '../../lib/db/postgres/inbox-queries.ts';
import { pullClaimBound } from '../../lib/db/postgres/pull-queries.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';

const LIMIT = 10;
const LEASE = 60_000;
const ROUNDS = 12;
/** New aggregates received before each claim: twice what a claim takes, so they pile up. */
const STREAM = 2 * LIMIT;
/** The hot aggregate's backlog: more than the window of the oldest rows during the whole run. */
const HOT_ROWS = LIMIT * OLDEST_WINDOW + 4 * ROUNDS * 2;

/**
 * The relay's bound (docs/inbox.md, "The wait of a row that can move", `inboxClaimBound`): a row
 * that can move is claimed within `inboxClaimBound(Q, L)` claims, `Q` being the number of due open
 * rows when it can move (the hot aggregate's backlog included) and `L` the batch size: a claim
 * reads a bounded turn of open aggregates and a bounded sweep of due rows past its window, not the
 * head of every open aggregate.
 */
function relayBound(queued: number): number {
  return inboxClaimBound(queued, LIMIT);
}

/**
 * The pull claim's bound (docs/pull-workers.md, `pullClaimBound`): the relay's, with reads past
 * the window of at least `PULL_READ_FLOOR` rows and aggregates; `Q` counted as for the relay, and
 * no row is in a handler between the claims here (each claim's rows are finished at once).
 */
function pullBound(queued: number): number {
  return pullClaimBound(queued, 0, LIMIT);
}

/**
 * A hot aggregate with a backlog older than everything (one row moves per claim, as its row in
 * flight is forwarded), and a stream of new aggregates that outgrows the claims (2 × the batch
 * before every claim). Before each claim, one row without aggregate and one row of a cold
 * aggregate arrive, ahead of that round's stream. Every one of them must be claimed within the
 * stated bound, counted from the claim after it arrived.
 */
for (const consumption of ['push', 'pull'] as const) {
  describe(`${consumption === 'push' ? 'relay' : 'pull'} claims: rows without aggregate and cold aggregates are claimed within the stated bound beside a hot aggregate and a stream of new aggregates (PostgreSQL)`, () => {
    let db: TestDatabase;
    before(async () => {
      db = await createTestDatabase();
    });
    after(async () => db.drop());
    beforeEach(async () => {
      await db.query(`TRUNCATE "${db.schema}".inbox, "${db.schema}".outbox`);
    });

    const inbox = () => `"${db.schema}".inbox`;
    /** Receives rows in the given order (increasing `sequence`, `created_at` and `scheduled_at`); returns the ids in that order. */
    const receive = async (rows: Array<{ key: string; aggregateId: string | null }>): Promise<string[]> => {
      const inserted = await db.query<{ id: string; sequence: string }>(
        `INSERT INTO ${inbox()} (source, idempotency_key, aggregate_id, payload, consumption, created_at, scheduled_at)
         SELECT 'shop', s.key, s.aggregate_id, '{}', $3,
                statement_timestamp() + s.ord * interval '1 microsecond', statement_timestamp() + s.ord * interval '1 microsecond'
           FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS s(key, aggregate_id, ord)
          ORDER BY s.ord
         RETURNING id, sequence`,
        [rows.map((r) => r.key), rows.map((r) => r.aggregateId), consumption],
      );
      return inserted.sort((a, b) => Number(a.sequence) - Number(b.sequence)).map((r) => r.id);
    };
    const claim = async () =>
      consumption === 'push'
        ? db.driver.inboxClaimPushMany({ limit: LIMIT, leaseMs: LEASE })
        : db.driver.pullClaimMany({ source: 'shop', limit: LIMIT, leaseMs: LEASE });
    /** The due open rows now (rows that arrive later do not count). */
    const queued = async (): Promise<number> => {
      const [row] = await db.query<{ n: string }>(
        `SELECT count(*) AS n FROM ${inbox()} o
          WHERE o.consumption = $1 AND o.scheduled_at <= clock_timestamp()
            AND (o.state = 'pending' OR (o.state = 'processing' AND o.lease_expires_at <= clock_timestamp()))`,
        [consumption],
      );
      return Number(row!.n);
    };

    it('a hot aggregate and a stream of new aggregates hold no row past the bound', async (t) => {
      await receive(Array.from({ length: HOT_ROWS }, (_, n) => ({ key: `hot-${n}`, aggregateId: 'hot' })));
      const tracked = new Map<string, { name: string; round: number; bound: number; claimedAt?: number }>();
      let claims = 0;
      const claimAndForward = async () => {
        const rows = await claim();
        claims++;
        for (const row of rows) {
          const t = tracked.get(row.id);
          if (t !== undefined) t.claimedAt = claims;
        }
        // every claimed row is finished at once, the hot aggregate's too: its next row can move
        await db.query(`UPDATE ${inbox()} SET state = 'processed', processed_at = clock_timestamp() WHERE id = ANY($1::uuid[])`, [rows.map((r) => r.id)]);
      };
      for (let round = 1; round <= ROUNDS; round++) {
        const [keyless, cold] = await receive([
          { key: `keyless-${round}`, aggregateId: null },
          { key: `cold-${round}`, aggregateId: `cold-${round}` },
        ]);
        for (const [name, id] of [[`keyless-${round}`, keyless!], [`cold-${round}`, cold!]] as const) {
          tracked.set(id, { name, round, bound: consumption === 'push' ? relayBound(await queued()) : pullBound(await queued()) });
        }
        await receive(Array.from({ length: STREAM }, (_, n) => ({ key: `new-${round}-${n}`, aggregateId: `new-${round}-${n}` })));
        await claimAndForward();
      }
      // the stream stops; claims go on until every tracked row was claimed (or long past any bound)
      for (let extra = 0; extra < 100 && [...tracked.values()].some((t) => t.claimedAt === undefined); extra++) await claimAndForward();

      const waits = [...tracked.values()]
        .map((r) => ({ ...r, waited: r.claimedAt === undefined ? Infinity : r.claimedAt - r.round + 1 }));
      t.diagnostic(waits.map((r) => `${r.name} ${r.waited}/${r.bound}`).join(', '));
      const late = waits
        .filter((r) => r.waited > r.bound)
        .map((r) => `${r.name}: claimed ${r.waited} claims after it arrived, bound ${r.bound}`);
      assert.deepEqual(late, []);
    });
  });
}
