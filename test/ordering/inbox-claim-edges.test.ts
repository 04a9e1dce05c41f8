/**
 * Two edges of the relay's and the pull claim's reads past their window.
 *
 * - The pull claim's limit is the worker's free handler slots, often 1. A read past a blocked
 *   window sized by that limit (a bounded turn of open aggregates, a bounded sweep of open rows)
 *   spent itself on the aggregates whose rows are in a handler: with 500 aggregates in flight, a
 *   new aggregate's row was claimed at the 50th claim (63rd at a limit of 1), each empty claim
 *   followed by a poll interval; a worker with 45 busy slots started its handler after 27 s. The
 *   pull claim reads every open aggregate's head past its window, and takes such a row at once.
 * - The relay carries its sweep's horizon from claim to claim. A horizon later than the database's
 *   clock (the clock stepped back, a failover to a primary whose clock is behind, while the relay
 *   kept its driver) let the sweep take a first attempt received with a delay before it was due.
 *   The sweep never reads past now.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { relayClaimText } from '../../lib/db/postgres/inbox-queries.ts';
import { OLDEST_WINDOW } from '../../lib/db/postgres/claim-text.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';

describe('inbox claims past their window: aggregates in flight, a carried horizon ahead of the clock (PostgreSQL)', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase();
  });
  after(async () => db.drop());
  const inbox = () => `"${db.schema}".inbox`;

  for (const limit of [10, 1]) {
    it(`pull, limit ${limit}: with 500 aggregates in a handler, a new aggregate's row is claimed at the first claim after it arrives`, async () => {
      await db.query(`TRUNCATE ${inbox()}`);
      await db.query(
        `INSERT INTO ${inbox()} (source, idempotency_key, aggregate_id, payload, consumption, scheduled_at, created_at, state, claim_token, claimed_at, lease_expires_at)
         SELECT 'shop', 'busy-' || g, 'a' || lpad(g::text, 5, '0'), '{}', 'pull',
                now() - interval '1 hour' + g * interval '1 ms', now() - interval '1 hour' + g * interval '1 ms',
                'processing', gen_random_uuid(), now(), now() + interval '1 hour'
           FROM generate_series(1, 500) g ORDER BY g`,
      );
      const driver = db.newDriver();
      try {
        // The worker has claimed before (whatever it carries from that claim).
        assert.deepEqual(await driver.pullClaimMany({ source: 'shop', limit, leaseMs: 60_000 }), []);
        const [row] = await db.query<{ id: string }>(`INSERT INTO ${inbox()} (source, idempotency_key, aggregate_id, payload, consumption) VALUES ('shop', 'r', 'zzz', '{}', 'pull') RETURNING id`);
        const claimed = await driver.pullClaimMany({ source: 'shop', limit, leaseMs: 60_000 });
        assert.deepEqual(claimed.map((r) => r.id), [row!.id]);
      } finally {
        await driver.close();
      }
    });
  }

  it('relay: a carried horizon an hour ahead of the clock claims no row before it is due', async () => {
    const LIMIT = 10;
    await db.query(`TRUNCATE ${inbox()}`);
    // A hot aggregate whose head is in flight and whose backlog fills the window: the claim looks past it.
    await db.query(
      `INSERT INTO ${inbox()} (source, idempotency_key, aggregate_id, payload, consumption, scheduled_at, created_at)
       SELECT 'shop', 'hot-' || g, 'hot', '{}', 'push', now() - interval '1 hour' + g * interval '1 ms', now() - interval '1 hour' + g * interval '1 ms'
         FROM generate_series(0, $1::int) g ORDER BY g`,
      [LIMIT * OLDEST_WINDOW + 5],
    );
    await db.query(
      `UPDATE ${inbox()} SET state = 'processing', claim_token = gen_random_uuid(), claimed_at = now(), lease_expires_at = now() + interval '1 hour'
        WHERE sequence = (SELECT min(sequence) FROM ${inbox()})`,
    );
    // Received with a delay: due in 10 minutes.
    await db.query(`INSERT INTO ${inbox()} (source, idempotency_key, aggregate_id, payload, consumption, scheduled_at) VALUES ('shop', 'later', 'cold', '{}', 'push', clock_timestamp() + interval '10 minutes')`);
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      // The position a relay carries (set as inboxClaimPushMany sets it): a sweep under way, its horizon an hour ahead.
      await client.query(`SELECT set_config('queuebox.claim_at', ((extract(epoch FROM now() - interval '1 minute') * 1000000)::bigint)::text, true),
                                 set_config('queuebox.claim_tie', '0', true), set_config('queuebox.claim_id', '', true),
                                 set_config('queuebox.claim_horizon', ((extract(epoch FROM now() + interval '1 hour') * 1000000)::bigint)::text, true),
                                 set_config('queuebox.claim_source', '', true), set_config('queuebox.claim_aggregate', '', true)`);
      const { rows } = await client.query<{ id: string | null }>(relayClaimText(db.driver.ctx.names, LIMIT), [60_000]);
      await client.query('ROLLBACK');
      assert.deepEqual(rows.filter((r) => r.id !== null), []);
    } finally {
      client.release();
    }
  });
});
