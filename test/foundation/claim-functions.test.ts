/**
 * Claim functions: `migrate` creates a PL/pgSQL function per outbox and relay claim statement at
 * the configured batch sizes, claims call it, and a claim whose function is missing or unusable sends
 * its statement instead — the same rows, never an error.
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import { CLAIM_FUNCTION_COMMENT, claimFunctionDdl, claimFunctionName, type ClaimStatement } from '../../lib/db/postgres/claim-functions.ts';
import { PostgresDriver } from '../../lib/db/postgres/postgres-driver.ts';
import { withStatementBudget } from '../../lib/db/statement-budget.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';

const LEASE = 60_000;

/** Claim functions of the test schema (name → has QueueBox's comment). */
async function claimFunctionsIn(db: TestDatabase): Promise<Map<string, boolean>> {
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

async function insertKeyless(db: TestDatabase, n: number): Promise<void> {
  await db.query(`INSERT INTO "${db.schema}".outbox (topic, payload) SELECT 't', jsonb_build_object('n', g) FROM generate_series(1, $1::int) g`, [n]);
}

describe('claim functions (PostgreSQL)', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({ outbox: { batchSize: 10 }, inbox: { relay: { batchSize: 10 } } });
  });
  after(async () => db.drop());
  beforeEach(async () => {
    await db.query(`TRUNCATE "${db.schema}".outbox, "${db.schema}".inbox`);
    await db.driver.migrate();
  });

  it('migrate creates one commented function per outbox and relay claim statement of the batch size, and claims call them', async () => {
    const statements = db.driver.claimStatements();
    assert.deepEqual(statements.map((s) => s.table), ['outbox', 'outbox', 'inbox'], 'the outbox window and full claims, the relay claim');
    const functions = await claimFunctionsIn(db);
    for (const statement of statements) {
      const name = claimFunctionName(statement);
      assert.match(name, new RegExp(`^${statement.table}_claim_[0-9a-f]{12}$`));
      assert.equal(functions.get(name), true, `${name} exists with QueueBox's comment`);
      assert.match(statement.text, /LIMIT 10\b/, 'the batch size is a literal of the statement');
    }
    await insertKeyless(db, 3);
    const driver = db.newDriver();
    assert.equal((await driver.outboxClaimMany({ limit: 10, leaseMs: LEASE })).length, 3);
    assert.equal(driver.ctx.claimFunctions?.missing.size, 0, 'no claim fell back to its statement');
    // Proof that the claim runs through the function: a function that fails makes the claim fail.
    await makeFunctionFail(db, statements[0]!);
    await insertKeyless(db, 2);
    await assert.rejects(db.newDriver().outboxClaimMany({ limit: 10, leaseMs: LEASE }), /claim function called/);
    await db.driver.migrate();
    assert.equal((await db.newDriver().outboxClaimMany({ limit: 10, leaseMs: LEASE })).length, 2, 'migrate restored the function');
  });

  it('the relay claim calls its function; a missing one rolls back its transaction and the claim runs again with the statement', async () => {
    const relay = db.driver.claimStatements()[2]!;
    const receive = (n: number) => db.driver.inboxInsert({ source: 'shop', idempotencyKey: `k-${n}`, aggregateId: `a-${n % 2}`, payload: { n }, consumption: 'push' });
    for (let n = 1; n <= 4; n++) await receive(n);
    await makeFunctionFail(db, relay);
    await assert.rejects(db.newDriver().inboxClaimPushMany({ limit: 10, leaseMs: LEASE }), /claim function called/);
    await db.query(`DROP FUNCTION "${db.schema}"."${claimFunctionName(relay)}"(double precision)`);
    const driver = db.newDriver();
    const rows = await driver.inboxClaimPushMany({ limit: 10, leaseMs: LEASE });
    assert.deepEqual(rows.map((r) => r.idempotencyKey), ['k-1', 'k-2'], 'the head of each aggregate');
    assert.deepEqual([...driver.ctx.claimFunctions!.missing].map(claimFunctionName), [claimFunctionName(relay)]);
  });

  it('a claim whose function is missing sends its statement (same rows) and does not look for the function again', async () => {
    const [window] = db.driver.claimStatements();
    const name = claimFunctionName(window!);
    await db.query(`DROP FUNCTION "${db.schema}"."${name}"(double precision)`);
    await insertKeyless(db, 4);
    const driver = db.newDriver();
    const rows = await driver.outboxClaimMany({ limit: 10, leaseMs: LEASE });
    assert.deepEqual(rows.map((r) => (r.payload as { n: number }).n), [1, 2, 3, 4]);
    assert.deepEqual([...driver.ctx.claimFunctions!.missing].map(claimFunctionName), [name]);
    // The function comes back failing: this driver no longer calls it.
    await makeFunctionFail(db, window!);
    await insertKeyless(db, 1);
    assert.equal((await driver.outboxClaimMany({ limit: 10, leaseMs: LEASE })).length, 1);
  });

  it('a batch size without a function (another config) sends its statement', async () => {
    await insertKeyless(db, 5);
    const driver = db.newDriver();
    const rows = await driver.outboxClaimMany({ limit: 4, leaseMs: LEASE });
    assert.equal(rows.length, 4);
    assert.equal(driver.ctx.claimFunctions!.missing.size, 1, 'the window claim at 4 has no function');
  });

  it('a missing function under an invocation budget (BEGIN; SET LOCAL statement_timeout) falls back in a new transaction', async () => {
    const [window] = db.driver.claimStatements();
    await db.query(`DROP FUNCTION "${db.schema}"."${claimFunctionName(window!)}"(double precision)`);
    await insertKeyless(db, 3);
    const driver = db.newDriver();
    // A budget below the connection's statement_timeout: the claim runs in a transaction of its own.
    const rows = await withStatementBudget(() => 5_000, () => driver.outboxClaimMany({ limit: 10, leaseMs: LEASE }));
    assert.equal(rows.length, 3);
    const processing = await db.query<{ n: string }>(`SELECT count(*) AS n FROM "${db.schema}".outbox WHERE state = 'processing'`);
    assert.equal(Number(processing[0]!.n), 3, 'the fallback committed its claim');
  });

  it('a role that may not execute the function gets the statement', async () => {
    const role = `qb_claimer_${db.schema}`.slice(0, 60);
    await db.query(`CREATE ROLE "${role}" LOGIN`);
    try {
      await db.query(`GRANT USAGE ON SCHEMA "${db.schema}" TO "${role}"; GRANT SELECT, UPDATE ON ALL TABLES IN SCHEMA "${db.schema}" TO "${role}"`);
      // the relay claim takes a transaction-scoped advisory lock: nothing to grant
      for (const statement of db.driver.claimStatements()) {
        await db.query(`REVOKE EXECUTE ON FUNCTION "${db.schema}"."${claimFunctionName(statement)}"(double precision) FROM PUBLIC`);
      }
      await insertKeyless(db, 2);
      const url = new URL(db.url);
      url.username = role;
      const driver = new PostgresDriver({ config: db.config, url: url.toString() });
      try {
        assert.equal((await driver.outboxClaimMany({ limit: 10, leaseMs: LEASE })).length, 2);
        assert.equal(driver.ctx.claimFunctions!.missing.size, 1);
        await db.driver.inboxInsert({ source: 'shop', idempotencyKey: 'r-1', payload: {}, consumption: 'push' });
        assert.equal((await driver.inboxClaimPushMany({ limit: 10, leaseMs: LEASE })).length, 1, 'the relay claim too');
        assert.equal(driver.ctx.claimFunctions!.missing.size, 2);
      } finally {
        await driver.close();
      }
    } finally {
      await db.query(`DROP OWNED BY "${role}"; DROP ROLE "${role}"`);
    }
  });

  it('migrate drops the functions of another batch size (only QueueBox claim functions of its tables)', async () => {
    // (the relay keeps batch size 10: its function stays)
    const mine = `"${db.schema}"."outbox_claim_000000000000"`;
    await db.query(`CREATE FUNCTION ${mine}() RETURNS int LANGUAGE sql AS 'SELECT 1'`);
    const before10 = db.driver.claimStatements().map(claimFunctionName);
    const driver20 = new PostgresDriver({ config: { ...db.config, outbox: { ...db.config.outbox, batchSize: 20 } }, url: db.url });
    try {
      await driver20.migrate();
      const after20 = driver20.claimStatements().map(claimFunctionName);
      const functions = await claimFunctionsIn(db);
      const relay = before10[2]!;
      assert.equal(functions.get(relay), true, 'the relay function of the unchanged batch size stays');
      for (const name of before10.slice(0, 2)) assert.equal(functions.has(name), false, `${name} (batch 10) dropped`);
      for (const name of after20) assert.equal(functions.get(name), true, `${name} (batch 20) created`);
      assert.equal(functions.get('outbox_claim_000000000000'), false, 'a function without the comment is left alone');
    } finally {
      await driver20.close();
      await db.query(`DROP FUNCTION ${mine}()`);
    }
  });

  it('database.claimFunctions: false — migrate drops them and claims send their statements', async () => {
    const off = new PostgresDriver({ config: { ...db.config, database: { ...db.config.database, claimFunctions: false } }, url: db.url });
    try {
      await off.migrate();
      const ours = [...(await claimFunctionsIn(db))].filter(([, isOurs]) => isOurs);
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
      assert.equal([...(await claimFunctionsIn(long))].filter(([n, ours]) => ours && names.includes(n)).length, 3);
      await long.query(`INSERT INTO "${long.schema}"."${'o'.repeat(38)}" (topic, payload) VALUES ('t', '{}')`);
      assert.equal((await long.driver.outboxClaimMany({ limit: 100, leaseMs: LEASE })).length, 1);
      assert.equal(long.driver.ctx.claimFunctions!.missing.size, 0);
    } finally {
      await long.drop();
    }
  });

  it('a second migrate at the same version creates nothing new and keeps the functions', async () => {
    const beforeAgain = await claimFunctionsIn(db);
    assert.deepEqual((await db.driver.migrate()).applied, []);
    assert.deepEqual(await claimFunctionsIn(db), beforeAgain);
  });
});

describe('claim functions without a test database', () => {
  it('refuses a statement that contains the function body quote', () => {
    const names = { schema: 's', outboxTable: 'outbox' } as Parameters<typeof claimFunctionDdl>[0];
    assert.throws(() => claimFunctionDdl(names, { table: 'outbox', text: 'SELECT $queuebox$', params: [], returns: 'x int' }), /function body quote/);
  });
});
