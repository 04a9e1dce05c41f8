/**
 * `transaction_timeout` (PostgreSQL 17+) on the role: the server ends the whole session (25P04)
 * when a transaction runs longer. QueueBox's own statements and transactions run without it
 * (their waits are bounded by `statement_timeout`, as with `lock_timeout`), on each path a
 * statement takes; a pull handler's business transaction is the application's and keeps the
 * role's. Nothing is left on the session (a pooler in transaction mode hands it on).
 *
 * On PostgreSQL 15 and 16 the setting does not exist (QueueBox's settings must not name it there:
 * the other role-settings files run every path on those servers); these tests are skipped.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it, type TestContext } from 'node:test';
import pg from 'pg';
import { PINNED_CLAIM_PLAN } from '../../lib/db/postgres/claim-functions.ts';
import { createPgPool, pgClaimQuery, pgQuery, pgSimpleQuery, pgSingleTrip, pgTransaction } from '../../lib/db/postgres/pg-pool.ts';
import type { PostgresDriver } from '../../lib/db/postgres/postgres-driver.ts';
import { pgTransactionRunner } from '../../lib/pull/transaction-runner.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { insertPullRows } from '../pull/pull-fixtures.ts';
import { createRoleWith, driverAsRole, type TestRole, STATEMENT_BUDGETS, withinBudget } from './role-settings-fixtures.ts';

const SETTING = `SELECT current_setting('transaction_timeout') AS transaction_timeout`;
type Setting = { transaction_timeout: string };
const OWN: Setting = { transaction_timeout: '0' };
const ROLE: Setting = { transaction_timeout: '200ms' };
/** Runs longer than the role's `transaction_timeout`. */
const LONGER = 'SELECT pg_sleep(0.4)';

