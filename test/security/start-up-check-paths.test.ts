/**
 * The start-up check the Lambda functions run (`schemaVerify`: the schema's trust, row-level
 * security) also guards an application's own claims, against a real PostgreSQL with three roles:
 * a pull worker built on a pool (`createPullWorker({ pool, config })`) and a driver from
 * `createDriver` refuse a schema another role may create in before their first claim, with the
 * functions' `SchemaTrustError`. Row-level security on a QueueBox table, which makes the claims
 * of a role that does not own the table find nothing, silently, is refused the same way, naming
 * the table and the `ALTER TABLE` that fixes it.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { parseConfig } from '../../lib/config/load-config.ts';
import { createDriver } from '../../lib/db/create-driver.ts';
import { PostgresDriver } from '../../lib/db/postgres/postgres-driver.ts';
import { SchemaTrustError } from '../../lib/errors.ts';
import { createPullWorker } from '../../lib/pull/pull-worker.ts';
import { testDatabaseUrl } from '../helpers/database.ts';

const LEASE = 60_000;
const suffix = randomBytes(4).toString('hex');
const OWNER = `qb_start_owner_${suffix}`;
const APP = `qb_start_app_${suffix}`;
const ATTACKER = `qb_start_attacker_${suffix}`;
const SCHEMA = `qb_start_${suffix}`;

function roleUrl(role: string, password: string): string {
  const url = new URL(testDatabaseUrl());
  url.username = role;
  url.password = password;
  return url.toString();
}

describe('the start-up check before the first claim of a pull worker or a createDriver driver (PostgreSQL, three roles)', { timeout: 120_000 }, () => {
  const admin = new pg.Pool({ connectionString: testDatabaseUrl(), max: 2 });
  const password = randomBytes(12).toString('hex');
  const closers: Array<() => Promise<unknown>> = [];
  const q = async (text: string) => (await admin.query(text)).rows;
  const configFor = (role: string) =>
    parseConfig({
      database: { url: roleUrl(role, password), schema: SCHEMA, poolMax: 3 },
      inbox: { sources: { orders: { type: 'sqs', queueName: 'orders', consumption: 'pull' } } },
      observability: { logLevel: 'SILENT' },
    });
  const poolOf = (role: string) => {
    const pool = new pg.Pool({ connectionString: roleUrl(role, password), max: 3 });
    closers.push(() => pool.end());
    return pool;
  };
  const driverOf = (role: string) => {
    const driver = new PostgresDriver({ config: configFor(role), url: roleUrl(role, password) });
    closers.push(() => driver.close());
    return driver;
  };
  const handled: string[] = [];
  const workerOf = (role: string) =>
    createPullWorker({
      pool: poolOf(role),
      config: configFor(role),
      source: 'orders',
      handler: async (message) => void handled.push(message.id),
      metrics: false,
      logger: { warn: () => {}, error: () => {} },
    });
  const addPullRow = async () => {
    const [row] = await q(`INSERT INTO "${SCHEMA}".inbox (source, idempotency_key, aggregate_id, payload, consumption)
                           VALUES ('orders', 'idem-' || gen_random_uuid(), 'a-' || gen_random_uuid(), '{}', 'pull') RETURNING id`);
    return row.id as string;
  };
  const trustRefusal = (pattern: RegExp) => (error: unknown) => {
    assert.ok(error instanceof SchemaTrustError, `SchemaTrustError, got ${String(error)}`);
    assert.match(error.message, pattern);
    return true;
  };

  before(async () => {
    await q(`CREATE ROLE "${OWNER}" LOGIN PASSWORD '${password}'; CREATE ROLE "${APP}" LOGIN PASSWORD '${password}'; CREATE ROLE "${ATTACKER}" LOGIN PASSWORD '${password}'`);
    await q(`CREATE SCHEMA "${SCHEMA}" AUTHORIZATION "${OWNER}"`);
    await driverOf(OWNER).migrate();
    // The runtime role: not the tables' owner, so row-level security applies to it.
    await q(`GRANT USAGE ON SCHEMA "${SCHEMA}" TO "${APP}"; GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "${SCHEMA}" TO "${APP}"`);
  });
  after(async () => {
    for (const close of closers) await close().catch(() => {});
    await q(`DROP SCHEMA IF EXISTS "${SCHEMA}" CASCADE`);
    await q(`DROP OWNED BY "${OWNER}", "${APP}", "${ATTACKER}"; DROP ROLE "${OWNER}"; DROP ROLE "${APP}"; DROP ROLE "${ATTACKER}"`);
    await admin.end();
  });

  it('a pull worker on a pool, and a driver from createDriver, refuse a schema another role may create in before they claim', async () => {
    const id = await addPullRow();
    await q(`GRANT CREATE ON SCHEMA "${SCHEMA}" TO "${ATTACKER}"`);
    try {
      const refused = trustRefusal(new RegExp(`role ${ATTACKER} may CREATE in schema ${SCHEMA}: REVOKE CREATE ON SCHEMA ${SCHEMA} FROM ${ATTACKER}`));
      await assert.rejects(workerOf(APP).runOnce(), refused);
      await assert.rejects(workerOf(APP).start(), refused);
      const driver = await createDriver(configFor(APP), {});
      closers.push(() => driver.close());
      await assert.rejects(driver.pullClaimMany({ source: 'orders', limit: 10, leaseMs: LEASE }), refused);
      await assert.rejects(driver.outboxClaimMany({ limit: 10, leaseMs: LEASE }), refused);
      // Nothing was claimed: the row is still pending, no handler ran.
      assert.deepEqual(await q(`SELECT state, attempt FROM "${SCHEMA}".inbox WHERE id = '${id}'`), [{ state: 'pending', attempt: 0 }]);
      assert.deepEqual(handled, []);
      // A refusal is not remembered: once the grant is revoked the same driver claims.
      await q(`REVOKE CREATE ON SCHEMA "${SCHEMA}" FROM "${ATTACKER}"`);
      assert.deepEqual((await driver.pullClaimMany({ source: 'orders', limit: 10, leaseMs: LEASE })).map((r) => r.id), [id]);
    } finally {
      await q(`REVOKE CREATE ON SCHEMA "${SCHEMA}" FROM "${ATTACKER}"; DELETE FROM "${SCHEMA}".inbox`);
    }
    const next = await addPullRow();
    const summary = await workerOf(APP).runOnce();
    assert.equal(summary.completed, 1);
    assert.deepEqual(handled, [next]);
    handled.length = 0;
    await q(`DELETE FROM "${SCHEMA}".inbox`);
  });

  it('row-level security on a QueueBox table hides the backlog from a role that does not own it, and is refused by name', async () => {
    const id = await addPullRow();
    await q(`INSERT INTO "${SCHEMA}".outbox (topic, payload) VALUES ('t', '{}')`);
    await q(`ALTER TABLE "${SCHEMA}".inbox ENABLE ROW LEVEL SECURITY; ALTER TABLE "${SCHEMA}".outbox ENABLE ROW LEVEL SECURITY`);
    try {
      // What goes wrong without the check: no policy, so the runtime role sees no row and claims nothing, silently.
      const unchecked = driverOf(APP);
      assert.deepEqual(await unchecked.pullClaimMany({ source: 'orders', limit: 10, leaseMs: LEASE }), []);
      assert.deepEqual(await unchecked.outboxClaimMany({ limit: 10, leaseMs: LEASE }), []);

      const refused = trustRefusal(
        new RegExp(`row-level security is enabled on table ${SCHEMA}\\.inbox: .*never claimed, silently: ALTER TABLE ${SCHEMA}\\.inbox DISABLE ROW LEVEL SECURITY`),
      );
      await assert.rejects(driverOf(APP).schemaVerify(), refused);
      await assert.rejects(driverOf(APP).schemaVerify(), /row-level security is enabled on table \S+\.outbox: .*ALTER TABLE \S+\.outbox DISABLE ROW LEVEL SECURITY/);
      // Its header says what row-level security does, not that another role could plant objects.
      await assert.rejects(driverOf(APP).schemaVerify(), (e: unknown) => e instanceof Error && /row-level security on its tables would hide rows/.test(e.message) && !/plant/.test(e.message));
      await assert.rejects(workerOf(APP).runOnce(), refused);
      await assert.rejects(driverOf(OWNER).migrate(), refused);
      assert.deepEqual(await q(`SELECT state FROM "${SCHEMA}".inbox WHERE id = '${id}'`), [{ state: 'pending' }]);

      // Forced alone (it applies to the owner too once enabled): refused with the statement that undoes it.
      await q(`ALTER TABLE "${SCHEMA}".inbox DISABLE ROW LEVEL SECURITY; ALTER TABLE "${SCHEMA}".outbox DISABLE ROW LEVEL SECURITY; ALTER TABLE "${SCHEMA}".outbox FORCE ROW LEVEL SECURITY`);
      await assert.rejects(driverOf(APP).schemaVerify(), trustRefusal(new RegExp(`row-level security is forced on table ${SCHEMA}\\.outbox: .*ALTER TABLE ${SCHEMA}\\.outbox NO FORCE ROW LEVEL SECURITY`)));
      await q(`ALTER TABLE "${SCHEMA}".outbox ENABLE ROW LEVEL SECURITY`);
      await assert.rejects(
        driverOf(OWNER).schemaVerify(),
        trustRefusal(new RegExp(`row-level security is enabled and forced on table ${SCHEMA}\\.outbox: .*DISABLE ROW LEVEL SECURITY; ALTER TABLE ${SCHEMA}\\.outbox NO FORCE ROW LEVEL SECURITY`)),
      );
    } finally {
      await q(`ALTER TABLE "${SCHEMA}".inbox DISABLE ROW LEVEL SECURITY, NO FORCE ROW LEVEL SECURITY; ALTER TABLE "${SCHEMA}".outbox DISABLE ROW LEVEL SECURITY, NO FORCE ROW LEVEL SECURITY`);
    }
    await driverOf(APP).schemaVerify();
    await driverOf(OWNER).migrate();
    const summary = await workerOf(APP).runOnce();
    assert.equal(summary.completed, 1);
    assert.deepEqual(handled, [id]);
  });
});
