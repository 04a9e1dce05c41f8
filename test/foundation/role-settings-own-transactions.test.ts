/**
 * Every statement and transaction QueueBox sends on its own pool runs at READ COMMITTED, with no
 * `lock_timeout` (its waits are bounded by `statement_timeout`) and without JIT, whatever the
 * role's defaults — on each path a statement takes: on its own, under a budget or not, prepared
 * or not, as a simple query, in a transaction. A pull handler's business transaction is the
 * application's: its isolation, lock waits and plans are the role's.
 *
 * Read inside each transaction: the settings in force there (`current_setting`), under a role
 * whose defaults are SERIALIZABLE, a 100 ms `lock_timeout` and JIT for any plan.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { PINNED_CLAIM_PLAN } from '../../lib/db/postgres/claim-functions.ts';
import { createPgPool, pgClaimQuery, pgQuery, pgSimpleQuery, pgSingleTrip, pgTransaction } from '../../lib/db/postgres/pg-pool.ts';
import { withStatementBudget } from '../../lib/db/statement-budget.ts';
import { pgTransactionRunner } from '../../lib/pull/transaction-runner.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { createRoleWith, type TestRole, STATEMENT_BUDGETS, withinBudget } from './role-settings-fixtures.ts';

const ROLE_DEFAULTS = {
  default_transaction_isolation: 'serializable',
  lock_timeout: '100',
  jit: 'on',
  jit_above_cost: '10',
  jit_inline_above_cost: '10',
  jit_optimize_above_cost: '10',
};

const SETTINGS = `SELECT current_setting('transaction_isolation') AS isolation, current_setting('lock_timeout') AS lock_timeout, current_setting('jit') AS jit`;
type Settings = { isolation: string; lock_timeout: string; jit: string };
const OWN: Settings = { isolation: 'read committed', lock_timeout: '0', jit: 'off' };

describe("QueueBox's own statements and transactions run under its settings, not the role's defaults (PostgreSQL)", () => {
  let db: TestDatabase;
  let role: TestRole;
  let pool: pg.Pool;
  before(async () => {
    db = await createTestDatabase();
    role = await createRoleWith(db, ROLE_DEFAULTS);
    pool = createPgPool(db.config.database, role.url);
  });
  after(async () => {
    await pool.end();
    await role.drop();
    await db.drop();
  });

  it("a connection of the role runs under the role's defaults (so the checks below can fail)", async () => {
    const client = new pg.Client({ connectionString: role.url });
    await client.connect();
    try {
      assert.deepEqual((await client.query<Settings>(SETTINGS)).rows[0], { isolation: 'serializable', lock_timeout: '100ms', jit: 'on' });
    } finally {
      await client.end();
    }
  });

  // No budget; a budget below the pool's statement_timeout (a transaction of its own, or the
  // timeout sent with the statement); a budget above it.
  for (const [label, budgetMs] of STATEMENT_BUDGETS) {
    it(`a statement on the pool (pgQuery), ${label}`, async () => {
      assert.deepEqual((await withinBudget(budgetMs, () => pgQuery<Settings>(pool, SETTINGS))).rows, [OWN]);
    });
    it(`a statement with lazy values on the pool (pgQuery), ${label}`, async () => {
      assert.deepEqual((await withinBudget(budgetMs, () => pgQuery<Settings & { v: number }>(pool, `${SETTINGS}, $1::int AS v`, () => [7]))).rows, [{ ...OWN, v: 7 }]);
    });
    it(`a single-trip statement (pgSingleTrip: fenced writes and renewals), ${label}`, async () => {
      assert.deepEqual((await withinBudget(budgetMs, () => pgSingleTrip<Settings>(pool, SETTINGS, []))).rows, [OWN]);
    });
    for (const prepared of [false, true]) {
      it(`a claim statement (pgClaimQuery, ${prepared ? 'prepared' : 'unprepared'}), ${label}`, async () => {
        // A text of its own per case: a prepared name new to the connection is parsed in the round trip.
        const text = `${SETTINGS}, '${label} ${prepared}' AS c`;
        for (let run = 0; run < 2; run++) {
          const { rows } = await withinBudget(budgetMs, () => pgClaimQuery<Settings & { c: string }>(pool, text, [], prepared, PINNED_CLAIM_PLAN));
          assert.deepEqual(rows, [{ ...OWN, c: `${label} ${prepared}` }], `run ${run + 1}`);
        }
      });
    }
    it(`a simple query on the pool (pgSimpleQuery), ${label}`, async () => {
      const result = await withinBudget(budgetMs, () => pgSimpleQuery(pool, SETTINGS));
      assert.ok(!Array.isArray(result), 'one statement, one result');
      assert.deepEqual(result.rows, [OWN]);
      const two = await withinBudget(budgetMs, () => pgSimpleQuery(pool, `SELECT 1 AS one; ${SETTINGS}`));
      assert.ok(Array.isArray(two), 'two statements, two results');
      assert.deepEqual(
        two.map((r) => r.rows),
        [[{ one: 1 }], [OWN]],
      );
    });
    it(`a transaction (pgTransaction: the claims, the relay forward, migrate), ${label}`, async () => {
      const rows = await withinBudget(budgetMs, () => pgTransaction(pool, async (client) => [(await client.query<Settings>(SETTINGS)).rows[0], (await pgQuery<Settings>(client, SETTINGS)).rows[0]]));
      assert.deepEqual(rows, [OWN, OWN]);
    });
  }

  it("a pull handler's transaction is the application's: its isolation, lock waits and plans under the role's settings", async () => {
    const run = pgTransactionRunner(pool);
    const rows = await run(async (tx) => (await tx.query<Settings>(SETTINGS)).rows);
    assert.deepEqual(rows, [{ isolation: 'serializable', lock_timeout: '100ms', jit: 'on' }]);
    // With a signal (as the worker runs it): the same.
    const signalled = await run(async (tx) => (await tx.query<Settings>(SETTINGS)).rows, { signal: new AbortController().signal });
    assert.deepEqual(signalled, [{ isolation: 'serializable', lock_timeout: '100ms', jit: 'on' }]);
  });

  it('turns JIT off before anything of its own is planned: a statement on its own sends `SET LOCAL jit = off` right after its BEGIN, ahead of any SELECT', async () => {
    // The role's JIT costs are 10: a SELECT of settings planned before `jit` is off would be compiled.
    const spied = createPgPool(db.config.database, role.url);
    const parsed: string[] = [];
    spied.on('connect', (client) => {
      const connection = (client as unknown as { connection: { parse(q: { text: string }): void } }).connection;
      const parse = connection.parse.bind(connection);
      connection.parse = (q) => {
        parsed.push(q.text);
        parse(q);
      };
    });
    try {
      await pgQuery(spied, 'SELECT 1');
      await withStatementBudget(() => 5_000, () => pgSingleTrip(spied, 'SELECT 2', []));
    } finally {
      await spied.end();
    }
    for (const statement of ['SELECT 1', 'SELECT 2']) {
      const at = parsed.indexOf(statement);
      assert.ok(at >= 3, `${statement} sent with its prelude: ${JSON.stringify(parsed)}`);
      assert.match(parsed[at - 3]!, /^BEGIN ISOLATION LEVEL READ COMMITTED$/);
      assert.equal(parsed[at - 2], 'SET LOCAL jit = off');
      assert.match(parsed[at - 1]!, /^SELECT pg_catalog\.set_config\('lock_timeout', '0', true\)/);
    }
  });

  it('leaves nothing on the session: a plain statement on a pooled connection afterwards runs under the role again', async () => {
    await pgQuery(pool, SETTINGS);
    const client = await pool.connect();
    try {
      assert.deepEqual((await client.query<Settings>(SETTINGS)).rows, [{ isolation: 'serializable', lock_timeout: '100ms', jit: 'on' }]);
    } finally {
      client.release();
    }
  });
});
