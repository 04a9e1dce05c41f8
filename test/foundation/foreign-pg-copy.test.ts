/**
 * A `pg.Pool` of another copy of `pg` than QueueBox's own: an application on another `pg` version
 * gets its own copy (npm nests QueueBox's `pg` under it), and hands its pool to a pull worker
 * (`pool`), or a driver built on it. Here that copy is the `pg-8-20` devDependency (an alias of
 * `pg@8.20.0`). QueueBox told a pool from a client by `instanceof pg.Pool` of its own copy, which
 * such a pool fails: its statements went to `pool.query` as they were — under the role's defaults
 * (isolation, `lock_timeout`, JIT), with no statement budget inside a pass (a statement could
 * outlive the invocation), not in one round trip, and not sent again when the server had closed
 * the idle connection. Every path is checked here as on QueueBox's own pool
 * (`role-settings-own-transactions.test.ts`), under a role whose defaults are SERIALIZABLE, a
 * 100 ms `lock_timeout` and JIT for any plan.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { createRequire } from 'node:module';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { PINNED_CLAIM_PLAN } from '../../lib/db/postgres/claim-functions.ts';
import { fencedQuery, fencedWriteCount, lockWithinLease } from '../../lib/db/postgres/fenced-writes.ts';
import { isPgPool, pgClaimQuery, pgQuery, pgSimpleQuery, pgSingleTrip, pgTransaction } from '../../lib/db/postgres/pg-pool.ts';
import { uuidArrayParam } from '../../lib/db/postgres/uuid-array.ts';
import { withStatementBudget } from '../../lib/db/statement-budget.ts';
import { createPullWorker } from '../../lib/index.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { insertOutboxRows } from '../helpers/outbox-pass-fixture.ts';
import { insertPullRows, memoryLogger, readPullRows } from '../pull/pull-fixtures.ts';
import { createRoleWith, driverAsRole, type TestRole, STATEMENT_BUDGETS, withinBudget } from './role-settings-fixtures.ts';

const otherPg = createRequire(import.meta.url)('pg-8-20') as typeof pg;

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
const ROLE: Settings = { isolation: 'serializable', lock_timeout: '100ms', jit: 'on' };

/** A `statement_timeout` as PostgreSQL shows it, in ms. */
function timeoutMs(shown: string): number {
  const m = /^(\d+)(ms|s|min|h)?$/.exec(shown);
  assert.ok(m, `a statement_timeout: ${shown}`);
  return Number(m[1]) * { ms: 1, s: 1000, min: 60_000, h: 3_600_000 }[(m[2] ?? 'ms') as 'ms'];
}

/** The statement texts written on each connection of `pool` (Parse of the extended protocol, or a simple query), in order. */
function spyOn(pool: pg.Pool): Array<{ connection: number; text: string; simple: boolean }> {
  const sent: Array<{ connection: number; text: string; simple: boolean }> = [];
  let connections = 0;
  pool.on('connect', (client) => {
    const connection = connections++;
    const wire = (client as unknown as { connection: { parse(q: { text: string }): void; query(text: string): void } }).connection;
    const parse = wire.parse.bind(wire);
    const query = wire.query.bind(wire);
    wire.parse = (q) => {
      sent.push({ connection, text: q.text, simple: false });
      parse(q);
    };
    wire.query = (text) => {
      sent.push({ connection, text, simple: true });
      query(text);
    };
  });
  return sent;
}

/**
 * The statements of `sent` that ran under the role's defaults rather than in a transaction QueueBox
 * began with its settings (`BEGIN ISOLATION LEVEL READ COMMITTED …` in a statement's own round trip,
 * `BEGIN…; SET TRANSACTION ISOLATION LEVEL READ COMMITTED…` of `pgTransaction`, or
 * the settings ahead of a simple query), or in a pull handler's transaction (a plain `BEGIN`:
 * the application's, under the role's settings on purpose).
 */
function unpinned(sent: ReadonlyArray<{ connection: number; text: string; simple: boolean }>): string[] {
  const state = new Map<number, 'none' | 'own' | 'handler'>();
  const found: string[] = [];
  for (const { connection, text, simple } of sent) {
    const t = text.trim();
    if (/^(COMMIT|ROLLBACK)$/i.test(t)) state.set(connection, 'none');
    else if (!simple && t === 'BEGIN ISOLATION LEVEL READ COMMITTED') state.set(connection, 'own');
    else if (simple && /^BEGIN\b/.test(t)) state.set(connection, /SET TRANSACTION ISOLATION LEVEL READ COMMITTED; SET LOCAL lock_timeout = 0; SET LOCAL jit = off/.test(t) ? 'own' : 'handler');
    else if (simple && t.startsWith('SET TRANSACTION ISOLATION LEVEL READ COMMITTED; SET LOCAL lock_timeout = 0; SET LOCAL jit = off')) continue;
    else if ((state.get(connection) ?? 'none') === 'none') found.push(t.replace(/\s+/g, ' ').slice(0, 100));
  }
  return found;
}

