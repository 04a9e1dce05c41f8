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
  // A sequence counts the calls: a refusal rolls back an INSERT the planted function made, not nextval.
  const ran = async () => Number((await admin.query(`SELECT last_value, is_called FROM "${EVIL}".calls`)).rows.map((r) => (r.is_called ? r.last_value : 0))[0]);

  before(async () => {
    await admin.query(`CREATE ROLE "${ATTACKER}"`);
    await admin.query(`CREATE SCHEMA "${EVIL}" AUTHORIZATION "${ATTACKER}"`);
    await admin.query(`GRANT USAGE ON SCHEMA "${EVIL}" TO PUBLIC`);
    await admin.query(`CREATE SEQUENCE "${EVIL}".calls`);
    await admin.query(`GRANT USAGE ON SEQUENCE "${EVIL}".calls TO PUBLIC`);
    await admin.query(`ALTER SEQUENCE "${EVIL}".calls OWNER TO "${ATTACKER}"`);
    await admin.query(`SET ROLE "${ATTACKER}"`);
    try {
      for (const args of ['text, oid, text', 'oid, oid, text']) {
        await admin.query(
          `CREATE FUNCTION "${EVIL}".has_schema_privilege(${args}) RETURNS boolean LANGUAGE sql AS $f$ SELECT pg_catalog.nextval('"${EVIL}".calls') IS NULL $f$`,
        );
      }
      await admin.query(`CREATE FUNCTION "${EVIL}".gen_random_uuid() RETURNS uuid LANGUAGE sql AS $f$ SELECT pg_catalog.nextval('"${EVIL}".calls'); SELECT pg_catalog.gen_random_uuid() $f$`);
      // Exact argument types win over pg_catalog's wherever the schema stands on the path.
      await admin.query(`CREATE FUNCTION "${EVIL}".quote_ident(name) RETURNS text LANGUAGE sql AS $f$ SELECT pg_catalog.nextval('"${EVIL}".calls'); SELECT pg_catalog.quote_ident($1::text) $f$`);
      await admin.query(`CREATE FUNCTION "${EVIL}".hashtext(text) RETURNS integer LANGUAGE sql AS $f$ SELECT pg_catalog.nextval('"${EVIL}".calls'); SELECT pg_catalog.hashtext($1) $f$`);
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
    assert.equal(await ran(), 0, 'no planted function ran');
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
    assert.equal(await ran(), 0, 'no planted function ran');
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
    assert.equal(await ran(), 0, 'no planted function ran');
  });

  it('with the schema after pg_catalog, the trust check refuses it (the attacker may CREATE there): migrate and start-up, none of its functions run', async () => {
    const after = urlWithPath(`pg_catalog,${EVIL}`);
    const driver = new PostgresDriver({ config: parseConfig({ database: { url: after, schema: SCHEMA } }), url: after });
    try {
      await assert.rejects(driver.migrate(), (error: Error) => error instanceof SchemaTrustError && error.message.includes(`may CREATE in schema ${EVIL}, which is on QueueBox's search_path`));
      await assert.rejects(driver.schemaVerify(), (error: Error) => error instanceof SchemaTrustError);
    } finally {
      await driver.close();
    }
    assert.equal(await ran(), 0, 'quote_ident(name), an exact match, never ran in the check');
  });
});
