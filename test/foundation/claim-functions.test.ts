/**
 * Claim functions: `migrate` creates a PL/pgSQL function per outbox claim statement at the
 * configured batch size, claims call it, and a claim whose function is missing or unusable sends
 * its statement instead — the same rows, never an error — and calls the function again later.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, beforeEach, describe, it } from 'node:test';
import pg from 'pg';
import {
  CLAIM_FUNCTION_COMMENT,
  claimFunctionDdl,
  claimFunctionName,
  claimFunctionUnusable,
  newClaimFunctionState,
  type ClaimFunctionUnusable,
  type ClaimStatement,
} from '../../lib/db/postgres/claim-functions.ts';
import { PostgresDriver } from '../../lib/db/postgres/postgres-driver.ts';
import { withStatementBudget } from '../../lib/db/statement-budget.ts';
import { sentOnce } from '../helpers/claim-function-state.ts';
import { createTestDatabase, testDatabaseUrl, type TestDatabase } from '../helpers/database.ts';

const LEASE = 60_000;

/** Functions of the test schema (name → has QueueBox's comment). */
async function functionsIn(db: TestDatabase): Promise<Map<string, boolean>> {
  const rows = await db.query<{ name: string; ours: boolean }>(
    `SELECT p.proname AS name, obj_description(p.oid, 'pg_proc') IS NOT DISTINCT FROM $2 AS ours
       FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
      WHERE n.nspname = $1 ORDER BY 1`,
    [db.schema, CLAIM_FUNCTION_COMMENT],
  );
  return new Map(rows.map((r) => [r.name, r.ours]));
}

/** Replaces the function of `statement` with one that fails loudly when called. */
async function makeFunctionFail(db: TestDatabase, statement: ClaimStatement): Promise<void> {
  const ddl = claimFunctionDdl(db.driver.ctx.names, statement).replace(/RETURN QUERY [\s\S]*;\nEND/, `RAISE EXCEPTION 'claim function called'; RETURN;\nEND`);
  assert.match(ddl, /claim function called/);
  await db.query(ddl);
}

async function dropFunction(db: TestDatabase, statement: ClaimStatement): Promise<void> {
  await db.query(`DROP FUNCTION "${db.schema}"."${claimFunctionName(statement)}"(${statement.params.join(', ')})`);
}

async function insertKeyless(db: TestDatabase, n: number): Promise<void> {
  await db.query(`INSERT INTO "${db.schema}".outbox (topic, payload) SELECT 't', jsonb_build_object('n', g) FROM generate_series(1, $1::int) g`, [n]);
}

/** A login role with the grants a runtime role has; dropped by the returned function. */
async function runtimeRole(db: TestDatabase, suffix: string, grants = ''): Promise<{ url: string; drop: () => Promise<void> }> {
  const role = `qb_${suffix}_${db.schema}`.slice(0, 60);
  // A password: the embedded PostgreSQL of the test run authenticates by password, not trust.
  const password = randomBytes(12).toString('hex');
  await db.query(`CREATE ROLE "${role}" LOGIN PASSWORD '${password}'`);
  await db.query(`GRANT USAGE ON SCHEMA "${db.schema}" TO "${role}"; ${grants.replaceAll('%R', `"${role}"`)}`);
  const url = new URL(db.url);
  url.username = role;
  url.password = password;
  return { url: url.toString(), drop: () => db.query(`DROP OWNED BY "${role}"; DROP ROLE "${role}"`).then(() => undefined) };
}

/**
 * A new driver whose claim-function verifications are counted (`count()`), each running `before`
 * (its number, from 0) before the real verification.
 */
function countingVerifications(db: TestDatabase, before: (n: number) => Promise<void> = async () => {}): { driver: PostgresDriver; count: () => number } {
  const driver = db.newDriver();
  const realVerify = driver.ctx.claimFunctions!.verify!;
  let verifications = 0;
  Object.assign(driver.ctx, {
    claimFunctions: newClaimFunctionState({
      verify: async (statement) => {
        await before(verifications++);
        return realVerify(statement);
      },
    }),
  });
  return { driver, count: () => verifications };
}

