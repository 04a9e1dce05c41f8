/**
 * A connection whose `search_path` puts another role's schema before `pg_catalog`
 * (`search_path = their_schema, pg_catalog`): every unqualified function of QueueBox's
 * statements resolves there first — the schema trust check's own `has_schema_privilege`, and the
 * `gen_random_uuid()` that `migrate` stores as the id default. Before, the planted check answered
 * "no one may CREATE here", `migrate` ran the attacker's functions as its own role (a superuser
 * here) and stored one in the outbox's column default. Now `migrate`, the `--sql` script and
 * start-up refuse first, with a query that calls nothing unqualified, naming the schema, and none
 * of the planted functions runs.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { parseConfig } from '../../lib/config/load-config.ts';
import { pgMigrationScript } from '../../lib/db/postgres/migration-script.ts';
import { PostgresDriver } from '../../lib/db/postgres/postgres-driver.ts';
import { SchemaTrustError } from '../../lib/errors.ts';
import { testDatabaseUrl } from '../helpers/database.ts';

const suffix = randomBytes(4).toString('hex');
const ATTACKER = `qb_path_attacker_${suffix}`;
const EVIL = `qb_path_evil_${suffix}`;
const SCHEMA = `qb_path_${suffix}`;

/** The test database's URL with `search_path` set as a connection option. */
function urlWithPath(path: string): string {
  const url = new URL(testDatabaseUrl());
  url.searchParams.set('options', `-c search_path=${path}`);
  return url.toString();
}

describe('a search_path that puts another role\'s schema before pg_catalog (PostgreSQL)', () => {
  const admin = new pg.Pool({ connectionString: testDatabaseUrl(), max: 2 });
  const url = urlWithPath(`${EVIL},pg_catalog`);
  const config = parseConfig({ database: { url, schema: SCHEMA } });
  const ran = async () => (await admin.query(`SELECT what FROM "${EVIL}".ran`)).rows.map((r) => r.what as string);

  before(async () => {
    await admin.query(`CREATE ROLE "${ATTACKER}"`);
    await admin.query(`CREATE SCHEMA "${EVIL}" AUTHORIZATION "${ATTACKER}"`);
    await admin.query(`GRANT USAGE ON SCHEMA "${EVIL}" TO PUBLIC`);
    await admin.query(`CREATE TABLE "${EVIL}".ran (what text)`);
    await admin.query(`GRANT INSERT ON "${EVIL}".ran TO PUBLIC`);
    await admin.query(`ALTER TABLE "${EVIL}".ran OWNER TO "${ATTACKER}"`);
    await admin.query(`SET ROLE "${ATTACKER}"`);
    try {
      for (const args of ['text, oid, text', 'oid, oid, text']) {
        await admin.query(
          `CREATE FUNCTION "${EVIL}".has_schema_privilege(${args}) RETURNS boolean LANGUAGE sql AS $f$ INSERT INTO "${EVIL}".ran VALUES ('has_schema_privilege'); SELECT false $f$`,
        );
      }
      await admin.query(`CREATE FUNCTION "${EVIL}".gen_random_uuid() RETURNS uuid LANGUAGE sql AS $f$ INSERT INTO "${EVIL}".ran VALUES ('gen_random_uuid'); SELECT pg_catalog.gen_random_uuid() $f$`);
    } finally {
      await admin.query('RESET ROLE');
    }
  });
  after(async () => {
    await admin.query(`DROP SCHEMA IF EXISTS "${SCHEMA}" CASCADE`);
    await admin.query(`DROP SCHEMA IF EXISTS "${EVIL}" CASCADE`);
    await admin.query(`DROP ROLE IF EXISTS "${ATTACKER}"`);
    await admin.end();
  });

  it('migrate refuses, naming the schema, and runs none of its functions', async () => {
    const driver = new PostgresDriver({ config, url });
    try {
      await assert.rejects(driver.migrate(), (error: Error) => error instanceof SchemaTrustError && error.message.includes(`the search_path puts schema "${EVIL}" before pg_catalog`));
    } finally {
      await driver.close();
    }
    assert.deepEqual(await ran(), [], 'no planted function ran');
    assert.equal((await admin.query(`SELECT 1 FROM pg_namespace WHERE nspname = $1`, [SCHEMA])).rowCount, 0, 'nothing was created');
  });

  it('the --sql script refuses the same way', async () => {
    const driver = new PostgresDriver({ config, url });
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      const script = pgMigrationScript(driver.ctx.names, driver.claimStatements());
      await client.query('BEGIN');
      await assert.rejects(client.query(script), new RegExp(`the search_path puts ${EVIL} before pg_catalog`));
      await client.query('ROLLBACK');
    } finally {
      await client.end();
      await driver.close();
    }
    assert.deepEqual(await ran(), [], 'no planted function ran');
  });

  it('start-up on a migrated schema refuses the same connection', async () => {
    const migrator = new PostgresDriver({ config: parseConfig({ database: { url: testDatabaseUrl(), schema: SCHEMA } }), url: testDatabaseUrl() });
    try {
      await migrator.migrate();
    } finally {
      await migrator.close();
    }
    const driver = new PostgresDriver({ config, url });
    try {
      await assert.rejects(driver.schemaVerify(), (error: Error) => error.message.includes(`the search_path puts schema "${EVIL}" before pg_catalog`));
    } finally {
      await driver.close();
    }
    assert.deepEqual(await ran(), [], 'no planted function ran');
  });
});
