/**
 * Code that runs as QueueBox without being in a claim function's name, against a real PostgreSQL
 * with two roles: a trigger that a role holding only the `TRIGGER` privilege on the outbox adds
 * (`GRANT ALL ON … TO app` includes it), and an operator planted in a schema on QueueBox's
 * `search_path` that an unqualified `varchar = 'literal'` of QueueBox's statements resolves to
 * (the `public` schema before PostgreSQL 15). Each first shows that the attacker's code does run
 * as QueueBox, then that start-up and `migrate` refuse, naming the grant or schema to fix.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { parseConfig } from '../../lib/config/load-config.ts';
import { PostgresDriver } from '../../lib/db/postgres/postgres-driver.ts';
import { SchemaTrustError } from '../../lib/errors.ts';
import { testDatabaseUrl } from '../helpers/database.ts';

const LEASE = 60_000;
const suffix = randomBytes(4).toString('hex');
const OWNER = `qb_paths_owner_${suffix}`;
const ATTACKER = `qb_paths_attacker_${suffix}`;
const SCHEMA = `qb_paths_${suffix}`;
const OPEN = `qb_paths_open_${suffix}`;
const LOG = `public."qb_paths_log_${suffix}"`;

function roleUrl(role: string, password: string): string {
  const url = new URL(testDatabaseUrl());
  url.username = role;
  url.password = password;
  return url.toString();
}

describe('code that runs as QueueBox through triggers and search_path (PostgreSQL, two roles)', () => {
  const admin = new pg.Pool({ connectionString: testDatabaseUrl(), max: 2 });
  const passwords = { owner: randomBytes(12).toString('hex'), attacker: randomBytes(12).toString('hex') };
  const drivers: PostgresDriver[] = [];
  const q = async (text: string) => (await admin.query(text)).rows;
  const ranAs = async () => (await q(`SELECT DISTINCT ran_as FROM ${LOG}`)).map((r) => r.ran_as as string);
  const driver = () => {
    const config = parseConfig({ database: { url: roleUrl(OWNER, passwords.owner), schema: SCHEMA }, outbox: { batchSize: 10 } });
    const d = new PostgresDriver({ config, url: roleUrl(OWNER, passwords.owner) });
    drivers.push(d);
    return d;
  };
  async function asAttacker(sql: string): Promise<void> {
    const attacker = new pg.Client({ connectionString: roleUrl(ATTACKER, passwords.attacker) });
    await attacker.connect();
    try {
      await attacker.query(sql);
    } finally {
      await attacker.end();
    }
  }
  async function claimAndReset(): Promise<void> {
    await q(`INSERT INTO "${SCHEMA}".outbox (topic, payload) VALUES ('t', '{}')`);
    assert.equal((await driver().outboxClaimMany({ limit: 10, leaseMs: LEASE })).length, 1);
    await q(`DELETE FROM "${SCHEMA}".outbox`);
  }

  before(async () => {
    await q(`CREATE ROLE "${OWNER}" LOGIN PASSWORD '${passwords.owner}'; CREATE ROLE "${ATTACKER}" LOGIN PASSWORD '${passwords.attacker}'`);
    await q(`GRANT CREATE ON DATABASE "${new URL(testDatabaseUrl()).pathname.slice(1)}" TO "${OWNER}"`);
    await q(`CREATE SCHEMA "${SCHEMA}" AUTHORIZATION "${OWNER}"; GRANT USAGE ON SCHEMA "${SCHEMA}" TO "${ATTACKER}"`);
    await q(`CREATE SCHEMA "${OPEN}"; GRANT USAGE, CREATE ON SCHEMA "${OPEN}" TO "${ATTACKER}", "${OWNER}"`);
    await q(`CREATE TABLE ${LOG} (ran_as text NOT NULL); GRANT INSERT ON ${LOG} TO PUBLIC`);
    await driver().migrate();
  });
  after(async () => {
    await Promise.all(drivers.map((d) => d.close().catch(() => {})));
    await q(`DROP SCHEMA IF EXISTS "${SCHEMA}" CASCADE; DROP SCHEMA IF EXISTS "${OPEN}" CASCADE; DROP TABLE IF EXISTS ${LOG}`);
    await q(`DROP OWNED BY "${OWNER}", "${ATTACKER}"; DROP ROLE "${OWNER}"; DROP ROLE "${ATTACKER}"`);
    await admin.end();
  });

  it('a role that may add triggers to the outbox is refused, and so is a trigger whose function another role owns', async () => {
    await q(`GRANT ALL ON "${SCHEMA}".outbox TO "${ATTACKER}"`);
    await asAttacker(`CREATE FUNCTION "${OPEN}".spy() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN INSERT INTO ${LOG} VALUES (current_user); RETURN NEW; END$$;
      CREATE TRIGGER spy BEFORE UPDATE ON "${SCHEMA}".outbox FOR EACH ROW EXECUTE FUNCTION "${OPEN}".spy()`);
    await claimAndReset();
    assert.deepEqual(await ranAs(), [OWNER], 'the trigger ran as QueueBox');
    const refused = (error: Error) => {
      assert.ok(error instanceof SchemaTrustError, String(error));
      assert.match(error.message, new RegExp(`role ${ATTACKER} may create triggers on table ${SCHEMA}\\.outbox: REVOKE TRIGGER ON ${SCHEMA}\\.outbox FROM ${ATTACKER}`));
      assert.match(error.message, new RegExp(`trigger spy on table ${SCHEMA}\\.outbox runs function ${OPEN}\\.spy\\(\\) of role ${ATTACKER}`));
      return true;
    };
    await assert.rejects(driver().schemaVerify(), refused);
    await assert.rejects(driver().migrate(), refused);
    // The privilege revoked, the trigger it left is still refused.
    await q(`REVOKE TRIGGER ON "${SCHEMA}".outbox FROM "${ATTACKER}"`);
    await assert.rejects(driver().schemaVerify(), new RegExp(`trigger spy on table ${SCHEMA}\\.outbox runs function`));
    await q(`DROP TRIGGER spy ON "${SCHEMA}".outbox; REVOKE ALL ON "${SCHEMA}".outbox FROM "${ATTACKER}"; TRUNCATE ${LOG}`);
    await driver().schemaVerify();
  });

  it('a schema on QueueBox\'s search_path that another role may create in is refused: an operator planted there runs in every claim', async () => {
    await q(`ALTER ROLE "${OWNER}" SET search_path = "$user", "${OPEN}"`);
    try {
      // An exact match for varchar = varchar (pg_catalog has only text = text): it wins the resolution.
      await asAttacker(`CREATE FUNCTION "${OPEN}".eq(varchar, varchar) RETURNS boolean LANGUAGE plpgsql AS $$BEGIN INSERT INTO ${LOG} VALUES (current_user); RETURN $1::text = $2::text; END$$;
        CREATE OPERATOR "${OPEN}".= (LEFTARG = varchar, RIGHTARG = varchar, FUNCTION = "${OPEN}".eq)`);
      await claimAndReset();
      assert.deepEqual(await ranAs(), [OWNER], 'the operator ran as QueueBox');
      const refused = new RegExp(`role ${ATTACKER} may CREATE in schema ${OPEN}, which is on QueueBox's search_path: REVOKE CREATE ON SCHEMA ${OPEN} FROM ${ATTACKER}`);
      await assert.rejects(driver().schemaVerify(), refused);
      await assert.rejects(driver().migrate(), refused);
      await q(`REVOKE CREATE ON SCHEMA "${OPEN}" FROM "${ATTACKER}"`);
      await driver().schemaVerify();
      // A schema of the path that the attacker owns (as one named after QueueBox's role, for "$user", would be).
      await q(`ALTER SCHEMA "${OPEN}" OWNER TO "${ATTACKER}"`);
      await assert.rejects(driver().schemaVerify(), new RegExp(`role ${ATTACKER} may CREATE in schema ${OPEN}, which is on QueueBox's search_path`));
      await q(`ALTER SCHEMA "${OPEN}" OWNER TO CURRENT_USER; REVOKE CREATE ON SCHEMA "${OPEN}" FROM "${ATTACKER}"`);
      await driver().schemaVerify();
    } finally {
      await q(`ALTER ROLE "${OWNER}" RESET search_path`);
    }
  });
});
