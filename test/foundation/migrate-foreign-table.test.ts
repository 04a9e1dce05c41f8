/**
 * A schema that already holds a table of one of QueueBox's names that is not QueueBox's (an
 * application's own `outbox`, a view): `CREATE TABLE IF NOT EXISTS` skipped it and the next
 * statement failed on a column it lacks (`column "sequence" … does not exist`), while `--check` and
 * start-up asked for `migrate` for ever. `migrate`, the `--sql` script, `--check` and start-up now
 * name the relation in the way and the `tables.<name>` key that chooses another name; nothing is
 * written. A QueueBox table that lost a column after its migration is still a missing column.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { pgMigrationScript } from '../../lib/db/postgres/migration-script.ts';
import { PostgresDriver } from '../../lib/db/postgres/postgres-driver.ts';
import { QueueBoxError, SchemaMismatchError } from '../../lib/errors.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';

describe('migrate refuses a table of QueueBox\'s name that is not QueueBox\'s', { timeout: 120_000 }, () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase();
  });
  after(async () => db.drop());

  const relations = async (schema: string) =>
    (await db.query<{ relname: string }>(`SELECT relname FROM pg_class WHERE relnamespace = to_regnamespace($1) ORDER BY 1`, [`"${schema}"`])).map((r) => r.relname);

  it('an application\'s own outbox: migrate, the script, --check and start-up name it and tables.outbox; nothing is created', async () => {
    const schema = `${db.schema}_app`;
    const driver = new PostgresDriver({ config: { ...db.config, database: { ...db.config.database, schema } }, url: db.url });
    try {
      await db.query(`CREATE SCHEMA "${schema}";
        CREATE TABLE "${schema}".outbox (id bigserial PRIMARY KEY, topic text NOT NULL, payload jsonb NOT NULL, published boolean NOT NULL DEFAULT false);
        INSERT INTO "${schema}".outbox (topic, payload) VALUES ('a', '{}'), ('b', '{}')`);
      const before = await relations(schema);
      const line =
        `table "${schema}"."outbox" already exists and is not QueueBox's outbox table: it has no column key, headers, state, attempt, max_attempts, scheduled_at, created_at, updated_at, claimed_at, claim_token, lease_expires_at, last_error, sequence, replay_count ` +
        `(an application's own table of that name?). migrate creates no table over it: set tables.outbox to a name not in use in schema "${schema}" (or database.schema to another schema)`;
      await assert.rejects(driver.migrate(), (error: unknown) => {
        assert.ok(error instanceof QueueBoxError, String(error));
        assert.equal(error.message, `migrate refused, nothing changed:\n- ${line}`);
        return true;
      });
      assert.deepEqual(await relations(schema), before, 'nothing created (no queuebox_migrations, no sequence)');
      await assert.rejects(db.query(pgMigrationScript(driver.ctx.names, driver.claimStatements())), (error: Error) => error.message === `QueueBox refuses to migrate schema ${schema}: ${line}`);
      assert.deepEqual(await relations(schema), before, 'the script created nothing either');
      assert.deepEqual(await driver.migrateCheck(), [line]);
      await assert.rejects(driver.schemaVerify(), (error: unknown) => {
        assert.ok(error instanceof QueueBoxError && !(error instanceof SchemaMismatchError), String(error));
        assert.ok(error.message.includes(line), error.message);
        assert.doesNotMatch(error.message, /run `queuebox migrate`/, 'no loop: migrate would refuse');
        return true;
      });
      assert.deepEqual((await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${schema}".outbox`))[0]!.n, 2, 'the application\'s rows are untouched');

      // Another name for QueueBox's outbox: migrate goes through beside the application's table.
      const renamed = new PostgresDriver({ config: { ...db.config, database: { ...db.config.database, schema }, tables: { ...db.config.tables, outbox: 'queuebox_outbox' } }, url: db.url });
      try {
        assert.ok((await renamed.migrate()).applied.includes(1));
        assert.deepEqual(await renamed.migrateCheck(), []);
      } finally {
        await renamed.close();
      }
    } finally {
      await driver.close();
      await db.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    }
  });

  it('a view named like the inbox is named as a view; a QueueBox table that lost a column is still a missing column', async () => {
    const schema = `${db.schema}_view`;
    const driver = new PostgresDriver({ config: { ...db.config, database: { ...db.config.database, schema } }, url: db.url });
    try {
      await db.query(`CREATE SCHEMA "${schema}"; CREATE VIEW "${schema}".inbox AS SELECT 1 AS x`);
      const line =
        `relation "${schema}"."inbox" already exists as a view, not QueueBox's inbox table ` +
        `(an application's own relation of that name?). migrate creates no table over it: set tables.inbox to a name not in use in schema "${schema}" (or database.schema to another schema)`;
      await assert.rejects(driver.migrate(), (error: unknown) => error instanceof QueueBoxError && error.message === `migrate refused, nothing changed:\n- ${line}`);
      assert.deepEqual(await driver.migrateCheck(), [line]);
      await db.query(`DROP VIEW "${schema}".inbox`);
      await driver.migrate();
      // Migration 1 recorded: a column dropped by hand afterwards is named with its ALTER TABLE, not as a foreign table.
      await db.query(`ALTER TABLE "${schema}".outbox DROP COLUMN replay_count`);
      assert.deepEqual(await driver.migrateCheck(), [`a column is missing: ALTER TABLE "${schema}"."outbox" ADD COLUMN "replay_count" integer NOT NULL DEFAULT 0;`]);
      await assert.rejects(driver.schemaVerify(), SchemaMismatchError);
      assert.deepEqual((await driver.migrate()).applied, []);
    } finally {
      await driver.close();
      await db.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    }
  });
});