describe("a pg.Pool of another copy of pg (pg 8.20) runs QueueBox's statements as QueueBox's own pool does", () => {
  let db: TestDatabase;
  let role: TestRole;
  let pool: pg.Pool;
  before(async () => {
    db = await createTestDatabase({ database: { preparedStatements: true } });
    role = await createRoleWith(db, ROLE_DEFAULTS);
    // What an application builds, with QueueBox's timeout as a startup parameter (as `createPgPool`).
    pool = new otherPg.Pool({ connectionString: role.url, statement_timeout: db.config.database.statementTimeoutMs, max: 4 });
    pool.on('error', () => {});
  });
  after(async () => {
    await pool.end();
    await role.drop();
    await db.drop();
  });

  it("is another copy: its pool is no instance of QueueBox's pg.Pool, and its connections run under the role's defaults (so the checks below can fail)", async () => {
    assert.equal((createRequire(import.meta.url)('pg-8-20/package.json') as { version: string }).version, '8.20.0');
    const foreign: unknown = pool;
    assert.ok(!(foreign instanceof pg.Pool));
    assert.deepEqual((await pool.query<Settings>(SETTINGS)).rows, [ROLE]);
  });

  it("tells a pool of either copy from a client of either copy (isPgPool)", async () => {
    const own = new pg.Pool({ connectionString: db.url, max: 1 });
    try {
      assert.equal(isPgPool(pool), true, 'a pool of another copy');
      assert.equal(isPgPool(own), true, "a pool of QueueBox's copy");
      const foreignClient = await pool.connect();
      const ownClient = await own.connect();
      try {
        assert.equal(isPgPool(foreignClient), false, 'a pooled client of another copy');
        assert.equal(isPgPool(ownClient), false, "a pooled client of QueueBox's copy");
      } finally {
        foreignClient.release();
        ownClient.release();
      }
      assert.equal(isPgPool(new otherPg.Client({ connectionString: db.url })), false, 'a client of another copy');
      assert.equal(isPgPool(new pg.Client({ connectionString: db.url })), false, "a client of QueueBox's copy");
      assert.equal(isPgPool({ query: async () => ({ rows: [] }) }), false, 'an executor');
      assert.equal(isPgPool(undefined), false);
    } finally {
      await own.end();
    }
  });

  for (const [label, budgetMs] of STATEMENT_BUDGETS) {
    it(`a statement on the pool (pgQuery), ${label}`, async () => {
      assert.deepEqual((await withinBudget(budgetMs, () => pgQuery<Settings>(pool, SETTINGS))).rows, [OWN]);
      assert.deepEqual((await withinBudget(budgetMs, () => pgQuery<Settings & { v: number }>(pool, `${SETTINGS}, $1::int AS v`, () => [7]))).rows, [{ ...OWN, v: 7 }]);
    });
    it(`a single-trip statement (pgSingleTrip: fenced writes and renewals), ${label}`, async () => {
      assert.deepEqual((await withinBudget(budgetMs, () => pgSingleTrip<Settings>(pool, SETTINGS, []))).rows, [OWN]);
    });
    for (const prepared of [false, true]) {
      it(`a claim statement (pgClaimQuery, ${prepared ? 'prepared' : 'unprepared'}), ${label}`, async () => {
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
    });
    it(`a transaction (pgTransaction), ${label}`, async () => {
      const rows = await withinBudget(budgetMs, () => pgTransaction(pool, async (client) => [(await client.query<Settings>(SETTINGS)).rows[0], (await pgQuery<Settings>(client, SETTINGS)).rows[0]]));
      assert.deepEqual(rows, [OWN, OWN]);
    });
  }

  it('inside a pass, a statement on the pool is bounded by the time left, not by the connection\'s statement_timeout', async () => {
    const TIMEOUT = `SELECT current_setting('statement_timeout') AS t`;
    const budget = 5_000;
    const read = async (run: () => Promise<pg.QueryResult<{ t: string }>>) => timeoutMs((await withStatementBudget(() => budget, run)).rows[0]!.t);
    assert.equal(timeoutMs((await pool.query<{ t: string }>(TIMEOUT)).rows[0]!.t), db.config.database.statementTimeoutMs, "the connection's own");
    for (const [what, run] of [
      ['pgQuery', () => pgQuery<{ t: string }>(pool, TIMEOUT)],
      ['pgSingleTrip', () => pgSingleTrip<{ t: string }>(pool, TIMEOUT, [])],
      ['pgClaimQuery', () => pgClaimQuery<{ t: string }>(pool, TIMEOUT, [], false, PINNED_CLAIM_PLAN)],
      ['pgClaimQuery prepared', () => pgClaimQuery<{ t: string }>(pool, `${TIMEOUT} -- prepared`, [], true, PINNED_CLAIM_PLAN)],
    ] as const) {
      const ms = await read(run);
      assert.ok(ms > 0 && ms <= budget, `${what}: statement_timeout ${ms} ms, within the budget of ${budget} ms`);
    }
  });

  it('a single-trip statement is one round trip in a transaction of its own, its settings and budget in the same round trip', async () => {
    const spied = new otherPg.Pool({ connectionString: role.url, statement_timeout: db.config.database.statementTimeoutMs, max: 1 });
    spied.on('error', () => {});
    const sent = spyOn(spied);
    try {
      await withStatementBudget(() => 5_000, () => pgSingleTrip(spied, 'SELECT 2 AS two', []));
    } finally {
      await spied.end();
    }
    const texts = sent.map((s) => s.text);
    const at = texts.indexOf('SELECT 2 AS two');
    assert.ok(at >= 3, JSON.stringify(texts));
    assert.deepEqual(texts.slice(at - 3, at - 1), ['BEGIN ISOLATION LEVEL READ COMMITTED', 'SET LOCAL jit = off']);
    assert.match(texts[at - 1]!, /set_config\('lock_timeout', '0', true\).*set_config\('statement_timeout', '\d+', true\)/);
    assert.equal(texts[at + 1], 'COMMIT');
    assert.ok(sent.every((s) => !s.simple), 'no simple query (no BEGIN of a round trip of its own)');
  });

  it('a fenced write on the pool goes in one round trip, under QueueBox\'s settings (fencedQuery, fencedWriteCount)', async () => {
    const spied = new otherPg.Pool({ connectionString: role.url, statement_timeout: db.config.database.statementTimeoutMs, max: 1 });
    spied.on('error', () => {});
    const sent = spyOn(spied);
    try {
      const { rows } = await withStatementBudget(() => 5_000, () => fencedQuery<Settings>(spied, `${SETTINGS}, 'fenced' AS mark`, []));
      assert.deepEqual(rows, [{ ...OWN, mark: 'fenced' }]);
      const written = await withStatementBudget(() => 5_000, () => fencedWriteCount(spied, (bound) => `SELECT 'counted' AS mark FROM (SELECT pg_catalog.clock_timestamp() + interval '1 minute' AS lease_expires_at) l WHERE ${bound}`, []));
      assert.equal(written, 1);
    } finally {
      await spied.end();
    }
    const texts = sent.map((s) => s.text);
    for (const mark of ["'fenced' AS mark", "'counted' AS mark"]) {
      const at = texts.findIndex((t) => t.includes(mark));
      assert.ok(at >= 3, `${mark}: ${JSON.stringify(texts)}`);
      assert.equal(texts[at - 3], 'BEGIN ISOLATION LEVEL READ COMMITTED', `${mark} in a round trip of its own: ${JSON.stringify(texts)}`);
    }
    // On a pool the lease bound is the statement's own: no transaction's `lock_timeout` to keep and put back.
    assert.ok(!texts.some((t) => t.includes('queuebox.lock_timeout')), `the pool's form of the write: ${JSON.stringify(texts)}`);
    assert.ok(texts.find((t) => t.includes("'counted' AS mark"))!.includes(lockWithinLease('')));
    assert.deepEqual(unpinned(sent), []);
  });

  it("binds a uuid[] in binary through a pool or client of another copy's JavaScript client, and the server reads it back", async () => {
    const ids = [randomUUID(), randomUUID()];
    const viaPool = uuidArrayParam(pool, ids);
    assert.ok(Buffer.isBuffer(viaPool), 'a pool of another copy');
    assert.deepEqual((await pool.query<{ ids: string[] }>('SELECT $1::uuid[]::text[] AS ids', [viaPool])).rows[0]!.ids, ids);
    const client = await pool.connect();
    try {
      const viaClient = uuidArrayParam(client, ids);
      assert.ok(Buffer.isBuffer(viaClient), 'a pooled client of another copy');
      assert.deepEqual((await client.query<{ ids: string[] }>('SELECT $1::uuid[]::text[] AS ids', [viaClient])).rows[0]!.ids, ids);
    } finally {
      client.release();
    }
    // A pool of another copy on a client class that is no `pg` JavaScript client (as `pg.native.Client`): text.
    class OtherClient {}
    const other = new otherPg.Pool({ connectionString: db.url, Client: OtherClient as never });
    assert.equal(uuidArrayParam(other, ids), ids);
    await other.end();
    // One that extends another copy's client: binary.
    class Extended extends otherPg.Client {}
    const extended = new otherPg.Pool({ connectionString: db.url, Client: Extended });
    try {
      const param = uuidArrayParam(extended, ids);
      assert.ok(Buffer.isBuffer(param));
      assert.deepEqual((await extended.query<{ ids: string[] }>('SELECT $1::uuid[]::text[] AS ids', [param])).rows[0]!.ids, ids);
    } finally {
      await extended.end();
    }
  });

  it("a pull worker on the pool (`pool` + `config`) sends every statement of its own under QueueBox's settings, its handlers' transactions under the role's", async () => {
    const workerPool = new otherPg.Pool({ connectionString: role.url, statement_timeout: db.config.database.statementTimeoutMs, max: 3 });
    workerPool.on('error', () => {});
    const sent = spyOn(workerPool);
    const seen: Settings[] = [];
    let handled = 0;
    try {
      await insertPullRows(db, 'foreign', [{ key: 'f1' }, { key: 'f2' }, { key: 'f3' }]);
      const worker = createPullWorker({
        pool: workerPool,
        config: { ...db.config, database: { ...db.config.database, preparedStatements: false } },
        source: 'foreign',
        leaseMs: 10_000,
        metrics: false,
        logger: memoryLogger(),
        // Two messages in a transaction of the handler's (completed in it), one without (completed on the pool).
        handler: async (_message, { transaction }) => {
          if (handled++ >= 2) return;
          await transaction(async (tx) => {
            seen.push((await tx.query<Settings>(SETTINGS)).rows[0]!);
          });
        },
      });
      const summary = await worker.runOnce();
      assert.deepEqual([summary.claimed, summary.completed, summary.retried], [3, 3, 0]);
      assert.deepEqual(
        (await readPullRows(db, 'foreign')).map((r) => r.state),
        ['processed', 'processed', 'processed'],
      );
    } finally {
      await workerPool.end();
    }
    assert.deepEqual(seen, [ROLE, ROLE], "the handlers' transactions are the application's");
    assert.ok(sent.length > 0);
    assert.deepEqual(unpinned(sent), [], "QueueBox's statements outside a transaction of its own");
  });

  it("a driver on the pool claims, renews and settles outbox rows under QueueBox's settings, inside a pass", async () => {
    const driverPool = new otherPg.Pool({ connectionString: role.url, statement_timeout: db.config.database.statementTimeoutMs, max: 3 });
    driverPool.on('error', () => {});
    const sent = spyOn(driverPool);
    const driver = driverAsRole(db, role, { pool: driverPool, database: { preparedStatements: false } });
    try {
      const ids = await insertOutboxRows(db, [
        { topic: 'foreign.copy', payload: { n: 1 } },
        { topic: 'foreign.copy', payload: { n: 2 } },
      ]);
      await withStatementBudget(
        () => 10_000,
        async () => {
          const claimed = await driver.outboxClaimMany({ limit: 10, leaseMs: 30_000 });
          assert.deepEqual(claimed.map((r) => r.id).sort(), [...ids].sort());
          const claims = claimed.map((r) => ({ id: r.id, token: r.claimToken }));
          assert.deepEqual((await driver.outboxRenewMany({ claims, leaseMs: 30_000 })).sort(), [...ids].sort());
          assert.deepEqual((await driver.outboxMarkSentMany({ claims })).sort(), [...ids].sort());
        },
      );
      const states = await db.query<{ state: string }>(`SELECT state FROM "${db.schema}".outbox WHERE id = ANY($1::uuid[])`, [ids]);
      assert.deepEqual(
        states.map((r) => r.state),
        ['sent', 'sent'],
      );
    } finally {
      await driver.close();
      await driverPool.end();
    }
    assert.deepEqual(unpinned(sent), [], "QueueBox's statements outside a transaction of its own");
    // The renewal and the sent mark are fenced writes: each in one round trip of its own (`pgSingleTrip`).
    const texts = sent.map((s) => s.text);
    const fenced = texts.flatMap((t, i) => (t.startsWith('WITH changed AS (UPDATE') ? [i] : []));
    assert.equal(fenced.length, 2, JSON.stringify(texts));
    for (const at of fenced) assert.equal(texts[at - 3], 'BEGIN ISOLATION LEVEL READ COMMITTED', `in a round trip of its own: ${texts[at]!.slice(0, 80)}`);
  });
});
