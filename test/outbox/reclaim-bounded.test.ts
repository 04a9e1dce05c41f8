import assert from 'node:assert/strict';
import { afterEach, describe, it } from 'node:test';
import pg from 'pg';
import { runOutboxPass } from '../../lib/outbox/outbox-pass.ts';
import { runRelayPass } from '../../lib/inbox/relay-pass.ts';
import { withStatementBudget } from '../../lib/db/statement-budget.ts';
import { createDeadline } from '../../lib/runtime/deadline.ts';
import { createInvocationContext } from '../../lib/runtime/invocation-context.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import type { TestDatabase } from '../helpers/database.ts';
import { insertOutboxRows, inspectRows, passFixture, withOutboxDatabase } from '../helpers/outbox-pass-fixture.ts';
import { RecordingDestination } from '../helpers/recording-destination.ts';

/**
 * The reclaim never holds a pass past its deadline: it skips expired rows another transaction
 * holds locked (an application's open transaction, an operator's session), and a reclaim slow for
 * any other reason is cancelled at the pass's deadline (`deadline.remainingMs`), not at the end
 * of the invocation; it returned no row, and the pass ends there with its summary, not an error.
 * Before, one locked expired row kept every poller and relay invocation waiting until Lambda timed
 * it out, and the relay forwarded nothing meanwhile.
 */
