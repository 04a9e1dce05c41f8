/**
 * A claim that holds a claim lock — the relay's on its table, a pull claim's on its source — and
 * then stops between its statements (a GC pause, a stopped process, a partition, a Lambda
 * container frozen mid-claim) must not stall every other claim of the table or source for as long
 * as its session lives: with an application's own pool, which sets no idle timeout, that was
 * indefinitely. The claim's transaction sets `idle_in_transaction_session_timeout` to
 * `CLAIM_LOCK_IDLE_MS` with the lock: the server ends the frozen session after that long, the lock
 * and the claim's transaction with it, and the other claim goes on. The frozen claim, when it
 * wakes, fails on its ended connection and took nothing.
 *
 * The freeze is played on the client: its connection holds back the claim statement (the one sent
 * after the lock) for longer than `CLAIM_LOCK_IDLE_MS`.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { CLAIM_LOCK_IDLE_MS } from '../../lib/db/postgres/inbox-queries.ts';
import { PostgresDriver } from '../../lib/db/postgres/postgres-driver.ts';
import { createTestDatabase, testDatabaseUrl, type TestDatabase } from '../helpers/database.ts';
import { delay, waitUntil } from '../helpers/wait.ts';
import { insertPullRows } from '../pull/pull-fixtures.ts';

/** How long the frozen client holds its claim statement back: past the idle limit, with room. */
const FROZEN_MS = CLAIM_LOCK_IDLE_MS + 3_000;

describe('a claim frozen while it holds the claim lock (PostgreSQL)', { timeout: 60_000 }, () => {
  let db: TestDatabase;
  const pools: pg.Pool[] = [];
  const drivers: PostgresDriver[] = [];
  before(async () => {
    db = await createTestDatabase({ inbox: { sources: { frozen: { type: 'sqs', queueName: 'frozen', consumption: 'pull' }, relayed: { type: 'sqs', queueName: 'relayed' } } } });
  });
  after(async () => {
    await Promise.all(drivers.map((d) => d.close().catch(() => {})));
    await Promise.all(pools.map((p) => p.end().catch(() => {})));
    await db.drop();
  });

  /** A driver on an application's own pool (no idle timeout of QueueBox's), whose connections hold back the statement sent after a claim lock, once. */
  function frozenAfterLock(): { driver: PostgresDriver; frozen: Promise<void>; woke: () => boolean } {
    const pool = new pg.Pool({ connectionString: testDatabaseUrl(), max: 2 });
    pools.push(pool);
    let lockSent = false;
    let froze!: () => void;
    const frozen = new Promise<void>((resolve) => (froze = resolve));
    let awake = false;
    pool.on('connect', (client) => {
      const query = client.query.bind(client) as (...args: unknown[]) => Promise<unknown>;
      (client as unknown as { query: unknown }).query = async (...args: unknown[]) => {
        const text = typeof args[0] === 'string' ? args[0] : String((args[0] as { text?: string } | undefined)?.text ?? '');
        if (lockSent && !awake) {
          froze();
          await delay(FROZEN_MS);
          awake = true;
        }
        if (text.includes('pg_advisory_xact_lock')) lockSent = true;
        return query(...args);
      };
    });
    const driver = new PostgresDriver({ config: db.config, url: testDatabaseUrl(), pool });
    drivers.push(driver);
    return { driver, frozen, woke: () => awake };
  }

  const insertPush = (keys: string[]) =>
    db.query(
      `INSERT INTO "${db.schema}".inbox (source, idempotency_key, aggregate_id, payload, consumption)
       SELECT 'relayed', k, 'agg-' || k, '{}'::jsonb, 'push' FROM unnest($1::text[]) AS k`,
      [keys],
    );

  for (const kind of ['pull', 'relay'] as const) {
    it(`${kind}: another claim goes on once the frozen holder's session is ended; the frozen claim fails and took nothing`, async () => {
      await db.query(`DELETE FROM "${db.schema}".inbox`);
      if (kind === 'pull') await insertPullRows(db, 'frozen', [{ key: 'a', aggregateId: 'A' }, { key: 'b', aggregateId: 'B' }]);
      else await insertPush(['a', 'b']);
      const claim = (driver: PostgresDriver) =>
        kind === 'pull' ? driver.pullClaimMany({ source: 'frozen', limit: 10, leaseMs: 30_000 }) : driver.inboxClaimPushMany({ limit: 10, leaseMs: 30_000 });
      const stuck = frozenAfterLock();
      const stuckClaim = claim(stuck.driver).then(
        (rows) => ({ rows }),
        (error: unknown) => ({ error }),
      );
      await stuck.frozen;
      // The frozen claim holds the lock: another claim waits for it.
      await waitUntil('the frozen claim holds the claim lock', async () => (await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND granted`))[0]!.n > 0, 10_000);
      const rows = await claim(db.driver);
      assert.equal(stuck.woke(), false, 'the other claim went on while the holder was still frozen');
      assert.equal(rows.length, 2, 'it took both rows');
      const outcome = await stuckClaim;
      assert.ok('error' in outcome, 'the frozen claim fails on its ended connection');
      assert.match(String((outcome as { error: unknown }).error), /terminat|idle-in-transaction|Connection|ended/i);
      const held = await db.query<{ id: string; token: string }>(`SELECT id, claim_token::text AS token FROM "${db.schema}".inbox WHERE state = 'processing' ORDER BY id`);
      assert.deepEqual(
        held,
        rows.map((r) => ({ id: r.id, token: r.claimToken })).sort((a, b) => a.id.localeCompare(b.id)),
        'every processing row is under the other claim\'s tokens',
      );
    });
  }
});