describe('claim functions (PostgreSQL)', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({ outbox: { batchSize: 10 } });
  });
  after(async () => db.drop());
  beforeEach(async () => {
    await db.query(`TRUNCATE "${db.schema}".outbox`);
    await db.driver.migrate();
  });

  it('migrate creates one commented function per outbox claim statement of the batch size, and claims call them', async () => {
    const statements = db.driver.claimStatements();
    assert.equal(statements.length, 2, 'the window claim and the full claim');
    const functions = await functionsIn(db);
    for (const statement of statements) {
      const name = claimFunctionName(statement);
      assert.match(name, /^outbox_claim_[0-9a-f]{12}$/);
      assert.equal(functions.get(name), true, `${name} exists with QueueBox's comment`);
      assert.match(statement.text, /LIMIT 10\b/, 'the batch size is a literal of the statement');
    }
    // A full batch: the window claim filled it, so the next claim is a window claim again.
    await insertKeyless(db, 10);
    const driver = sentOnce(db.newDriver());
    assert.equal((await driver.outboxClaimMany({ limit: 10, leaseMs: LEASE })).length, 10);
    assert.equal(driver.ctx.claimFunctions?.missing.size, 0, 'no claim fell back to its statement');
    // Proof that the claim runs through the function: a function that fails makes the claim fail
    // — on the driver that verified it already (verified once per container, not per claim).
    await makeFunctionFail(db, statements[0]!);
    await insertKeyless(db, 2);
    await assert.rejects(driver.outboxClaimMany({ limit: 10, leaseMs: LEASE }), /claim function called/);
    // A driver that verifies it now finds another definition: it never calls it, and sends the statement.
    const fresh = sentOnce(db.newDriver());
    assert.equal((await fresh.outboxClaimMany({ limit: 10, leaseMs: LEASE })).length, 2);
    assert.deepEqual([...fresh.ctx.claimFunctions!.missing.keys()].map(claimFunctionName), [claimFunctionName(statements[0]!)]);
  });

  it('migrate reports what it did: created, kept, dropped; a second run creates and drops nothing', async () => {
    const names = db.driver.claimStatements().map(claimFunctionName);
    await dropFunction(db, db.driver.claimStatements()[1]!);
    const first = await db.driver.migrate();
    assert.deepEqual(first.claimFunctions, { created: [names[1]], replaced: [], kept: [names[0]], dropped: [], notDropped: [] });
    const again = await db.driver.migrate();
    assert.deepEqual(again, { applied: [], claimFunctions: { created: [], replaced: [], kept: names, dropped: [], notDropped: [] } });
  });

  it('a claim whose function is missing sends its statement (same rows), and verifies and calls the function again once the retry interval passed', async () => {
    // Every claim here fills at least half its batch from the window, so each is a window claim.
    const [window] = db.driver.claimStatements();
    await dropFunction(db, window!);
    await insertKeyless(db, 10);
    const driver = db.newDriver();
    let clock = 0;
    const warnings: ClaimFunctionUnusable[] = [];
    Object.assign(driver.ctx, {
      claimFunctions: { ...newClaimFunctionState({ retryMs: 1_000, now: () => clock, verify: driver.ctx.claimFunctions!.verify! }), warn: (e: ClaimFunctionUnusable) => warnings.push(e) },
    });
    sentOnce(driver);
    const rows = await driver.outboxClaimMany({ limit: 10, leaseMs: LEASE });
    assert.deepEqual(rows.map((r) => (r.payload as { n: number }).n), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    assert.deepEqual([...driver.ctx.claimFunctions!.missing.keys()].map(claimFunctionName), [claimFunctionName(window!)]);
    assert.deepEqual(warnings.map((w) => [w.function, w.code]), [[claimFunctionName(window!), '42883']]);
    // Within the retry interval the statement is sent: a failing function would not be noticed.
    await makeFunctionFail(db, window!);
    await insertKeyless(db, 5);
    clock = 999;
    assert.equal((await driver.outboxClaimMany({ limit: 10, leaseMs: LEASE })).length, 5);
    // After it, the function is verified again before any call: another definition is refused.
    clock = 1_000;
    await insertKeyless(db, 5);
    assert.equal((await driver.outboxClaimMany({ limit: 10, leaseMs: LEASE })).length, 5);
    assert.deepEqual(warnings.map((w) => w.code), ['42883', 'altered']);
    // `migrate` puts the right one back: the next claim after the interval verifies and uses it.
    assert.deepEqual((await db.driver.migrate()).claimFunctions?.replaced, [claimFunctionName(window!)]);
    clock = 2_000;
    await insertKeyless(db, 5);
    assert.equal((await driver.outboxClaimMany({ limit: 10, leaseMs: LEASE })).length, 5);
    assert.equal(driver.ctx.claimFunctions!.missing.size, 0);
    assert.deepEqual([...driver.ctx.claimFunctions!.verified.keys()].map(claimFunctionName), [claimFunctionName(window!)]);
  });

  it('the first claim of a statement sends it without verifying its function; the second verifies it, and later claims call the function', async () => {
    await insertKeyless(db, 30);
    const [window] = db.driver.claimStatements();
    const { driver, count } = countingVerifications(db);
    assert.equal((await driver.outboxClaimMany({ limit: 10, leaseMs: LEASE })).length, 10);
    assert.equal(count(), 0, 'the first claim verified nothing');
    assert.deepEqual([...driver.ctx.claimFunctions!.sent].map(claimFunctionName), [claimFunctionName(window!)]);
    assert.equal((await driver.outboxClaimMany({ limit: 10, leaseMs: LEASE })).length, 10);
    assert.equal(count(), 1, 'the second claim of the statement verified its function');
    // The third calls it: a function that fails now makes the claim fail.
    await makeFunctionFail(db, window!);
    try {
      await assert.rejects(driver.outboxClaimMany({ limit: 10, leaseMs: LEASE }), /claim function called/);
      assert.equal(count(), 1);
    } finally {
      await db.driver.migrate();
    }
  });

  it('the second claim of a statement sends it while the function is verified, returns once the verification ended, and later claims call the function', async () => {
    await insertKeyless(db, 30);
    const [window] = db.driver.claimStatements();
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const { driver, count } = countingVerifications(db, () => gate);
    sentOnce(driver);
    const processing = async () => Number((await db.query<{ n: string }>(`SELECT count(*) AS n FROM "${db.schema}".outbox WHERE state = 'processing'`))[0]!.n);
    let settled = false;
    const first = driver.outboxClaimMany({ limit: 10, leaseMs: LEASE }).finally(() => (settled = true));
    const second = driver.outboxClaimMany({ limit: 10, leaseMs: LEASE });
    for (let i = 0; i < 200 && (await processing()) < 20; i++) await new Promise((resolve) => setTimeout(resolve, 10));
    assert.equal(await processing(), 20, 'both claims took their rows while the verification waited');
    assert.equal(settled, false, 'a claim returns only once the verification it started has ended');
    assert.equal(count(), 1, 'the second claim joined the verification under way');
    release();
    assert.equal((await first).length + (await second).length, 20);
    assert.deepEqual([...driver.ctx.claimFunctions!.verified.keys()].map(claimFunctionName), [claimFunctionName(window!)]);
    assert.equal(driver.ctx.claimFunctions!.verifying.size, 0);
    // The next claim calls the function: with the function gone it meets 42883 (a statement sent
    // itself would not notice), falls back to the statement, and marks it missing.
    await dropFunction(db, window!);
    try {
      assert.equal((await driver.outboxClaimMany({ limit: 10, leaseMs: LEASE })).length, 10);
      assert.equal(count(), 1);
      assert.deepEqual([...driver.ctx.claimFunctions!.missing.keys()].map(claimFunctionName), [claimFunctionName(window!)]);
    } finally {
      await db.driver.migrate();
    }
  });

  it('a verification that fails fails no claim and marks nothing: the next claim verifies again', async () => {
    await insertKeyless(db, 20);
    const { driver, count } = countingVerifications(db, async (n) => {
      if (n === 0) throw new Error('connection reset');
    });
    sentOnce(driver);
    assert.equal((await driver.outboxClaimMany({ limit: 10, leaseMs: LEASE })).length, 10);
    assert.equal(driver.ctx.claimFunctions!.verified.size, 0);
    assert.equal(driver.ctx.claimFunctions!.missing.size, 0);
    assert.equal((await driver.outboxClaimMany({ limit: 10, leaseMs: LEASE })).length, 10);
    assert.equal(count(), 2);
    assert.equal(driver.ctx.claimFunctions!.verified.size, 1);
  });

  it('a batch size without a function (another config) sends its statement, and the driver logger hears of it once per finding', async () => {
    await insertKeyless(db, 5);
    // Code deployed with `outbox.batchSize` 4 against a database `migrate` made functions of 10 for.
    const driver = new PostgresDriver({ config: { ...db.config, outbox: { ...db.config.outbox, batchSize: 4 } }, url: testDatabaseUrl() });
    try {
      const logged: Array<[string, Record<string, unknown>]> = [];
      driver.useLogger({ warn: (message, attributes) => logged.push([message, attributes]) });
      assert.equal((await driver.outboxClaimMany({ limit: 4, leaseMs: LEASE })).length, 4);
      assert.equal((await driver.outboxClaimMany({ limit: 4, leaseMs: LEASE })).length, 1);
      assert.equal(driver.ctx.claimFunctions!.missing.size, 1, 'the window claim at 4 has no function');
      assert.equal(logged.length, 1, JSON.stringify(logged));
      assert.match(logged[0]![0], /claim function unusable.*queuebox migrate/);
      assert.equal(logged[0]![1].code, '42883');
    } finally {
      await driver.close();
    }
  });

  it('a claim grown past outbox.batchSize (outbox.maxBatchSize) sends its statement without looking for a function or warning', async () => {
    await insertKeyless(db, 25);
    const driver = sentOnce(db.newDriver());
    const logged: unknown[] = [];
    driver.useLogger({ warn: (message) => logged.push(message) });
    assert.equal((await driver.outboxClaimMany({ limit: 20, leaseMs: LEASE })).length, 20);
    assert.equal((await driver.outboxClaimMany({ limit: 10, leaseMs: LEASE })).length, 5, 'the claim at batchSize calls its function');
    assert.equal(driver.ctx.claimFunctions!.missing.size, 0);
    assert.deepEqual([...driver.ctx.claimFunctions!.verified.keys()].map((st) => st.text.length > 0), [true], 'only the function of batchSize was verified');
    assert.deepEqual(logged, []);
  });

  it('a missing function under an invocation budget (BEGIN; SET LOCAL statement_timeout) falls back in a new transaction', async () => {
    await dropFunction(db, db.driver.claimStatements()[0]!);
    await insertKeyless(db, 3);
    const driver = db.newDriver();
    // A budget below the connection's statement_timeout: the claim runs in a transaction of its own.
    const rows = await withStatementBudget(() => 5_000, () => driver.outboxClaimMany({ limit: 10, leaseMs: LEASE }));
    assert.equal(rows.length, 3);
    const processing = await db.query<{ n: string }>(`SELECT count(*) AS n FROM "${db.schema}".outbox WHERE state = 'processing'`);
    assert.equal(Number(processing[0]!.n), 3, 'the fallback committed its claim');
  });

  it('a role that may not execute the function gets the statement; a role that may not update the table gets its error, and the function is not marked', async () => {
    const claimer = await runtimeRole(db, 'claimer', `GRANT SELECT, UPDATE ON ALL TABLES IN SCHEMA "${db.schema}" TO %R`);
    const reader = await runtimeRole(db, 'reader', `GRANT SELECT ON ALL TABLES IN SCHEMA "${db.schema}" TO %R`);
    const drivers: PostgresDriver[] = [];
    try {
      for (const statement of db.driver.claimStatements()) {
        await db.query(`REVOKE EXECUTE ON FUNCTION "${db.schema}"."${claimFunctionName(statement)}"(${statement.params.join(', ')}) FROM PUBLIC`);
      }
      await insertKeyless(db, 2);
      const noExecute = sentOnce(new PostgresDriver({ config: db.config, url: claimer.url }));
      drivers.push(noExecute);
      // The first claim of each statement after one sent without verifying (`sentOnce`) sends it
      // while its function is verified (it is QueueBox's own); the next claim of that statement calls the function, meets the missing EXECUTE, and
      // sends the statement. (A window of 2 in a batch of 10 hands over to the full claim.)
      assert.equal((await noExecute.outboxClaimMany({ limit: 10, leaseMs: LEASE })).length, 2);
      for (let claim = 0; claim < 2; claim++) {
        await insertKeyless(db, 1);
        assert.equal((await noExecute.outboxClaimMany({ limit: 10, leaseMs: LEASE })).length, 1);
      }
      assert.equal(noExecute.ctx.claimFunctions!.missing.size, 1);

      const window = db.driver.claimStatements()[0]!;
      await db.query(`GRANT EXECUTE ON FUNCTION "${db.schema}"."${claimFunctionName(window)}"(${window.params.join(', ')}) TO PUBLIC`);
      await insertKeyless(db, 1);
      const noUpdate = sentOnce(new PostgresDriver({ config: db.config, url: reader.url }));
      drivers.push(noUpdate);
      // The first claim (its statement, while the function is verified) and the second (the function) both meet the table's 42501.
      for (let claim = 0; claim < 2; claim++) {
        await assert.rejects(noUpdate.outboxClaimMany({ limit: 10, leaseMs: LEASE }), (error: Error & { code?: string }) => error.code === '42501' && /outbox/.test(error.message));
      }
      assert.equal(noUpdate.ctx.claimFunctions!.missing.size, 0, "the table's 42501 is the claim's own error");
      assert.equal(noUpdate.ctx.claimFunctions!.verified.size, 1, 'and the function stays verified');
    } finally {
      await Promise.all(drivers.map((d) => d.close()));
      await claimer.drop();
      await reader.drop();
    }
  });

  it('migrate drops the functions of another batch size (only QueueBox claim functions of its tables)', async () => {
    const mine = `"${db.schema}"."outbox_claim_000000000000"`;
    await db.query(`CREATE FUNCTION ${mine}() RETURNS int LANGUAGE sql AS 'SELECT 1'`);
    const before10 = db.driver.claimStatements().map(claimFunctionName);
    const driver20 = new PostgresDriver({ config: { ...db.config, outbox: { ...db.config.outbox, batchSize: 20 } }, url: db.url });
    try {
      const result = await driver20.migrate();
      const after20 = driver20.claimStatements().map(claimFunctionName);
      assert.deepEqual(result.claimFunctions, { created: after20, replaced: [], kept: [], dropped: [...before10].sort(), notDropped: [] });
      const functions = await functionsIn(db);
      for (const name of before10) assert.equal(functions.has(name), false, `${name} (batch 10) dropped`);
      for (const name of after20) assert.equal(functions.get(name), true, `${name} (batch 20) created`);
      assert.equal(functions.get('outbox_claim_000000000000'), false, 'a function without the comment is left alone');
    } finally {
      await driver20.close();
      await db.query(`DROP FUNCTION ${mine}()`);
    }
  });

  it('migrate by another role: nothing to change is no error; stale functions it may not drop are left in place and reported', async () => {
    // (CREATE on the database: migrate creates the schema when it is missing)
    const other = await runtimeRole(db, 'migrator', `GRANT CREATE ON DATABASE "${new URL(db.url).pathname.slice(1)}" TO %R; GRANT CREATE ON SCHEMA "${db.schema}" TO %R; GRANT ALL ON ALL TABLES IN SCHEMA "${db.schema}" TO %R; GRANT ALL ON ALL SEQUENCES IN SCHEMA "${db.schema}" TO %R`);
    const drivers: PostgresDriver[] = [];
    try {
      const same = new PostgresDriver({ config: db.config, url: other.url });
      drivers.push(same);
      assert.deepEqual((await same.migrate()).claimFunctions?.created, [], 'same version, same batch size: nothing to create');
      const batch20 = new PostgresDriver({ config: { ...db.config, outbox: { ...db.config.outbox, batchSize: 20 } }, url: other.url });
      drivers.push(batch20);
      const result = await batch20.migrate();
      assert.equal(result.claimFunctions?.created.length, 2, 'it may create functions in the schema');
      assert.deepEqual(result.claimFunctions?.notDropped, db.driver.claimStatements().map(claimFunctionName).sort(), 'the batch-10 functions belong to the first migrator');
      const off = new PostgresDriver({ config: { ...db.config, database: { ...db.config.database, claimFunctions: false } }, url: other.url });
      drivers.push(off);
      const offResult = await off.migrate();
      assert.deepEqual(offResult.claimFunctions?.dropped, batch20.claimStatements().map(claimFunctionName).sort(), 'it drops the ones it owns');
    } finally {
      await Promise.all(drivers.map((d) => d.close()));
      await other.drop();
    }
  });

  it('database.claimFunctions: false — migrate drops them and claims send their statements', async () => {
    const off = new PostgresDriver({ config: { ...db.config, database: { ...db.config.database, claimFunctions: false } }, url: db.url });
    try {
      await off.migrate();
      const ours = [...(await functionsIn(db))].filter(([, isOurs]) => isOurs);
      assert.deepEqual(ours, []);
      assert.equal(off.ctx.claimFunctions, undefined);
      await insertKeyless(db, 2);
      assert.equal((await off.outboxClaimMany({ limit: 10, leaseMs: LEASE })).length, 2);
    } finally {
      await off.close();
    }
  });

  it('the longest table name the config accepts still gives a valid function name', async () => {
    const long = await createTestDatabase({ tables: { outbox: 'o'.repeat(38), inbox: 'i'.repeat(38) } });
    try {
      const names = long.driver.claimStatements().map(claimFunctionName);
      for (const name of names) assert.ok(name.length <= 63, `${name} (${name.length} characters)`);
      assert.equal([...(await functionsIn(long))].filter(([n, ours]) => ours && names.includes(n)).length, 2);
      await long.query(`INSERT INTO "${long.schema}"."${'o'.repeat(38)}" (topic, payload) VALUES ('t', '{}')`);
      assert.equal((await long.driver.outboxClaimMany({ limit: 100, leaseMs: LEASE })).length, 1);
      assert.equal(long.driver.ctx.claimFunctions!.missing.size, 0);
    } finally {
      await long.drop();
    }
  });
});