describe('the reclaim: locked rows skipped, bounded by the pass deadline', () => {
  let db: TestDatabase;
  withOutboxDatabase((d) => (db = d));

  const expire = (table: 'outbox' | 'inbox', id: string) =>
    db.query(
      `UPDATE "${db.schema}".${table} SET state = 'processing', claim_token = gen_random_uuid(),
              claimed_at = clock_timestamp() - interval '2 minutes', lease_expires_at = clock_timestamp() - interval '1 minute' WHERE id = $1`,
      [id],
    );

  /** A connection holding `FOR UPDATE` on the row `id` of `table` until `release`. */
  async function holdRow(table: 'outbox' | 'inbox', id: string): Promise<{ release: () => Promise<void> }> {
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    await client.query('BEGIN');
    await client.query(`SELECT 1 FROM "${db.schema}".${table} WHERE id = $1 FOR UPDATE`, [id]);
    return {
      release: async () => {
        await client.query('ROLLBACK');
        await client.end();
      },
    };
  }

  it('skips an expired row another transaction holds and returns the others; the held row comes back once it is free', async () => {
    const [held, free] = await insertOutboxRows(db, [
      { topic: 'orders', payload: { n: 1 } },
      { topic: 'orders', payload: { n: 2 } },
    ]);
    await expire('outbox', held!);
    await expire('outbox', free!);
    const lock = await holdRow('outbox', held!);
    try {
      const started = Date.now();
      const first = await db.driver.outboxReclaimExpired({});
      assert.ok(Date.now() - started < 2000, 'the reclaim did not wait for the held row');
      assert.deepEqual({ ran: first.ran, reclaimed: first.reclaimed }, { ran: true, reclaimed: 1 });
      const states = new Map((await inspectRows(db, [held!, free!])).map((r) => [r.id, r.state]));
      assert.equal(states.get(held!), 'processing');
      assert.equal(states.get(free!), 'pending');
    } finally {
      await lock.release();
    }
    const second = await db.driver.outboxReclaimExpired({});
    assert.equal(second.reclaimed, 1);
    assert.equal((await inspectRows(db, [held!]))[0]!.state, 'pending');
  });

  it('takes a claim of several rows of a key whole or not at all: one row held elsewhere keeps the whole claim for a later reclaim, which charges it once', async () => {
    const ids = await insertOutboxRows(db, [
      { topic: 'orders', key: 'K', payload: { n: 1 } },
      { topic: 'orders', key: 'K', payload: { n: 2 } },
    ]);
    const claimed = await db.driver.outboxClaimMany({ limit: 10, leaseMs: 30_000, rowsPerKey: 2 });
    assert.equal(claimed.length, 2, 'one claim holds both rows of the key');
    await db.query(`UPDATE "${db.schema}".outbox SET lease_expires_at = clock_timestamp() - interval '1 second' WHERE key = 'K'`);
    const lock = await holdRow('outbox', ids[1]!);
    try {
      const first = await db.driver.outboxReclaimExpired({});
      assert.equal(first.reclaimed + first.dead, 0, 'the claim is not taken in parts');
      assert.deepEqual((await inspectRows(db, ids)).map((r) => r.state), ['processing', 'processing']);
    } finally {
      await lock.release();
    }
    const second = await db.driver.outboxReclaimExpired({});
    assert.equal(second.reclaimed, 2);
    const rows = await inspectRows(db, ids);
    assert.deepEqual(
      rows.map((r) => [r.state, r.attempt]),
      [
        ['pending', 1],
        ['pending', 0],
      ],
      'the lost lease is charged once, to the key\'s first row',
    );
  });

  /** Makes every reclaim statement on `table` sleep `seconds` (a statement-level trigger that recognises it). */
  async function slowReclaim(table: 'outbox' | 'inbox', seconds: number): Promise<void> {
    await db.query(`CREATE OR REPLACE FUNCTION "${db.schema}".slow_reclaim() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF current_query() LIKE '%lease_expires_at <= pg_catalog.statement_timestamp()%' THEN PERFORM pg_sleep(${seconds}); END IF;
        RETURN NULL;
      END $$`);
    await db.query(`CREATE TRIGGER slow_reclaim BEFORE UPDATE ON "${db.schema}".${table} FOR EACH STATEMENT EXECUTE FUNCTION "${db.schema}".slow_reclaim()`);
    triggers.push(table);
  }
  const triggers: string[] = [];
  afterEach(async () => {
    for (const table of triggers.splice(0)) await db.query(`DROP TRIGGER slow_reclaim ON "${db.schema}".${table}`);
  });

  /** Statements of this schema still running (the test's own read excepted). */
  const running = async () =>
    (await db.query<{ query: string }>(`SELECT query FROM pg_stat_activity WHERE state <> 'idle' AND pid <> pg_backend_pid() AND query LIKE $1`, [`%${db.schema}%`])).map((r) => r.query);

  it('reclaims 20,000 expired claims of two keyed rows within one 10 s budget: the whole-claim test is linear in the claims', { timeout: 120_000 }, async () => {
    // Each claim: a key's first row and its follower under one token, its lease ended.
    await db.query(`INSERT INTO "${db.schema}".outbox (topic, key, payload, state, claim_token, lease_expires_at, claimed_at, key_first, sequence)
      SELECT 'orders', 'k' || g, '{}', 'processing', md5('t' || g)::uuid, now() - interval '1 minute', now() - interval '2 minutes', r = 1, g * 2 + r
        FROM generate_series(1, 20000) g CROSS JOIN generate_series(1, 2) r`);
    await db.query(`ANALYZE "${db.schema}".outbox`);
    // Before, the anti-join of the claims' rows against the locked set ran as a nested loop (about
    // 35 s here): the budget's statement_timeout cancelled it, and no tool could ever reclaim them.
    const deadlineAt = Date.now() + 10_000;
    const result = await withStatementBudget(() => deadlineAt - Date.now(), () => db.driver.outboxReclaimExpired({}));
    assert.deepEqual({ ran: result.ran, reclaimed: result.reclaimed, dead: result.dead }, { ran: true, reclaimed: 40_000, dead: 0 });
    const [left] = await db.query<{ n: number; charged: number }>(
      `SELECT count(*) FILTER (WHERE state = 'processing')::int AS n, count(*) FILTER (WHERE attempt = 1)::int AS charged FROM "${db.schema}".outbox`,
    );
    assert.deepEqual({ ...left }, { n: 0, charged: 20_000 }, 'every claim charged once, on its first row');
  });

  /** Ends `slowReclaim`'s trigger on `table` now (the next pass's reclaim runs at its own pace). */
  async function fastReclaim(table: 'outbox' | 'inbox'): Promise<void> {
    triggers.splice(triggers.indexOf(table), 1);
    await db.query(`DROP TRIGGER slow_reclaim ON "${db.schema}".${table}`);
  }

  it('outbox: a slow reclaim is cancelled at the pass deadline; the due rows are sent beside it, the pass ends there with its summary, and nothing runs on', async () => {
    await insertOutboxRows(db, Array.from({ length: 3 }, (_, n) => ({ topic: 'orders', payload: { n } })));
    const [expired] = await insertOutboxRows(db, [{ topic: 'orders', payload: { n: 9 } }]);
    await expire('outbox', expired!);
    await slowReclaim('outbox', 30);
    const destination = new RecordingDestination();
    const timeoutMs = 6000;
    const context = createInvocationContext({ timeoutMs });
    const started = Date.now();
    const fixture = passFixture(db, { destinations: [destination], context, marginMs: 3000, mode: 'deadline' });
    // Cancelled at the deadline, the reclaim returned no row (its transaction rolled back): it did
    // not run, and the pass reached its deadline, which is no failure (before, it failed the pass).
    const summary = await runOutboxPass(fixture);
    const took = Date.now() - started;
    assert.equal(summary.stoppedBecause, 'deadline');
    assert.deepEqual([summary.reclaimRan, summary.reclaimed], [false, 0]);
    assert.equal(summary.sent, 3, 'the claims beside the reclaim sent the due rows');
    assert.ok(fixture.logger.at('warn').some((e) => e.message.startsWith('outbox reclaim cancelled at the pass deadline')), 'the cancellation is logged as a warning');
    assert.ok(took < timeoutMs - 1500, `the pass returned by its deadline (${took} ms of a ${timeoutMs} ms invocation, margin 3000 ms)`);
    assert.deepEqual(await running(), []);
    const [row] = await inspectRows(db, [expired!]);
    assert.deepEqual([row!.state, row!.attempt], ['processing', 0], 'the expired row is untouched');
    // The next pass's reclaim returns it, and the pass sends it.
    await fastReclaim('outbox');
    const next = await runOutboxPass(passFixture(db, { destinations: [destination], mode: 'drain' }));
    assert.deepEqual([next.reclaimRan, next.reclaimed, next.sent], [true, 1, 1]);
    assert.equal((await inspectRows(db, [expired!]))[0]!.state, 'sent');
  });

  it('relay: a slow reclaim is cancelled at the pass deadline, not at the end of the invocation; the pass ends there with its summary', async () => {
    const { rows } = await db.pool.query<{ id: string }>(
      `INSERT INTO "${db.schema}".inbox (source, idempotency_key, payload, consumption) VALUES ('shop', 'k1', '{}', 'push') RETURNING id`,
    );
    const id = rows[0]!.id;
    await expire('inbox', id);
    await slowReclaim('inbox', 30);
    const timeoutMs = 6000;
    const context = createInvocationContext({ timeoutMs });
    const relayPass = (deadline: ReturnType<typeof createDeadline>) =>
      runRelayPass({
        config: db.config,
        driver: db.driver,
        logger: createLogger({ serviceName: 'queuebox', logLevel: 'SILENT' }),
        metrics: new QueueBoxMetrics({ namespace: 'QueueBoxTest', serviceName: 'queuebox-test', write: () => {} }),
        deadline,
        mode: 'drain',
      });
    const started = Date.now();
    // Before, the cancelled reclaim failed the pass.
    const summary = await relayPass(createDeadline(context, 3000));
    const took = Date.now() - started;
    assert.deepEqual([summary.reclaimed, summary.claimed], [0, 0]);
    assert.ok(took < timeoutMs - 1500, `the relay pass returned by its deadline (${took} ms of a ${timeoutMs} ms invocation, margin 3000 ms)`);
    assert.deepEqual(await running(), []);
    const state = async () => (await db.query<{ state: string; attempt: number }>(`SELECT state, attempt FROM "${db.schema}".inbox WHERE id = $1`, [id]))[0]!;
    assert.deepEqual({ ...(await state()) }, { state: 'processing', attempt: 0 }, 'the expired row is untouched');
    // The next pass's reclaim returns it.
    await fastReclaim('inbox');
    const next = await relayPass(createDeadline(createInvocationContext({ timeoutMs: 20_000 }), 1000));
    assert.equal(next.reclaimed, 1);
  });
});
