import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { handler as migrateHandler } from '../../functions/migrate.ts';
import { pgMigrations } from '../../lib/db/postgres/migrations.ts';
import { PostgresDriver } from '../../lib/db/postgres/postgres-driver.ts';
import { SchemaMismatchError, UsageError } from '../../lib/errors.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { fakeLambdaContext } from '../helpers/lambda-context.ts';

describe('migrations', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase();
  });
  after(async () => db.drop());

  it('apply once and then change nothing when run again', async () => {
    const again = await db.driver.migrate();
    assert.deepEqual(again.applied, []);
    const rows = await db.query<{ version: number }>(`SELECT version FROM "${db.schema}".queuebox_migrations ORDER BY version`);
    assert.deepEqual(rows.map((r) => r.version), pgMigrations.map((m) => m.version));
  });

  it('run concurrently from several drivers without error, applying each migration once', async () => {
    const schema = `${db.schema}_concurrent`;
    const config = { ...db.config, database: { ...db.config.database, schema } };
    const drivers = Array.from({ length: 5 }, () => new PostgresDriver({ config, url: db.url }));
    try {
      const results = await Promise.all(drivers.map((d) => d.migrate()));
      const applied = results.flatMap((r) => r.applied);
      assert.deepEqual(applied.sort((a, b) => a - b), pgMigrations.map((m) => m.version), 'each version applied by exactly one migrator');
      await drivers[0]!.schemaVerify();
    } finally {
      await Promise.all(drivers.map((d) => d.close()));
      await db.pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    }
  });

  it('stop start-up with the exact ALTER TABLE when a column is missing', async () => {
    await db.driver.schemaVerify();
    await db.pool.query(`ALTER TABLE "${db.schema}".outbox DROP COLUMN last_error`);
    try {
      await assert.rejects(db.driver.schemaVerify(), (error: unknown) => {
        assert.ok(error instanceof SchemaMismatchError);
        assert.deepEqual(error.statements, [`ALTER TABLE "${db.schema}"."outbox" ADD COLUMN "last_error" text NULL;`]);
        // The statements name what is missing; migrate is the fix (it also applies indexes and data changes).
        assert.match(error.message, /^The QueueBox tables are missing columns: run `queuebox migrate` \(or its script, `queuebox migrate --sql`\)\. Adding the columns alone would leave out/);
        return true;
      });
    } finally {
      await db.pool.query(`ALTER TABLE "${db.schema}".outbox ADD COLUMN last_error text NULL`);
    }
    await db.driver.schemaVerify();
  });

  it('the migrate function with {"check": true} changes nothing and names what is behind', async () => {
    const saved = { ...process.env };
    Object.assign(process.env, { QUEUEBOX_DATABASE_URL: db.url, QUEUEBOX_DATABASE__SCHEMA: db.schema });
    delete process.env.QUEUEBOX_CONFIG;
    try {
      const context = fakeLambdaContext({ functionName: 'queuebox-migrate', timeoutMs: 5000 });
      assert.deepEqual(await migrateHandler({ check: true }, context), { upToDate: true, problems: [] });
      await db.pool.query(`DELETE FROM "${db.schema}".queuebox_migrations WHERE version = 2`);
      assert.deepEqual(await migrateHandler({ check: true }, context), { upToDate: false, problems: ['migration 2 (pull head-of-aggregate index) is not applied'] });
      const rows = await db.query(`SELECT 1 FROM "${db.schema}".queuebox_migrations WHERE version = 2`);
      assert.equal(rows.length, 0, 'the check applied nothing');
      // A misspelled or mistyped check is refused before it reaches the database: never a migration.
      for (const typo of [{ Check: true }, { chekc: true }, { check: 'true' }, { check: 1 }, { check: true, dryRun: true }, [], 'check', 42]) {
        await assert.rejects(migrateHandler(typo, context), (error: unknown) => error instanceof UsageError && /^migrate: /.test(error.message) && /\{"check": true\}/.test(error.message), JSON.stringify(typo));
      }
      assert.equal((await db.query(`SELECT 1 FROM "${db.schema}".queuebox_migrations WHERE version = 2`)).length, 0, 'no typo applied anything');
      assert.deepEqual((await migrateHandler({}, context) as { applied: number[] }).applied, [2]);
      // No event (`osls invoke` without data) and {"check": false} apply the migrations too.
      for (const event of [undefined, null, '', { check: false }]) assert.deepEqual((await migrateHandler(event, context) as { applied: number[] }).applied, [], JSON.stringify(event));
    } finally {
      for (const name of Object.keys(process.env)) if (!(name in saved)) delete process.env[name];
      Object.assign(process.env, saved);
    }
  });

  it('--check names an index, a constraint, a default, NOT NULL or a column type changed by hand after the migrations, with the statement that restores it', async () => {
    const schema = `${db.schema}_drift`;
    const driver = new PostgresDriver({ config: { ...db.config, database: { ...db.config.database, schema } }, url: db.url });
    const o = `"${schema}"."outbox"`;
    try {
      await driver.migrate();
      assert.deepEqual(await driver.migrateCheck(), []);
      await db.pool.query(`DROP INDEX "${schema}".outbox_key_holder_in_flight_idx; ALTER TABLE ${o} DROP CONSTRAINT outbox_state_check;
        ALTER TABLE ${o} ALTER COLUMN sequence DROP DEFAULT; ALTER TABLE ${o} ALTER COLUMN topic DROP NOT NULL; ALTER TABLE ${o} ALTER COLUMN key TYPE text`);
      assert.deepEqual(await driver.migrateCheck(), [
        `index "${schema}"."outbox_key_holder_in_flight_idx" is missing: CREATE UNIQUE INDEX IF NOT EXISTS "outbox_key_holder_in_flight_idx" ON ${o} (key) WHERE state = 'processing' AND key <> '' AND key_first;`,
        `constraint "outbox_state_check" of table ${o} is missing (migration 1 creates it)`,
        `column ${o}."topic" is not varchar(255) NOT NULL: ALTER TABLE ${o} ALTER COLUMN "topic" SET NOT NULL;`,
        `column ${o}."key" is not varchar(255) NULL: ALTER TABLE ${o} ALTER COLUMN "key" TYPE varchar(255);`,
        `column ${o}."sequence" is not bigint NOT NULL DEFAULT nextval('"${schema}"."outbox_sequence_seq"'): ALTER TABLE ${o} ALTER COLUMN "sequence" SET DEFAULT nextval('"${schema}"."outbox_sequence_seq"');`,
      ]);
    } finally {
      await driver.close();
      await db.pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    }
  });
});