/**
 * A function keeps its plan for the life of the server connection. The plan made while the queue
 * was empty or nearly empty — never analyzed (a fresh deployment), or analyzed so — must still be
 * a good plan when a backlog arrives before the next ANALYZE: read as buffers per claim, through
 * the function whose plan was cached then, against the statement planned now on the same data.
 */
describe('a claim function planned on an empty or nearly empty table, after a backlog arrives (PostgreSQL)', () => {
  async function buffers(client: pg.Client, sql: string, statement: ClaimStatement): Promise<number> {
    await client.query('BEGIN');
    try {
      const { rows } = await client.query<{ 'QUERY PLAN': Array<{ Plan: Record<string, number> }> }>(`EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${sql}`, [LEASE, ...statement.params.slice(1).map(() => null)]);
      const plan = rows[0]!['QUERY PLAN'][0]!.Plan;
      return (plan['Shared Hit Blocks'] ?? 0) + (plan['Shared Read Blocks'] ?? 0);
    } finally {
      await client.query('ROLLBACK');
    }
  }

  const starts = {
    'empty, never analyzed': async (_db: TestDatabase, _table: string) => {},
    '3 keyed rows, analyzed': async (db: TestDatabase, table: string) => {
      await db.query(`INSERT INTO ${table} (topic, key, payload) SELECT 't', 'k' || g, '{}' FROM generate_series(1, 3) g`);
      await db.query(`ANALYZE ${table}`);
    },
  };
  // Rows in sequence order: consecutive rows share a key, so the window is held by a few keys and
  // the full claim reaches past it to the heads of the others.
  const backlogs = {
    'keyed (100 keys × 200)': `'b' || (g / 200)`,
    keyless: 'NULL',
    'hot keys (3 keys hold the oldest 18,000, then 2,000 keys)': `CASE WHEN g <= 18000 THEN 'hot' || (g / 6000) ELSE 'cold' || g END`,
  };
  for (const [start, prepare] of Object.entries(starts)) {
    for (const [backlog, key] of Object.entries(backlogs)) {
      it(`${start} → ${backlog}, 20,000 rows: the window and the full claim read about what the statement reads`, async () => {
        // A schema of its own: the table is never analyzed unless the start says so.
        const db = await createTestDatabase({ outbox: { batchSize: 100 } });
        const table = `"${db.schema}".outbox`;
        await db.query(`ALTER TABLE ${table} SET (autovacuum_enabled = false)`);
        const client = new pg.Client({ connectionString: db.url });
        await client.connect();
        try {
          await prepare(db, table);
          const [window, full] = db.driver.claimStatements() as [ClaimStatement, ClaimStatement];
          const call = (s: ClaimStatement) => `SELECT * FROM "${db.schema}"."${claimFunctionName(s)}"(${s.params.map((type, i) => `$${i + 1}::${type}`).join(', ')})`;
          // More than five executions on this connection: PL/pgSQL keeps the generic plan.
          for (let i = 0; i < 8; i++) for (const s of [window, full]) await buffers(client, call(s), s);
          await db.query(`INSERT INTO ${table} (topic, key, payload) SELECT 't', ${key}, '{}' FROM generate_series(1, 20000) g ORDER BY g`);
          for (const s of [window, full]) {
            const viaFunction = await buffers(client, call(s), s);
            const asStatement = await buffers(client, s.text, s);
            assert.ok(viaFunction <= asStatement * 1.5 + 200, `${s === window ? 'window' : 'full'} claim: ${viaFunction} buffers through the cached function, ${asStatement} as a statement`);
          }
        } finally {
          await client.end();
          await db.drop();
        }
      });
    }
  }
});

