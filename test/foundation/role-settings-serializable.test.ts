/**
 * A role or database whose default isolation is SERIALIZABLE or REPEATABLE READ changes nothing
 * QueueBox does: its statements and transactions run at READ COMMITTED (`pg-pool.ts`), so
 * concurrent passes, claims, renewals and pull handlers meet without serialization failures
 * (SQLSTATE 40001). A pull handler's transaction is the application's and keeps the role's
 * isolation; a serialization failure it meets is a failed run, retried after its backoff like any
 * other (never a tight loop, and `maxAttempts` still bounds it).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type pg from 'pg';
import { PostgresDriver } from '../../lib/db/postgres/postgres-driver.ts';
import { createPullWorker } from '../../lib/index.ts';
import { runOutboxPass } from '../../lib/outbox/outbox-pass.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { insertOutboxRows, passFixture } from '../helpers/outbox-pass-fixture.ts';
import { RecordingDestination } from '../helpers/recording-destination.ts';
import { insertPullRows, memoryLogger, readPullRows } from '../pull/pull-fixtures.ts';
import { createRoleWith, driverAsRole, type TestRole } from './role-settings-fixtures.ts';

describe('a role whose default isolation is serializable or repeatable read (PostgreSQL)', { timeout: 180_000 }, () => {
  let db: TestDatabase;
  let serializable: TestRole;
  let repeatable: TestRole;
  const drivers: PostgresDriver[] = [];
  /** A driver of the test's schema logging in as `role`. */
  const driverAs = (role: TestRole, overrides: Record<string, unknown> = {}) => {
    const d = driverAsRole(db, role, { database: overrides });
    drivers.push(d);
    return d;
  };
  before(async () => {
    db = await createTestDatabase({
      destinations: { main: { type: 'sqs', queueUrl: 'http://localhost:1/000000000000/main' } },
      outbox: { routes: [{ topicPattern: '**', destination: 'main' }], pollIntervalMs: 10 },
    });
    serializable = await createRoleWith(db, { default_transaction_isolation: 'serializable' });
    repeatable = await createRoleWith(db, { default_transaction_isolation: 'repeatable read' });
  });
  after(async () => {
    await Promise.all(drivers.map((d) => d.close().catch(() => {})));
    await serializable.drop();
    await repeatable.drop();
    await db.drop();
  });

  it('three concurrent outbox passes drain keyed rows: every row sent once, in order per key, none left', async () => {
    const keys = 10;
    await insertOutboxRows(db, Array.from({ length: 600 }, (_, i) => ({ topic: 'orders.paid', key: `k${i % keys}`, payload: { i } })));
    const destination = new RecordingDestination({ name: 'main' });
    const passes = [0, 1, 2].map(() => runOutboxPass(passFixture(db, { destinations: [destination], driver: driverAs(serializable, { poolMax: 2 }), mode: 'drain', timeoutMs: 60_000 })));
    const summaries = await Promise.all(passes);
    assert.equal(summaries.reduce((n, s) => n + s.sent, 0), 600);
    assert.equal(destination.deliveries.length, 600, 'each row delivered once');
    const byKey = new Map<string, number[]>();
    for (const m of destination.deliveries) byKey.set(m.key!, [...(byKey.get(m.key!) ?? []), (m.payload as { i: number }).i]);
    for (const [key, order] of byKey) assert.deepEqual(order, [...order].sort((a, b) => a - b), `key ${key} in order`);
    const [left] = await db.query<{ n: number; attempts: number }>(`SELECT count(*) FILTER (WHERE state <> 'sent')::int AS n, coalesce(sum(attempt), 0)::int AS attempts FROM "${db.schema}".outbox`);
    assert.deepEqual(left, { n: 0, attempts: 0 }, 'no row left, no attempt spent');
  });

  it('a renewal that waited on a row another transaction changed and committed lands (repeatable read: 40001 without READ COMMITTED)', async () => {
    const driver = driverAs(repeatable);
    await db.query(`DELETE FROM "${db.schema}".inbox`);
    await insertPullRows(db, 'renew', [{ key: 'r1' }]);
    const [claim] = await driver.pullClaimMany({ source: 'renew', limit: 1, leaseMs: 60_000 });
    assert.ok(claim);
    // Another transaction holds the row's lock while the renewal's statement begins, then commits a change to it.
    const holder = await db.pool.connect();
    try {
      await holder.query('BEGIN');
      await holder.query(`UPDATE "${db.schema}".inbox SET updated_at = clock_timestamp() WHERE id = $1`, [claim.id]);
      const renewal = driver.pullRenew({ id: claim.id, token: claim.claimToken, leaseMs: 120_000 });
      // The renewal waits on the row's lock.
      for (let i = 0; i < 200; i++) {
        const waiting = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE usename = $1 AND wait_event_type = 'Lock'`, [repeatable.name]);
        if (waiting[0]!.n > 0) break;
        await new Promise((resolve) => setTimeout(resolve, 25));
      }
      await holder.query('COMMIT');
      assert.equal(await renewal, true, 'the renewal re-checked the row and renewed it');
    } finally {
      holder.release();
    }
    const [row] = await readPullRows(db, 'renew');
    assert.equal(row!.state, 'processing');
  });

  it("a pull worker's handler transaction keeps the role's SERIALIZABLE, and completes its rows at their first attempt", async () => {
    const count = 6;
    await insertPullRows(db, 'serial', Array.from({ length: count }, (_, i) => ({ key: `s${i}` })));
    const seen: string[] = [];
    const worker = createPullWorker({
      driver: driverAs(serializable),
      source: 'serial',
      concurrency: 1,
      batch: 1,
      retry: { maxAttempts: 1 },
      logger: memoryLogger(),
      metrics: false,
      handler: async (_message, { transaction }) => {
        await transaction(async (tx: pg.PoolClient) => {
          seen.push((await tx.query<{ iso: string }>(`SELECT current_setting('transaction_isolation') AS iso`)).rows[0]!.iso);
        });
      },
    });
    let completed = 0;
    for (let run = 0; run < 10 && completed < count; run++) completed += (await worker.runOnce()).completed;
    assert.equal(completed, count);
    assert.deepEqual([...new Set(seen)], ['serializable'], 'the application chose SERIALIZABLE for its transactions: QueueBox does not lower it');
    const rows = await readPullRows(db, 'serial');
    assert.deepEqual(rows.filter((r) => r.state !== 'processed' || r.attempt !== 0).map((r) => [r.state, r.attempt, r.last_error]), []);
  });

  it("a handler's serialization failure is a failed run, retried after its backoff: no tight loop, and runOnce returns", async () => {
    await insertPullRows(db, 'conflict', [{ key: 'c1' }]);
    const runs: number[] = [];
    const worker = createPullWorker({
      driver: db.driver,
      source: 'conflict',
      retry: { maxAttempts: 3, baseDelayMs: 60_000 },
      logger: memoryLogger(),
      metrics: false,
      handler: async (message, { transaction }) => {
        runs.push(message.attempt);
        await transaction(async (tx: pg.PoolClient) => {
          // What a handler's own SERIALIZABLE transaction meets when another commits first, every time.
          await tx.query(`DO $$ BEGIN RAISE EXCEPTION 'could not serialize access due to read/write dependencies among transactions' USING ERRCODE = 'serialization_failure'; END $$`);
        });
      },
    });
    const summary = await worker.runOnce();
    assert.deepEqual([summary.claimed, summary.completed, summary.retried, summary.dead], [1, 0, 1, 0]);
    assert.deepEqual(runs, [0], 'run once: the retry waits for its backoff');
    const [row] = await db.query<{ state: string; attempt: number; due_in_s: number; last_error: string }>(
      `SELECT state, attempt, extract(epoch FROM scheduled_at - clock_timestamp())::float8 AS due_in_s, last_error FROM "${db.schema}".inbox WHERE source = 'conflict'`,
    );
    assert.deepEqual([row!.state, row!.attempt], ['pending', 1]);
    assert.ok(row!.due_in_s > 30, `retried after its backoff, not at once: due in ${row!.due_in_s} s`);
    assert.match(row!.last_error, /could not serialize access/);
  });
});
