import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { pgMigrations } from '../../lib/db/postgres/migrations.ts';
import { PostgresDriver } from '../../lib/db/postgres/postgres-driver.ts';
import { SchemaMismatchError } from '../../lib/errors.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';

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
      assert.deepEqual(applied.sort(), pgMigrations.map((m) => m.version), 'each version applied by exactly one migrator');
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
        return true;
      });
    } finally {
      await db.pool.query(`ALTER TABLE "${db.schema}".outbox ADD COLUMN last_error text NULL`);
    }
    await db.driver.schemaVerify();
  });
});
