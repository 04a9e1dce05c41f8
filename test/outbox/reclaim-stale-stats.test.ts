import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { runOutboxPass } from '../../lib/outbox/outbox-pass.ts';
import { withStatementBudget } from '../../lib/db/statement-budget.ts';
import { createPullClient } from '../../lib/pull/pull-client.ts';
import type { TestDatabase } from '../helpers/database.ts';
import { insertExpiredOutboxClaims, insertExpiredPushRows, relayPassOf, staleStatistics as staleStatisticsOf } from '../helpers/expired-claims.ts';
import { passFixture, stateCounts, withOutboxDatabase } from '../helpers/outbox-pass-fixture.ts';
import { RecordingDestination } from '../helpers/recording-destination.ts';

/**
 * Expired leases on a table whose statistics do not know them (autovacuum off on the table, or
 * the rows written just before, and no ANALYZE since): every claim planned from those statistics
 * takes them back within one pass's statement budget. Before, the outbox reclaim's whole-claim
 * test (`partial`) was folded into its UPDATE and run again for every row it checked: 3,000
 * expired keyed rows ran past a 20 s budget, the reclaim rolled back, and no pass ever reclaimed
 * them. The relay's reclaim and the pull claim (which takes expired rows itself) get the same
 * backlog.
 */
describe('expired leases on stale statistics', () => {
  let db: TestDatabase;
  withOutboxDatabase((d) => (db = d));

  const staleStatistics = (table: 'outbox' | 'inbox') => staleStatisticsOf(db, table);

  /** The statistics of `table` were never taken: the planner knows nothing of the rows inserted. */
  async function assertNeverAnalyzed(table: 'outbox' | 'inbox'): Promise<void> {
    const [stats] = await db.query<{ analyzed: boolean }>(
      `SELECT last_analyze IS NOT NULL OR last_autoanalyze IS NOT NULL AS analyzed FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = $2`,
      [db.schema, table],
    );
    assert.equal(stats?.analyzed, false, `no ANALYZE of ${table}`);
  }

  const relayPass = (timeoutMs: number) => relayPassOf(db, timeoutMs);

  for (const [claims, rowsPerClaim] of [
    [3000, 1],
    [2000, 2],
  ] as const) {
    it(`outbox: one pass of 20 s reclaims ${claims} expired claims of ${rowsPerClaim} keyed row(s) each and sends them`, { timeout: 120_000 }, async () => {
      await staleStatistics('outbox');
      await insertExpiredOutboxClaims(db, claims, rowsPerClaim);
      await assertNeverAnalyzed('outbox');
      const destination = new RecordingDestination();
      const summary = await runOutboxPass(passFixture(db, { destinations: [destination], mode: 'drain', timeoutMs: 20_000 }));
      const rows = claims * rowsPerClaim;
      assert.deepEqual([summary.reclaimRan, summary.reclaimed, summary.sent], [true, rows, rows], 'the reclaim ran within the pass and its rows were sent');
      assert.deepEqual(await stateCounts(db), { sent: rows });
      assert.equal(new Set(destination.deliveries.map((d) => d.id)).size, rows);
      // The lost lease is charged once per claim, to the key's first row.
      const [charged] = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".outbox WHERE attempt = 1`);
      assert.equal(charged!.n, claims);
    });
  }

  it('relay: one pass of 20 s reclaims 3000 expired push rows of as many aggregates and forwards them', { timeout: 120_000 }, async () => {
    await db.query(`DELETE FROM "${db.schema}".inbox`);
    await staleStatistics('inbox');
    await insertExpiredPushRows(db, 3000);
    await assertNeverAnalyzed('inbox');
    const summary = await relayPass(20_000);
    assert.deepEqual([summary.reclaimed, summary.forwarded], [3000, 3000]);
    const [left] = await db.query<{ open: number; forwarded: number }>(
      `SELECT count(*) FILTER (WHERE state IN ('pending', 'processing'))::int AS open, count(*) FILTER (WHERE state = 'processed')::int AS forwarded FROM "${db.schema}".inbox`,
    );
    assert.deepEqual({ ...left }, { open: 0, forwarded: 3000 });
  });

  it('pull: claims within a 20 s budget take 3000 expired pull rows of as many aggregates again, each once', { timeout: 120_000 }, async () => {
    await db.query(`DELETE FROM "${db.schema}".inbox`);
    await staleStatistics('inbox');
    await db.query(
      `INSERT INTO "${db.schema}".inbox (source, idempotency_key, aggregate_id, payload, consumption, state, claim_token, lease_expires_at, claimed_at)
       SELECT 'jobs', 'p' || g, 'a' || g, '{}', 'pull', 'processing', gen_random_uuid(), now() - interval '1 minute', now() - interval '2 minutes'
         FROM generate_series(1, 3000) g`,
    );
    await assertNeverAnalyzed('inbox');
    const client = createPullClient(db.driver);
    const deadlineAt = Date.now() + 20_000;
    const taken = new Set<string>();
    await withStatementBudget(
      () => deadlineAt - Date.now(),
      async () => {
        for (;;) {
          const batch = await client.claim('jobs', { batch: 500, leaseMs: 60_000 });
          if (batch.length === 0) break;
          for (const m of batch) {
            assert.ok(!taken.has(m.id), `${m.id} claimed twice`);
            taken.add(m.id);
          }
        }
      },
    );
    assert.equal(taken.size, 3000);
    const [left] = await db.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM "${db.schema}".inbox WHERE source = 'jobs' AND state = 'processing' AND attempt = 1 AND lease_expires_at > clock_timestamp()`,
    );
    assert.equal(left!.n, 3000, 'every row under its new lease, its lost one charged');
  });
});