describe('role settings: transaction_timeout (PostgreSQL 17+)', { timeout: 120_000 }, () => {
  let db: TestDatabase;
  let role: TestRole | undefined;
  let pool: pg.Pool;
  let driver: PostgresDriver;
  let version = 0;
  /** Skips the test on a server without `transaction_timeout`; true when skipped. */
  const before17 = (t: TestContext): boolean => {
    if (version >= 170000) return false;
    t.skip(`transaction_timeout is PostgreSQL 17+ (this server: ${version})`);
    return true;
  };
  before(async () => {
    db = await createTestDatabase();
    version = Number((await db.query<{ v: string }>("SELECT current_setting('server_version_num') AS v"))[0]!.v);
    if (version < 170000) return;
    role = await createRoleWith(db, { transaction_timeout: '200' });
    pool = createPgPool(db.config.database, role.url);
    driver = driverAsRole(db, role);
  });
  after(async () => {
    if (role !== undefined) {
      await driver.close();
      await pool.end();
      await role.drop();
    }
    await db.drop();
  });

  it("a connection of the role runs under the role's transaction_timeout: a longer transaction ends its session (so the checks below can fail)", async (t) => {
    if (before17(t)) return;
    const client = new pg.Client({ connectionString: role!.url });
    client.on('error', () => {});
    await client.connect();
    try {
      assert.deepEqual((await client.query<Setting>(SETTING)).rows, [ROLE]);
      await assert.rejects(client.query(LONGER), (error: unknown) => (error as { code?: string }).code === '25P04');
    } finally {
      await client.end().catch(() => {});
    }
  });

  for (const [label, budgetMs] of STATEMENT_BUDGETS) {
    it(`a statement on the pool (pgQuery), ${label}: runs without it, and longer`, async (t) => {
      if (before17(t)) return;
      assert.deepEqual((await withinBudget(budgetMs, () => pgQuery<Setting>(pool, SETTING))).rows, [OWN]);
      assert.equal((await withinBudget(budgetMs, () => pgQuery(pool, LONGER))).rowCount, 1);
    });
    it(`a single-trip statement (pgSingleTrip: fenced writes and renewals), ${label}`, async (t) => {
      if (before17(t)) return;
      assert.deepEqual((await withinBudget(budgetMs, () => pgSingleTrip<Setting>(pool, SETTING, []))).rows, [OWN]);
      assert.equal((await withinBudget(budgetMs, () => pgSingleTrip(pool, LONGER, []))).rowCount, 1);
    });
    for (const prepared of [false, true]) {
      it(`a claim statement (pgClaimQuery, ${prepared ? 'prepared' : 'unprepared'}), ${label}`, async (t) => {
        if (before17(t)) return;
        const text = `${SETTING}, '${label} ${prepared}' AS c`;
        for (let run = 0; run < 2; run++) {
          const { rows } = await withinBudget(budgetMs, () => pgClaimQuery<Setting & { c: string }>(pool, text, [], prepared, PINNED_CLAIM_PLAN));
          assert.deepEqual(rows, [{ ...OWN, c: `${label} ${prepared}` }], `run ${run + 1}`);
        }
      });
    }
    it(`a simple query on the pool (pgSimpleQuery), ${label}`, async (t) => {
      if (before17(t)) return;
      const result = await withinBudget(budgetMs, () => pgSimpleQuery(pool, SETTING));
      assert.ok(!Array.isArray(result), 'one statement, one result');
      assert.deepEqual(result.rows, [OWN]);
      const two = await withinBudget(budgetMs, () => pgSimpleQuery(pool, `${LONGER}; ${SETTING}`));
      assert.ok(Array.isArray(two), 'two statements, two results');
      assert.deepEqual(two[1]!.rows, [OWN]);
    });
    it(`a transaction (pgTransaction: the claims, the relay forward, migrate), ${label}: runs longer than the role's timeout`, async (t) => {
      if (before17(t)) return;
      const rows = await withinBudget(budgetMs, () =>
        pgTransaction(pool, async (client) => {
          await pgQuery(client, LONGER);
          return [(await client.query<Setting>(SETTING)).rows[0], (await pgQuery<Setting>(client, SETTING)).rows[0]];
        }),
      );
      assert.deepEqual(rows, [OWN, OWN]);
    });
  }

  /** Holds the advisory lock `args` name (as the claim takes it) for 400 ms in a transaction of the test's own; resolves once it is held. */
  const holdLock = async (sql: string, args: string[]): Promise<{ released: Promise<void> }> => {
    const client = await db.pool.connect();
    await client.query('BEGIN');
    await client.query(sql, args);
    const released = (async () => {
      await new Promise((resolve) => setTimeout(resolve, 400));
      await client.query('COMMIT');
      client.release();
    })();
    return { released };
  };

  it('the relay claim waits for the claim lock another claim holds for 400 ms, and claims', async (t) => {
    if (before17(t)) return;
    await db.query(`INSERT INTO "${db.schema}".inbox (source, idempotency_key, payload, consumption) VALUES ('push', 'p1', '{}', 'push')`);
    const { released } = await holdLock('SELECT pg_advisory_xact_lock(hashtext($1))', [`queuebox_inbox_claim_${db.driver.ctx.names.inbox}`]);
    const rows = await driver.inboxClaimPushMany({ limit: 10, leaseMs: 30_000 });
    await released;
    assert.equal(rows.length, 1);
  });

  it('the pull claim waits for the claim lock another claim holds for 400 ms, and claims', async (t) => {
    if (before17(t)) return;
    await insertPullRows(db, 'locked', [{ key: 'l1' }, { key: 'l2' }]);
    const { released } = await holdLock('SELECT pg_advisory_xact_lock(hashtext($1), hashtext($2))', [`queuebox_pull_claim_${db.driver.ctx.names.inbox}`, 'locked']);
    const rows = await driver.pullClaimMany({ source: 'locked', limit: 1, leaseMs: 30_000 });
    await released;
    assert.equal(rows.length, 1);
  });

  it("a pull handler's transaction is the application's: under the role's transaction_timeout", async (t) => {
    if (before17(t)) return;
    const run = pgTransactionRunner(pool);
    assert.deepEqual(await run(async (tx) => (await tx.query<Setting>(SETTING)).rows), [ROLE]);
    assert.deepEqual(await run(async (tx) => (await tx.query<Setting>(SETTING)).rows, { signal: new AbortController().signal }), [ROLE]);
  });

  it('leaves nothing on the session: a plain statement on a pooled connection afterwards runs under the role again', async (t) => {
    if (before17(t)) return;
    await pgQuery(pool, SETTING);
    await pgClaimQuery(pool, `${SETTING}, 'session' AS c`, [], true, PINNED_CLAIM_PLAN);
    await pgTransaction(pool, (client) => client.query(SETTING));
    for (let i = 0; i < 2; i++) {
      const client = await pool.connect();
      try {
        assert.deepEqual((await client.query<Setting>(SETTING)).rows, [ROLE]);
      } finally {
        client.release();
      }
    }
  });
});
