/**
 * Two more role settings that QueueBox's own statements do not answer to:
 * - `lock_timeout`: the relay's and the pull worker's claims wait for the claim lock another claim
 *   holds (`pg_advisory_xact_lock`) as long as their statement may run, not the role's 100 ms;
 *   the time left in a pass still bounds the wait.
 * - `idle_session_timeout` (PostgreSQL 14+): a pooled connection the server closed while it sat
 *   idle — in Lambda the container is frozen meanwhile, and the pool learns of it only when the
 *   next statement is sent on it — is replaced, and the statement runs on another connection.
 *   The freeze is played by pausing the connection's socket: nothing it receives is read until
 *   the next statement has been sent.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { createPgPool } from '../../lib/db/postgres/pg-pool.ts';
import { PostgresDriver } from '../../lib/db/postgres/postgres-driver.ts';
import { withStatementBudget } from '../../lib/db/statement-budget.ts';
import { TransientDatabaseError } from '../../lib/errors.ts';
import { runOutboxPass } from '../../lib/outbox/outbox-pass.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { insertOutboxRows, passFixture } from '../helpers/outbox-pass-fixture.ts';
import { RecordingDestination } from '../helpers/recording-destination.ts';
import { insertPullRows } from '../pull/pull-fixtures.ts';
import { createRoleWith, driverAsRole, type TestRole } from './role-settings-fixtures.ts';

describe("role settings: lock_timeout and idle_session_timeout (PostgreSQL)", { timeout: 120_000 }, () => {
  let db: TestDatabase;
  const roles: TestRole[] = [];
  const drivers: PostgresDriver[] = [];
  const pools: pg.Pool[] = [];
  const driverOn = (role: TestRole, pool?: pg.Pool) => {
    const d = driverAsRole(db, role, pool ? { pool } : {});
    drivers.push(d);
    return d;
  };
  before(async () => {
    db = await createTestDatabase({
      destinations: { main: { type: 'sqs', queueUrl: 'http://localhost:1/000000000000/main' } },
      outbox: { routes: [{ topicPattern: '**', destination: 'main' }], pollIntervalMs: 10 },
    });
  });
  after(async () => {
    await Promise.all(drivers.map((d) => d.close().catch(() => {})));
    await Promise.all(pools.map((p) => p.end().catch(() => {})));
    for (const role of roles) await role.drop();
    await db.drop();
  });

  /** Holds the advisory lock `args` name (as the claim takes it) for `ms` in a transaction of the test's own; resolves once it is held. */
  const holdLock = async (sql: string, args: string[], ms: number): Promise<{ released: Promise<void> }> => {
    const client = await db.pool.connect();
    await client.query('BEGIN');
    await client.query(sql, args);
    const released = (async () => {
      await new Promise((resolve) => setTimeout(resolve, ms));
      await client.query('COMMIT');
      client.release();
    })();
    return { released };
  };
  const relayLock = () => holdLock('SELECT pg_advisory_xact_lock(hashtext($1))', [`queuebox_inbox_claim_${db.driver.ctx.names.inbox}`], 400);
  const pullLock = (ms = 400) => holdLock('SELECT pg_advisory_xact_lock(hashtext($1), hashtext($2))', [`queuebox_pull_claim_${db.driver.ctx.names.inbox}`, 'locked'], ms);

  describe('a role whose lock_timeout is 100 ms', () => {
    let driver: PostgresDriver;
    before(async () => {
      const role = await createRoleWith(db, { lock_timeout: '100' });
      roles.push(role);
      driver = driverOn(role);
      await db.query(`INSERT INTO "${db.schema}".inbox (source, idempotency_key, payload, consumption) VALUES ('push', 'p1', '{}', 'push')`);
      await insertPullRows(db, 'locked', [{ key: 'l1' }, { key: 'l2' }]);
    });

    it('the relay claim waits for the claim lock another claim holds for 400 ms, and claims', async () => {
      const { released } = await relayLock();
      const rows = await driver.inboxClaimPushMany({ limit: 10, leaseMs: 30_000 });
      await released;
      assert.equal(rows.length, 1);
    });

    it('the pull claim waits for the claim lock another claim holds for 400 ms, and claims', async () => {
      const { released } = await pullLock();
      const rows = await driver.pullClaimMany({ source: 'locked', limit: 1, leaseMs: 30_000 });
      await released;
      assert.equal(rows.length, 1);
    });

    it('inside a pass the wait still ends with the time left (300 ms), as a statement timeout', async () => {
      const { released } = await pullLock(1_500);
      try {
        await assert.rejects(
          withStatementBudget(
            () => 300,
            () => driver.pullClaimMany({ source: 'locked', limit: 1, leaseMs: 30_000 }),
          ),
          (error: unknown) => error instanceof TransientDatabaseError && error.code === '57014',
        );
      } finally {
        await released;
      }
    });
  });

  // idle_session_timeout is PostgreSQL 14's.
  const before14 = async () => Number((await db.query<{ v: string }>("SELECT current_setting('server_version_num') AS v"))[0]!.v) < 140000;

  describe('a role whose idle_session_timeout is 300 ms', () => {
    let pool: pg.Pool;
    let driver: PostgresDriver;
    let role: TestRole;
    /** The sockets of the pool's connections, to pause as a frozen container leaves them. */
    const clients: pg.PoolClient[] = [];
    before(async () => {
      if (await before14()) return;
      role = await createRoleWith(db, { idle_session_timeout: '300' });
      roles.push(role);
      pool = createPgPool(db.config.database, role.url);
      pools.push(pool);
      pool.on('connect', (client) => {
        clients.push(client);
        // A paused socket reads again once the next statement is on its way.
        const query = client.query.bind(client) as (...args: unknown[]) => unknown;
        (client as unknown as { query: (...args: unknown[]) => unknown }).query = (...args: unknown[]) => {
          const result = query(...args);
          setImmediate(() => socketOf(client).resume());
          return result;
        };
      });
      driver = driverOn(role, pool);
    });
    const socketOf = (client: pg.PoolClient) => (client as unknown as { connection: { stream: { pause(): void; resume(): void } } }).connection.stream;

    /** Every pooled connection idle and frozen past the server's idle_session_timeout. */
    const freezePastIdleTimeout = async () => {
      for (const client of clients) socketOf(client).pause();
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      const { rows } = await db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM pg_stat_activity WHERE usename = $1', [role.name]);
      assert.equal(rows[0]!.n, 0, 'the server closed the idle connections');
    };

    it('a pull claim on a connection the server closed while it was frozen claims on another', async (t) => {
      if (role === undefined) return t.skip('idle_session_timeout is PostgreSQL 14+');
      await insertPullRows(db, 'idle', [{ key: 'i1' }, { key: 'i2' }]);
      assert.equal((await driver.pullClaimMany({ source: 'idle', limit: 1, leaseMs: 30_000 })).length, 1);
      await freezePastIdleTimeout();
      assert.equal((await driver.pullClaimMany({ source: 'idle', limit: 1, leaseMs: 30_000 })).length, 1);
    });

    it('with every idle connection of the pool closed meanwhile (both of its two), a statement and a transaction run on a new one', async (t) => {
      if (role === undefined) return t.skip('idle_session_timeout is PostgreSQL 14+');
      // As many connections as the pool holds (`database.poolMax`: 2), then all idle in it.
      await Promise.all([1, 2, 3].map(() => pool.query('SELECT pg_sleep(0.05)')));
      assert.equal(pool.idleCount, 2);
      await freezePastIdleTimeout();
      assert.ok(await driver.clockNow());
      await insertPullRows(db, 'idle3', [{ key: 'j1' }]);
      await Promise.all([1, 2, 3].map(() => pool.query('SELECT pg_sleep(0.05)')));
      await freezePastIdleTimeout();
      assert.equal((await driver.pullClaimMany({ source: 'idle3', limit: 1, leaseMs: 30_000 })).length, 1, 'a transaction too');
    });

    it('a statement on its own (the clock read) on such a connection runs on another', async (t) => {
      if (role === undefined) return t.skip('idle_session_timeout is PostgreSQL 14+');
      await driver.clockNow();
      await freezePastIdleTimeout();
      assert.ok(await driver.clockNow());
    });

    it('an outbox pass whose connection the server closed while it was frozen sends its rows', async (t) => {
      if (role === undefined) return t.skip('idle_session_timeout is PostgreSQL 14+');
      await insertOutboxRows(db, [{ topic: 'orders.paid', key: 'k', payload: { n: 1 } }]);
      await driver.clockNow();
      await freezePastIdleTimeout();
      const destination = new RecordingDestination({ name: 'main' });
      const summary = await runOutboxPass(passFixture(db, { destinations: [destination], driver, mode: 'drain', timeoutMs: 30_000 }));
      assert.equal(summary.sent, 1);
      assert.equal(destination.deliveries.length, 1);
    });
  });
});
