/**
 * A test schema rebuilt as an older release's `migrate` left it: dropped, created again, and the
 * numbered PostgreSQL migrations up to `last` applied and recorded (for upgrade tests).
 */
import { pgMigrationsTableSql } from '../../lib/db/postgres/migration-script.ts';
import { pgMigrations } from '../../lib/db/postgres/migrations.ts';
import type { TestDatabase } from './database.ts';

export async function schemaAtMigration(db: TestDatabase, last: number): Promise<void> {
  const n = db.driver.ctx.names;
  await db.query(`DROP SCHEMA "${db.schema}" CASCADE`);
  await db.query(`CREATE SCHEMA "${db.schema}"`);
  await db.query(pgMigrationsTableSql(n));
  for (const migration of pgMigrations.filter((m) => m.version <= last)) {
    await db.query(migration.sql(n));
    await db.query(`INSERT INTO ${n.migrations} (version, name) VALUES ($1, $2)`, [migration.version, migration.name]);
  }
}