/**
 * A claim function never has its plan JIT-compiled: PostgreSQL compiles a plan whose estimate
 * passes `jit_above_cost` at every execution, and under the functions' plan settings a claim's
 * estimate on a large table passes the default (100,000), for a claim that reads a few thousand
 * buffers (measured: 102 of 108 ms of a window claim of 100 on 1,000,000 rows). Observed through
 * `auto_explain`, which reports the plans of the statements a function runs: with JIT on for
 * every plan in the session (`jit_above_cost = 0`), the calls are compiled and the claim
 * statements inside are not.
 */
describe('claim functions: never JIT-compiled (PostgreSQL)', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({ outbox: { batchSize: 100 } });
  });
  after(async () => db.drop());

  it('the claim statements inside the functions run without JIT, where the calls themselves are compiled', async (t) => {
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    try {
      const { rows: jit } = await client.query<{ available: boolean }>('SELECT pg_jit_available() AS available');
      if (!jit[0]!.available) {
        t.skip('this PostgreSQL has no JIT provider (llvmjit): nothing can be compiled here');
        return;
      }
      try {
        await client.query(`LOAD 'auto_explain'`);
      } catch (error) {
        t.skip(`auto_explain cannot be loaded here (${String(error)}): the plans inside a function cannot be seen`);
        return;
      }
      const notices: string[] = [];
      client.on('notice', (n) => notices.push(String(n.message)));
      for (const setting of ['auto_explain.log_min_duration = 0', 'auto_explain.log_nested_statements = on', `auto_explain.log_level = 'notice'`, 'client_min_messages = notice', 'jit = on', 'jit_above_cost = 0']) {
        await client.query(`SET ${setting}`);
      }
      await insertKeyless(db, 50);
      await db.query(`INSERT INTO "${db.schema}".outbox (topic, key, payload) SELECT 't', 'k' || (g % 5), '{}' FROM generate_series(1, 50) g`);
      const statements = db.driver.claimStatements();
      assert.equal(statements.length, 2, 'the window and the full claim');
      // Seven calls each: PL/pgSQL plans the first five for their values, then keeps a generic plan.
      for (let i = 0; i < 7; i++) {
        for (const s of statements) {
          await client.query('BEGIN');
          await client.query(`SELECT * FROM "${db.schema}"."${claimFunctionName(s)}"(${s.params.map((type, n) => `$${n + 1}::${type}`).join(', ')})`, [LEASE, ...s.params.slice(1).map(() => null)]);
          await client.query('ROLLBACK');
        }
      }
      const inner = notices.filter((n) => n.includes('retried AS'));
      const calls = notices.filter((n) => n.includes('_claim_') && !n.includes('retried AS'));
      assert.equal(inner.length, 14, `auto_explain reported the claim statement of every call (${inner.length} of 14)`);
      assert.ok(calls.some((n) => n.includes('JIT:')), 'the calls themselves are compiled: JIT works in this session');
      assert.deepEqual(inner.filter((n) => n.includes('JIT:')).length, 0, 'no claim statement inside a function was compiled');
    } finally {
      await client.end();
    }
  });
});

