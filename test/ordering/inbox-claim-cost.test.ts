import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { relayClaimText } from '../../lib/db/postgres/inbox-queries.ts';
import { pullClaimText } from '../../lib/db/postgres/pull-queries.ts';
import { OLDEST_WINDOW } from '../../lib/db/postgres/claim-text.ts';
import { CLAIM_FUNCTION_SETTINGS } from '../../lib/db/postgres/claim-functions.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';

const LEASE = 60_000;
const LIMIT = 100;
/** Open aggregates of the blocked claim measured against the unblocked one (the product's requirement). */
const MANY = 50_000;

/**
 * Shared buffers and execution time of one run of a claim statement (as the claim functions' plan
 * settings pin it), by `EXPLAIN (ANALYZE, BUFFERS)` in a rolled-back transaction, and the rows it
 * answered. Run twice: the first execution warms the caches; the second is counted. Index-only
 * scans are off, so that every probe reads its heap rows whatever the visibility map says (which
 * other sessions' open transactions decide: see test/ordering/claim-fairness.test.ts). The
 * statement runs at the start of a turn and of a sweep (no carried position: the first claim of a
 * worker), or with `carried`: a sweep begun an hour ago (every row is due since its horizon) and an
 * aggregate cursor past the last aggregate (the turn wraps to the first), as a worker's later claim.
 */
async function claimBuffers(db: TestDatabase, text: string, values: unknown[], carried = false): Promise<{ buffers: number; ms: number; claimed: number }> {
  const client = await db.pool.connect();
  try {
    await client.query('BEGIN');
    if (carried) {
      await client.query(`SELECT set_config('queuebox.claim_horizon', ((extract(epoch FROM now() - interval '1 hour') * 1000000)::bigint)::text, true),
                                 set_config('queuebox.claim_source', 'shop', true), set_config('queuebox.claim_aggregate', 'a99999', true)`);
    }
    for (const setting of CLAIM_FUNCTION_SETTINGS) await client.query(`SET LOCAL ${setting.replace('=', ' = ')}`);
    await client.query('SET LOCAL enable_indexonlyscan = off');
    let plan: Array<{ Plan: Record<string, number>; 'Execution Time': number }> = [];
    for (let i = 0; i < 2; i++) {
      await client.query('SAVEPOINT s');
      const { rows } = await client.query<{ 'QUERY PLAN': typeof plan }>(`EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${text}`, values);
      plan = rows[0]!['QUERY PLAN'];
      await client.query('ROLLBACK TO SAVEPOINT s');
    }
    const top = plan[0]!.Plan;
    return { buffers: top['Shared Hit Blocks']! + top['Shared Read Blocks']!, ms: plan[0]!['Execution Time'], claimed: top['Actual Rows']! };
  } finally {
    await client.query('ROLLBACK');
    client.release();
  }
}

/**
 * A claim whose window of the oldest rows is blocked — all rows of one aggregate whose head is
 * under a live lease — must not read every open aggregate's head: at 50,000 open aggregates it
 * reads at most twice the shared buffers of a claim whose window is not blocked.
 */
for (const consumption of ['push', 'pull'] as const) {
  describe(`${consumption === 'push' ? 'relay' : 'pull'} claim: a blocked window costs at most twice an unblocked claim at 50,000 open aggregates (PostgreSQL)`, () => {
    let db: TestDatabase;
    before(async () => {
      db = await createTestDatabase();
    });
    after(async () => db.drop());

    const inbox = () => `"${db.schema}".inbox`;
    const statement = () =>
      consumption === 'push'
        ? { text: relayClaimText(db.driver.ctx.names, LIMIT), values: [LEASE] }
        : { text: pullClaimText(db.driver.ctx.names), values: ['shop', LIMIT, LEASE] };

    /**
     * `aggregates` open aggregates of two rows each; with `blocked`, first an aggregate whose head
     * is under a live lease with more rows behind it than the window reads, all older.
     */
    const oneClaim = async (aggregates: number, blocked: boolean, carried = false) => {
      await db.query(`TRUNCATE ${inbox()}`);
      if (blocked) {
        await db.query(
          `INSERT INTO ${inbox()} (source, idempotency_key, aggregate_id, payload, consumption, scheduled_at, created_at)
           SELECT 'shop', 'hot-' || g, 'hot', '{}', $1, now() - interval '1 hour', now() - interval '1 hour' FROM generate_series(0, $2::int) g ORDER BY g`,
          [consumption, LIMIT * OLDEST_WINDOW + LIMIT],
        );
        await db.query(
          `UPDATE ${inbox()} SET state = 'processing', claim_token = gen_random_uuid(), claimed_at = now(), lease_expires_at = now() + interval '1 hour'
            WHERE sequence = (SELECT min(sequence) FROM ${inbox()})`,
        );
      }
      await db.query(
        `INSERT INTO ${inbox()} (source, idempotency_key, aggregate_id, payload, consumption)
         SELECT 'shop', 'k-' || g, 'a' || (g % $2::int), '{}', $1 FROM generate_series(0, $2::int * 2 - 1) g ORDER BY g`,
        [consumption, aggregates],
      );
      await db.query(`VACUUM ANALYZE ${inbox()}`);
      const { text, values } = statement();
      return claimBuffers(db, text, values, carried);
    };

    it(`one claim of ${LIMIT} with its window blocked reads at most twice the buffers of an unblocked claim`, { timeout: 600_000 }, async (t) => {
      const unblocked = await oneClaim(MANY, false);
      const seen: string[] = [`unblocked at ${MANY}: ${unblocked.buffers} buffers, ${unblocked.ms.toFixed(1)} ms (${unblocked.claimed} rows)`];
      let blocked = unblocked;
      for (const aggregates of [1_000, 10_000, MANY]) {
        blocked = await oneClaim(aggregates, true);
        seen.push(`blocked at ${aggregates}: ${blocked.buffers} buffers, ${blocked.ms.toFixed(1)} ms (${blocked.claimed} rows)`);
      }
      const carried = await oneClaim(MANY, true, true);
      seen.push(`blocked at ${MANY}, a sweep and a turn carried: ${carried.buffers} buffers, ${carried.ms.toFixed(1)} ms (${carried.claimed} rows)`);
      t.diagnostic(seen.join('; '));
      assert.ok(unblocked.claimed > 0 && blocked.claimed > 0 && carried.claimed > 0, 'the claims take rows');
      assert.ok(blocked.buffers <= unblocked.buffers * 2 && carried.buffers <= unblocked.buffers * 2, seen.join('; '));
    });
  });
}
