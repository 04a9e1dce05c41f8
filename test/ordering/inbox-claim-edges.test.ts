/**
 * Edges of the relay's and the pull claim's bounded reads past their window.
 *
 * - The pull claim's limit is the worker's free handler slots, often 1. Reads past a blocked
 *   window sized by that limit (a turn of open aggregates, a sweep of open rows) spent themselves
 *   on the aggregates whose rows are in a handler: with 500 aggregates in flight, a new
 *   aggregate's row was claimed at the 50th claim (63rd at a limit of 1), each empty claim
 *   followed by a poll interval; a worker with 45 busy slots started its handler after 27 s. The
 *   reads are at least `PULL_READ_FLOOR`: up to that many aggregates in a handler, such a row is
 *   claimed at the first claim after it arrives, wherever its aggregate sorts; past it, within
 *   the stated bound (`pullClaimBound`, which counts the rows in flight: the sweep reads them).
 * - The relay and pull claims carry their sweep's horizon from claim to claim. A horizon later
 *   than the database's clock (the clock stepped back, a failover to a primary whose clock is
 *   behind, while the worker kept its driver) let the sweep take a first attempt received with a
 *   delay before it was due. The sweep never reads past now.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { relayClaimText } from '../../lib/db/postgres/inbox-queries.ts';
import { PULL_READ_FLOOR, pullClaimBound, pullClaimText } from '../../lib/db/postgres/pull-queries.ts';
import { OLDEST_WINDOW } from '../../lib/db/postgres/claim-text.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';

describe('inbox claims past their window: aggregates in flight, a carried horizon ahead of the clock (PostgreSQL)', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase();
  });
  after(async () => db.drop());
  const inbox = () => `"${db.schema}".inbox`;

  /** `busy` aggregates with their one row in a handler (a live lease), all older than anything else. */
  const handlersBusy = async (busy: number) => {
    await db.query(`TRUNCATE ${inbox()}`);
    await db.query(
      `INSERT INTO ${inbox()} (source, idempotency_key, aggregate_id, payload, consumption, scheduled_at, created_at, state, claim_token, claimed_at, lease_expires_at)
       SELECT 'shop', 'busy-' || g, 'a' || lpad(g::text, 5, '0'), '{}', 'pull',
              now() - interval '1 hour' + g * interval '1 ms', now() - interval '1 hour' + g * interval '1 ms',
              'processing', gen_random_uuid(), now(), now() + interval '1 hour'
         FROM generate_series(1, $1::int) g ORDER BY g`,
      [busy],
    );
  };

  it('docs/pull-workers.md states the pull claim\'s read floor and its bound as the code has them', () => {
    const docs = readFileSync(new URL('../../docs/pull-workers.md', import.meta.url), 'utf8').replace(/\s+/g, ' ');
    assert.ok(docs.includes(`Each read is \`max(L, ${PULL_READ_FLOOR})\` rows or aggregates`), 'the floor');
    assert.ok(docs.includes(`\`⌈(Q + P)/⌈L/2⌉⌉ + 2·⌈(Q + P)/max(L, ${PULL_READ_FLOOR})⌉ + 3\` claims`), 'the bound');
    // the bound as stated: Q = 10, P = 450, L = 1
    assert.equal(pullClaimBound(10, 450, 1), 460 + 2 * Math.ceil(460 / PULL_READ_FLOOR) + 3);
  });

  it('pull: rows whose lease ended come back in their place, before younger rows, though the turn had moved past them', async () => {
    await handlersBusy(100);
    await db.query(
      `INSERT INTO ${inbox()} (source, idempotency_key, payload, consumption, scheduled_at, created_at)
       SELECT 'shop', 'free-' || g, '{}', 'pull', now() - interval '30 minutes' + g * interval '1 ms', now() - interval '30 minutes' + g * interval '1 ms'
         FROM generate_series(1, 30) g ORDER BY g`,
    );
    await db.query(`INSERT INTO ${inbox()} (source, idempotency_key, aggregate_id, payload, consumption) VALUES ('shop', 'cold', 'cold', '{}', 'pull')`);
    const driver = db.newDriver();
    try {
      const claim = async () => (await driver.pullClaimMany({ source: 'shop', limit: 1, leaseMs: 3_600_000 })).map((r) => r.aggregateId ?? 'none');
      // three claims take rows without aggregate past the busy window: the turn's cursor moves on
      for (let i = 0; i < 3; i++) assert.deepEqual(await claim(), ['none']);
      // the worker that held the 100 rows stopped: their leases end, each is its aggregate's head again
      await db.query(`UPDATE ${inbox()} SET lease_expires_at = clock_timestamp() - interval '1 second' WHERE idempotency_key LIKE 'busy-%'`);
      const next: string[] = [];
      for (let i = 0; i < 35; i++) next.push(...(await claim()));
      assert.deepEqual(next, Array.from({ length: 35 }, (_, i) => `a${String(i + 1).padStart(5, '0')}`));
    } finally {
      await driver.close();
    }
  });

  it('pull: a row that can move is claimed within the bound when the rows in a handler lose their leases after it could move', async (t) => {
    const LIMIT = 10;
    await handlersBusy(300);
    await db.query(
      `INSERT INTO ${inbox()} (source, idempotency_key, payload, consumption, scheduled_at, created_at)
       SELECT 'shop', 'free-' || g, '{}', 'pull', now() - interval '30 minutes' + g * interval '1 ms', now() - interval '30 minutes' + g * interval '1 ms'
         FROM generate_series(1, 20) g ORDER BY g`,
    );
    const [row] = await db.query<{ id: string }>(`INSERT INTO ${inbox()} (source, idempotency_key, aggregate_id, payload, consumption) VALUES ('shop', 'r', 'cold', '{}', 'pull') RETURNING id`);
    const [counts] = await db.query<{ queued: string; busy: string }>(
      `SELECT count(*) FILTER (WHERE state = 'pending' AND scheduled_at <= clock_timestamp()) AS queued,
              count(*) FILTER (WHERE state = 'processing' AND lease_expires_at > clock_timestamp()) AS busy FROM ${inbox()}`,
    );
    const bound = pullClaimBound(Number(counts!.queued), Number(counts!.busy), LIMIT);
    // the worker that held the 300 rows stopped just after the row could move
    await db.query(`UPDATE ${inbox()} SET lease_expires_at = clock_timestamp() WHERE idempotency_key LIKE 'busy-%'`);
    const driver = db.newDriver();
    try {
      let claims = 0;
      let taken = false;
      while (!taken && claims < bound + 50) {
        taken = (await driver.pullClaimMany({ source: 'shop', limit: LIMIT, leaseMs: 3_600_000 })).some((r) => r.id === row!.id);
        claims++;
      }
      t.diagnostic(`claimed at claim ${claims}, bound ${bound}`);
      assert.ok(taken && claims <= bound, `claimed at claim ${claims}, bound ${bound}`);
    } finally {
      await driver.close();
    }
  });

  for (const consumption of ['push', 'pull'] as const) {
    for (const [aggregate, where] of [['zzz', 'after'], ['0new', 'before']] as const) {
      it(`${consumption === 'push' ? 'relay' : 'pull'}: with 2,000 aggregates whose heads wait for a retry, a new aggregate's row (sorting ${where} them) is claimed at the first claim after it arrives`, async () => {
        await db.query(`TRUNCATE ${inbox()}`);
        // each aggregate: its head failed and waits an hour for its retry, a due row behind it
        await db.query(
          `INSERT INTO ${inbox()} (source, idempotency_key, aggregate_id, payload, consumption, scheduled_at, created_at, attempt)
           SELECT 'shop', 'w-' || g || '-' || r, 'a' || lpad(g::text, 5, '0'), '{}', $1,
                  CASE WHEN r = 0 THEN now() + interval '1 hour' ELSE now() - interval '1 hour' + g * interval '1 ms' END,
                  now() - interval '1 hour' + g * interval '1 ms' + r * interval '1 us', CASE WHEN r = 0 THEN 1 ELSE 0 END
             FROM generate_series(1, 2000) g, generate_series(0, 1) r ORDER BY g, r`,
          [consumption],
        );
        const driver = db.newDriver();
        const claim = async () =>
          (consumption === 'push' ? await driver.inboxClaimPushMany({ limit: 10, leaseMs: 60_000 }) : await driver.pullClaimMany({ source: 'shop', limit: 4, leaseMs: 60_000 })).map((r) => r.id);
        try {
          // The relay or worker has claimed before, twice (its turn and sweep somewhere in the middle).
          for (let i = 0; i < 2; i++) assert.deepEqual(await claim(), []);
          const [row] = await db.query<{ id: string }>(`INSERT INTO ${inbox()} (source, idempotency_key, aggregate_id, payload, consumption) VALUES ('shop', 'r', $1, '{}', $2) RETURNING id`, [aggregate, consumption]);
          assert.deepEqual(await claim(), [row!.id]);
        } finally {
          await driver.close();
        }
      });
    }
  }

  for (const limit of [10, 1]) {
    for (const [aggregate, where] of [['zzz', 'after'], ['0new', 'before']] as const) {
      it(`pull, limit ${limit}: with ${PULL_READ_FLOOR - 50} aggregates in a handler, a new aggregate's row (sorting ${where} them) is claimed at the first claim after it arrives`, async () => {
        await handlersBusy(PULL_READ_FLOOR - 50);
        const driver = db.newDriver();
        try {
          // The worker has claimed before (whatever it carries from that claim).
          assert.deepEqual(await driver.pullClaimMany({ source: 'shop', limit, leaseMs: 60_000 }), []);
          const [row] = await db.query<{ id: string }>(`INSERT INTO ${inbox()} (source, idempotency_key, aggregate_id, payload, consumption) VALUES ('shop', 'r', $1, '{}', 'pull') RETURNING id`, [aggregate]);
          const claimed = await driver.pullClaimMany({ source: 'shop', limit, leaseMs: 60_000 });
          assert.deepEqual(claimed.map((r) => r.id), [row!.id]);
        } finally {
          await driver.close();
        }
      });

      it(`pull, limit ${limit}: with ${PULL_READ_FLOOR * 5} aggregates in a handler, a new aggregate's row (sorting ${where} them) is claimed within the stated bound`, async (t) => {
        const busy = PULL_READ_FLOOR * 5;
        await handlersBusy(busy);
        const driver = db.newDriver();
        try {
          // The worker has claimed before, twice (its turn and sweep somewhere in the middle).
          for (let i = 0; i < 2; i++) assert.deepEqual(await driver.pullClaimMany({ source: 'shop', limit, leaseMs: 60_000 }), []);
          const [row] = await db.query<{ id: string }>(`INSERT INTO ${inbox()} (source, idempotency_key, aggregate_id, payload, consumption) VALUES ('shop', 'r', $1, '{}', 'pull') RETURNING id`, [aggregate]);
          const bound = pullClaimBound(1, busy, limit);
          let claims = 0;
          let claimed: string[] = [];
          while (claimed.length === 0 && claims < bound + 20) {
            claimed = (await driver.pullClaimMany({ source: 'shop', limit, leaseMs: 60_000 })).map((r) => r.id);
            claims++;
          }
          t.diagnostic(`claimed at claim ${claims}, bound ${bound}`);
          assert.deepEqual(claimed, [row!.id]);
          assert.ok(claims <= bound, `claimed at claim ${claims}, past the bound ${bound}`);
        } finally {
          await driver.close();
        }
      });
    }
  }

  for (const consumption of ['push', 'pull'] as const) {
  it(`${consumption === 'push' ? 'relay' : 'pull'}: a carried horizon an hour ahead of the clock claims no row before it is due`, async () => {
    const LIMIT = 10;
    await db.query(`TRUNCATE ${inbox()}`);
    // A hot aggregate whose head is in flight and whose backlog fills the window: the claim looks past it.
    await db.query(
      `INSERT INTO ${inbox()} (source, idempotency_key, aggregate_id, payload, consumption, scheduled_at, created_at)
       SELECT 'shop', 'hot-' || g, 'hot', '{}', $2, now() - interval '1 hour' + g * interval '1 ms', now() - interval '1 hour' + g * interval '1 ms'
         FROM generate_series(0, $1::int) g ORDER BY g`,
      [LIMIT * OLDEST_WINDOW + 5, consumption],
    );
    await db.query(
      `UPDATE ${inbox()} SET state = 'processing', claim_token = gen_random_uuid(), claimed_at = now(), lease_expires_at = now() + interval '1 hour'
        WHERE sequence = (SELECT min(sequence) FROM ${inbox()})`,
    );
    // Received with a delay: due in 10 minutes.
    await db.query(`INSERT INTO ${inbox()} (source, idempotency_key, aggregate_id, payload, consumption, scheduled_at) VALUES ('shop', 'later', 'cold', '{}', $1, clock_timestamp() + interval '10 minutes')`, [consumption]);
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      // The position a relay or pull worker carries (set as inboxClaimPushMany and pullClaimMany set it): a sweep under way, its horizon an hour ahead.
      await client.query(`SELECT set_config('queuebox.claim_at', ((extract(epoch FROM now() - interval '1 minute') * 1000000)::bigint)::text, true),
                                 set_config('queuebox.claim_tie', '0', true), set_config('queuebox.claim_id', '', true),
                                 set_config('queuebox.claim_horizon', ((extract(epoch FROM now() + interval '1 hour') * 1000000)::bigint)::text, true),
                                 set_config('queuebox.claim_source', '', true), set_config('queuebox.claim_aggregate', '', true)`);
      const claim = consumption === 'push' ? { text: relayClaimText(db.driver.ctx.names, LIMIT), values: [60_000] } : { text: pullClaimText(db.driver.ctx.names), values: ['shop', LIMIT, 60_000] };
      const { rows } = await client.query<{ id: string | null }>(claim.text, claim.values);
      await client.query('ROLLBACK');
      assert.deepEqual(rows.filter((r) => r.id !== null), []);
    } finally {
      client.release();
    }
  });
  }
});