describe('claim functions without a database', () => {
  it('refuses a statement that contains the function body quote', () => {
    const names = { schema: 's', outboxTable: 'outbox' } as Parameters<typeof claimFunctionDdl>[0];
    assert.throws(() => claimFunctionDdl(names, { table: 'outbox', text: 'SELECT $queuebox$', params: [], returns: 'x int' }), /function body quote/);
  });

  it('tells an unusable function from the claim’s own errors', () => {
    const fn = 'outbox_claim_0123456789ab';
    const error = (code: string, message: string) => Object.assign(new Error(message), { code });
    assert.equal(claimFunctionUnusable(error('42883', `function "s".${fn}(double precision) does not exist`), fn), true);
    assert.equal(claimFunctionUnusable(error('42883', 'function gen_random_uuid() does not exist'), fn), false, 'a function the statement calls');
    assert.equal(claimFunctionUnusable(error('42501', `permission denied for function ${fn}`), fn), true);
    assert.equal(claimFunctionUnusable(error('42501', 'permission denied for table outbox'), fn), false);
    assert.equal(claimFunctionUnusable(error('42804', 'structure of query does not match function result type'), fn), true);
    assert.equal(claimFunctionUnusable(error('XX000', 'cache lookup failed for function 16384'), fn), true, 'dropped by a concurrent migrate');
    assert.equal(claimFunctionUnusable(error('XX000', 'could not read block 0'), fn), false);
    assert.equal(claimFunctionUnusable(error('23505', `duplicate key value violates unique constraint "outbox_key_in_flight_idx"`), fn), false);
    assert.equal(claimFunctionUnusable({ cause: { code: '42804' }, message: 'wrapped' }, fn), true);
  });
});
