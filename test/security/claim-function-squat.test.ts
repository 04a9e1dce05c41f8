/**
 * Claim-function squatting, against a real PostgreSQL with two roles: QueueBox's own role owns
 * its schema, and an attacker role may (or once could) CREATE in it. The attacker plants functions
 * under the claim functions' names — computed from the public code — with QueueBox's comment and a
 * body that logs who ran it before it claims as QueueBox would. Nothing of it may run as QueueBox:
 * `migrate` refuses (naming the function and its owner) and drops nothing, claims send their
 * statement instead, also after the retry interval, and start-up refuses a schema others may
 * create in. Objects of QueueBox's table names planted in advance are not adopted either.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { parseConfig } from '../../lib/config/load-config.ts';
import { CLAIM_FUNCTION_COMMENT, claimFunctionDdl, claimFunctionName, newClaimFunctionState, type ClaimFunctionUnusable } from '../../lib/db/postgres/claim-functions.ts';
import { PostgresDriver } from '../../lib/db/postgres/postgres-driver.ts';
import { SchemaTrustError } from '../../lib/errors.ts';
import { sentOnce } from '../helpers/claim-function-state.ts';
import { testDatabaseUrl } from '../helpers/database.ts';

const LEASE = 60_000;
const suffix = randomBytes(4).toString('hex');
const OWNER = `qb_squat_owner_${suffix}`;
const ATTACKER = `qb_squat_attacker_${suffix}`;

function roleUrl(role: string, password: string): string {
  const url = new URL(testDatabaseUrl());
  url.username = role;
  url.password = password;
  return url.toString();
}

describe('claim-function squatting (PostgreSQL, two roles)', () => {
  const admin = new pg.Pool({ connectionString: testDatabaseUrl(), max: 2 });
  const passwords = { owner: randomBytes(12).toString('hex'), attacker: randomBytes(12).toString('hex') };
  const schemas: string[] = [];
  const drivers: PostgresDriver[] = [];
  const q = async (text: string) => (await admin.query(text)).rows;

  /** A new schema owned by QueueBox's role (the attacker may USAGE it), and a driver as that role. */
  async function setUp(batchSize: number, schema = `qb_squat_${randomBytes(4).toString('hex')}`): Promise<{ schema: string; driver: (batch?: number) => PostgresDriver }> {
    if (!schemas.includes(schema)) {
      schemas.push(schema);
      await q(`CREATE SCHEMA "${schema}" AUTHORIZATION "${OWNER}"; GRANT USAGE ON SCHEMA "${schema}" TO "${ATTACKER}"`);
      // Where the attacker's code records who ran it (any role may write it).
      await q(`CREATE TABLE public."squat_log_${schema}" (ran_as text NOT NULL); GRANT INSERT ON public."squat_log_${schema}" TO PUBLIC`);
    }
    const driver = (batch = batchSize) => {
      const config = parseConfig({ database: { url: roleUrl(OWNER, passwords.owner), schema }, outbox: { batchSize: batch } });
      const d = new PostgresDriver({ config, url: roleUrl(OWNER, passwords.owner) });
      drivers.push(d);
      return d;
    };
    return { schema, driver };
  }

  /** Plants the functions `driver` would call, as the attacker, with QueueBox's comment. */
  async function plant(schema: string, driver: PostgresDriver): Promise<string[]> {
    const attacker = new pg.Client({ connectionString: roleUrl(ATTACKER, passwords.attacker) });
    await attacker.connect();
    try {
      for (const statement of driver.claimStatements()) {
        // QueueBox's exact DDL, plus one line of the attacker's: the call would log its runner.
        const ddl = claimFunctionDdl(driver.ctx.names, statement).replace('BEGIN\n', `BEGIN\n  INSERT INTO public."squat_log_${schema}" VALUES (current_user);\n`);
        assert.notEqual(ddl, claimFunctionDdl(driver.ctx.names, statement));
        assert.ok(ddl.includes(CLAIM_FUNCTION_COMMENT));
        await attacker.query(ddl);
      }
    } finally {
      await attacker.end();
    }
    return driver.claimStatements().map(claimFunctionName);
  }

  const ranAs = async (schema: string) => (await q(`SELECT ran_as FROM public."squat_log_${schema}"`)).map((r) => r.ran_as as string);
  const insertRows = (schema: string, n: number) => q(`INSERT INTO "${schema}".outbox (topic, payload) SELECT 't', jsonb_build_object('n', g) FROM generate_series(1, ${n}) g`);

  before(async () => {
    await q(`CREATE ROLE "${OWNER}" LOGIN PASSWORD '${passwords.owner}'; CREATE ROLE "${ATTACKER}" LOGIN PASSWORD '${passwords.attacker}'`);
    await q(`GRANT CREATE ON DATABASE "${new URL(testDatabaseUrl()).pathname.slice(1)}" TO "${OWNER}"`);
  });
  after(async () => {
    await Promise.all(drivers.map((d) => d.close().catch(() => {})));
    for (const schema of schemas) await q(`DROP SCHEMA IF EXISTS "${schema}" CASCADE; DROP TABLE IF EXISTS public."squat_log_${schema}"`);
    await q(`DROP OWNED BY "${OWNER}", "${ATTACKER}"; DROP ROLE "${OWNER}"; DROP ROLE "${ATTACKER}"`);
    await admin.end();
  });

  it('migrate refuses claim functions another role planted under their names with the right comment; nothing of them runs, nothing is dropped', async () => {
    const { schema, driver } = await setUp(10);
    await q(`GRANT CREATE ON SCHEMA "${schema}" TO "${ATTACKER}"`);
    const d = driver();
    const planted = await plant(schema, d);
    await assert.rejects(d.migrate(), (error: Error) => {
      assert.ok(error instanceof SchemaTrustError, String(error));
      assert.match(error.message, new RegExp(`role ${ATTACKER} may CREATE in schema ${schema}`));
      for (const name of planted) assert.match(error.message, new RegExp(`function ${schema}\\.${name}\\([a-z ,]+\\) belongs to role ${ATTACKER}`));
      return true;
    });
    // CREATE revoked, the planted functions remain: migrate still refuses them, and drops nothing of the attacker's.
    await q(`REVOKE CREATE ON SCHEMA "${schema}" FROM "${ATTACKER}"`);
    await assert.rejects(d.migrate(), new RegExp(`function ${schema}\\.${planted[0]}\\([a-z ,]+\\) belongs to role ${ATTACKER}`));
    const left = await q(`SELECT pg_get_userbyid(proowner) AS owner FROM pg_proc WHERE pronamespace = '"${schema}"'::regnamespace`);
    assert.deepEqual(left.map((r) => r.owner), [ATTACKER, ATTACKER]);
    assert.deepEqual(await ranAs(schema), []);
  });

  it('a claim never calls a function another role planted after the driver found the name missing, also after the retry interval', async () => {
    const { schema, driver } = await setUp(10);
    await driver().migrate();
    // Replicas at another batch size: their functions do not exist yet.
    const d = driver(20);
    let clock = 0;
    const warnings: ClaimFunctionUnusable[] = [];
    Object.assign(d.ctx, { claimFunctions: { ...newClaimFunctionState({ retryMs: 1_000, now: () => clock, verify: d.ctx.claimFunctions!.verify! }), warn: (e: ClaimFunctionUnusable) => warnings.push(e) } });
    // Each statement sent once already: the next claim verifies its function (a first claim verifies nothing).
    sentOnce(d);
    await insertRows(schema, 20);
    assert.equal((await d.outboxClaimMany({ limit: 20, leaseMs: LEASE })).length, 20);
    assert.deepEqual(warnings.map((w) => w.code), ['42883']);
    // The attacker plants them; CREATE is then revoked, so only the functions' owner gives them away.
    await q(`GRANT CREATE ON SCHEMA "${schema}" TO "${ATTACKER}"`);
    const planted = await plant(schema, d);
    await q(`REVOKE CREATE ON SCHEMA "${schema}" FROM "${ATTACKER}"`);
    clock = 1_000;
    await insertRows(schema, 20);
    assert.equal((await d.outboxClaimMany({ limit: 20, leaseMs: LEASE })).length, 20, 'the statement claims the rows');
    const fresh = sentOnce(driver(20));
    await insertRows(schema, 5);
    assert.equal((await fresh.outboxClaimMany({ limit: 20, leaseMs: LEASE })).length, 5);
    assert.deepEqual(await ranAs(schema), [], 'nothing of the attacker ran');
    assert.equal(warnings[1]!.code, 'foreign');
    assert.equal(warnings[1]!.owner, ATTACKER);
    assert.ok(planted.includes(warnings[1]!.function));
    assert.match(warnings[1]!.error, new RegExp(`belongs to role ${ATTACKER}`));
    await assert.rejects(driver(20).migrate(), SchemaTrustError);
  });

  it("a new container's claims never call a planted function: the first sends its statement without looking, the second's verification refuses it", async () => {
    const { schema, driver } = await setUp(10);
    await driver().migrate();
    // Functions of batch size 20 do not exist: the attacker plants them, then loses CREATE.
    await q(`GRANT CREATE ON SCHEMA "${schema}" TO "${ATTACKER}"`);
    const planted = await plant(schema, driver(20));
    await q(`REVOKE CREATE ON SCHEMA "${schema}" FROM "${ATTACKER}"`);
    const d = driver(20);
    const warnings: ClaimFunctionUnusable[] = [];
    d.ctx.claimFunctions!.warn = (e) => warnings.push(e);
    for (let claim = 0; claim < 3; claim++) {
      await insertRows(schema, 20);
      assert.equal((await d.outboxClaimMany({ limit: 20, leaseMs: LEASE })).length, 20, `claim ${claim + 1}: the statement claims the rows`);
      assert.deepEqual(
        warnings.map((w) => w.code),
        claim === 0 ? [] : ['foreign'],
        `claim ${claim + 1}`,
      );
    }
    assert.ok(planted.includes(warnings[0]!.function));
    assert.deepEqual(await ranAs(schema), [], 'nothing of the attacker ran');
  });

  it('start-up refuses a schema that another role or PUBLIC may create in, and claims then call no function', async () => {
    const { schema, driver } = await setUp(10);
    await driver().migrate();
    await q(`GRANT CREATE ON SCHEMA "${schema}" TO "${ATTACKER}"`);
    const d = sentOnce(driver());
    await assert.rejects(d.schemaVerify(), new RegExp(`role ${ATTACKER} may CREATE in schema ${schema}: REVOKE CREATE ON SCHEMA ${schema} FROM ${ATTACKER}`));
    await insertRows(schema, 3);
    const warnings: ClaimFunctionUnusable[] = [];
    d.ctx.claimFunctions!.warn = (e) => warnings.push(e);
    assert.equal((await d.outboxClaimMany({ limit: 10, leaseMs: LEASE })).length, 3);
    assert.equal(warnings[0]?.code, 'schema');
    await q(`REVOKE CREATE ON SCHEMA "${schema}" FROM "${ATTACKER}"; GRANT CREATE ON SCHEMA "${schema}" TO PUBLIC`);
    await assert.rejects(driver().schemaVerify(), /PUBLIC \(every role\) may CREATE/);
    await q(`REVOKE CREATE ON SCHEMA "${schema}" FROM PUBLIC`);
    await driver().schemaVerify();
  });

  it('migrate does not adopt a table or sequence of its names that another role created first', async () => {
    const { schema, driver } = await setUp(10);
    await q(`GRANT CREATE ON SCHEMA "${schema}" TO "${ATTACKER}"`);
    const attacker = new pg.Client({ connectionString: roleUrl(ATTACKER, passwords.attacker) });
    await attacker.connect();
    try {
      await attacker.query(`CREATE SEQUENCE "${schema}".outbox_sequence_seq; CREATE TABLE "${schema}".outbox (id uuid PRIMARY KEY)`);
    } finally {
      await attacker.end();
    }
    await q(`REVOKE CREATE ON SCHEMA "${schema}" FROM "${ATTACKER}"`);
    await assert.rejects(driver().migrate(), (error: Error) => {
      assert.match(error.message, new RegExp(`table ${schema}\\.outbox belongs to role ${ATTACKER}, not to QueueBox`));
      assert.match(error.message, new RegExp(`sequence ${schema}\\.outbox_sequence_seq belongs to role ${ATTACKER}`));
      return true;
    });
    assert.deepEqual(await q(`SELECT 1 FROM pg_class WHERE relnamespace = '"${schema}"'::regnamespace AND relname = 'inbox'`), [], 'nothing was created');
  });
});
