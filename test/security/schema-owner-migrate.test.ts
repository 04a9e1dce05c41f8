/**
 * `migrate` as the schema owner docs/security.md recommends (`CREATE SCHEMA queuebox AUTHORIZATION
 * queuebox_owner`), with the owner holding no CREATE on the database: PostgreSQL's default, and
 * the usual RDS setup where a DBA creates the schema for the role. `CREATE SCHEMA IF NOT EXISTS`
 * checks the database privilege before it looks for the schema, so `migrate` and the `--sql`
 * script must create the schema only when it is missing. Checked through the driver, the CLI, and
 * the script applied by `psql` as the owner, on an empty owned schema and an up-to-date one.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { parseConfig } from '../../lib/config/load-config.ts';
import { migrationScript } from '../../lib/db/migration-script.ts';
import { PostgresDriver } from '../../lib/db/postgres/postgres-driver.ts';
import { testDatabaseUrl } from '../helpers/database.ts';
import { runTsx } from '../helpers/run-tsx.ts';

const suffix = randomBytes(4).toString('hex');
const OWNER = `qb_schema_owner_${suffix}`;
const SCHEMA = `qb_owned_${suffix}`;
const MISSING = `qb_owned_missing_${suffix}`;

const psqlVersion = spawnSync('psql', ['--version'], { encoding: 'utf8' });
const noPsql = psqlVersion.error !== undefined ? `psql is not installed (${psqlVersion.error.message}): the test applies the script with psql as a user would` : false;

describe('migrate as the owner of its schema, without CREATE on the database (PostgreSQL)', { timeout: 180_000 }, () => {
  const admin = new pg.Pool({ connectionString: testDatabaseUrl(), max: 2 });
  const password = randomBytes(12).toString('hex');
  const database = new URL(testDatabaseUrl()).pathname.slice(1);
  const ownerUrl = (() => {
    const url = new URL(testDatabaseUrl());
    url.username = OWNER;
    url.password = password;
    return url.toString();
  })();
  const config = (schema: string) => parseConfig({ database: { url: ownerUrl, schema }, outbox: { batchSize: 10 } });
  const drivers: PostgresDriver[] = [];
  const driver = (schema = SCHEMA) => {
    const d = new PostgresDriver({ config: config(schema), url: ownerUrl });
    drivers.push(d);
    return d;
  };
  const q = async (text: string, values?: unknown[]) => (await admin.query(text, values)).rows;
  const tables = async () => (await q(`SELECT tablename FROM pg_tables WHERE schemaname = $1 ORDER BY 1`, [SCHEMA])).map((r) => r.tablename as string);
  async function ownedEmptySchema(): Promise<void> {
    await q(`DROP SCHEMA IF EXISTS "${SCHEMA}" CASCADE; CREATE SCHEMA "${SCHEMA}" AUTHORIZATION "${OWNER}"`);
  }
  function psqlAsOwner(script: string): { status: number | null; stderr: string } {
    const result = spawnSync('psql', ['-X', '-q', '-v', 'ON_ERROR_STOP=1', '--single-transaction', '-f', '-', ownerUrl], { input: script, encoding: 'utf8' });
    return { status: result.status, stderr: result.stderr };
  }

  before(async () => {
    await q(`CREATE ROLE "${OWNER}" LOGIN PASSWORD '${password}'`);
    // Explicit, so the test holds on a server whose PUBLIC was granted CREATE on databases.
    await q(`REVOKE CREATE ON DATABASE "${database}" FROM "${OWNER}", PUBLIC`);
    await ownedEmptySchema();
  });
  after(async () => {
    await Promise.all(drivers.map((d) => d.close().catch(() => {})));
    await q(`DROP SCHEMA IF EXISTS "${SCHEMA}" CASCADE; DROP SCHEMA IF EXISTS "${MISSING}" CASCADE`);
    await q(`DROP OWNED BY "${OWNER}"; DROP ROLE "${OWNER}"`);
    await admin.end();
  });

  it('the owner has no CREATE on the database but may create in its schema (the setup under test)', async () => {
    const [row] = await q(`SELECT has_database_privilege($1, $2, 'CREATE') AS on_database, has_schema_privilege($1, $3, 'CREATE') AS on_schema`, [OWNER, database, SCHEMA]);
    assert.deepEqual(row, { on_database: false, on_schema: true });
  });

  it('migrate applies every migration to the empty owned schema, then finds it up to date; --check agrees', async () => {
    await ownedEmptySchema();
    const first = await driver().migrate();
    assert.ok(first.applied.length > 0 && first.applied.includes(1), `applied ${first.applied.join(', ')}`);
    assert.deepEqual(await tables(), ['inbox', 'outbox', 'queuebox_maintenance', 'queuebox_migrations']);
    const again = await driver().migrate();
    assert.deepEqual(again.applied, [], 'nothing left to apply');
    assert.deepEqual(await driver().migrateCheck(), []);
    await driver().schemaVerify();
  });

  it('the CLI migrate as the owner on an up-to-date schema says so and exits 0', async () => {
    const env = { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/tmp', DATABASE_URL: ownerUrl, QUEUEBOX_DATABASE__SCHEMA: SCHEMA, QUEUEBOX_OUTBOX__BATCH_SIZE: '10' };
    const migrate = await runTsx(['bin/queuebox.ts', 'migrate'], env, 60_000);
    assert.deepEqual([migrate.code, migrate.stdout], [0, 'schema is up to date\n'], migrate.stderr);
  });

  it('the --sql script applied by psql as the owner migrates the empty owned schema, and again changes nothing', { skip: noPsql }, async () => {
    await ownedEmptySchema();
    const script = migrationScript(config(SCHEMA));
    const applied = psqlAsOwner(script);
    assert.equal(applied.status, 0, applied.stderr);
    assert.deepEqual(await tables(), ['inbox', 'outbox', 'queuebox_maintenance', 'queuebox_migrations']);
    assert.deepEqual(await driver().migrateCheck(), [], 'migrate --check agrees with the script');
    const again = psqlAsOwner(script);
    assert.equal(again.status, 0, again.stderr);
    assert.deepEqual(await driver().migrateCheck(), []);
  });

  it('a missing schema is still created by a role that may (and refused, naming the database, for one that may not)', { skip: noPsql }, async () => {
    await assert.rejects(driver(MISSING).migrate(), /permission denied for database/);
    const refused = psqlAsOwner(migrationScript(config(MISSING)));
    assert.notEqual(refused.status, 0);
    assert.match(refused.stderr, /permission denied for database/);
    const created = new PostgresDriver({ config: parseConfig({ database: { url: testDatabaseUrl(), schema: MISSING }, outbox: { batchSize: 10 } }), url: testDatabaseUrl() });
    drivers.push(created);
    assert.ok((await created.migrate()).applied.includes(1));
    assert.equal((await q(`SELECT count(*)::int AS n FROM pg_namespace WHERE nspname = $1`, [MISSING]))[0]!.n, 1);
  });
});
