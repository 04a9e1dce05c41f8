/**
 * PostgreSQL names an index per schema: an index of the name of one of QueueBox's migration
 * indexes on another table (made by hand, or left by a schema migrated under a configuration whose
 * table names shared derived names) made the migration's `CREATE INDEX IF NOT EXISTS` skip
 * QueueBox's own, and `migrate` went through while the table went without it (claims much slower).
 * `--check` named it; `migrate` and the `--sql` script (through `pg` and `psql`) now refuse too,
 * changing nothing, with the same line: the index, the table it is on, the table it belongs to,
 * and what to run — rename or drop it, then migrate again (and, when the index's migration is
 * recorded, which migrate does not run again, its `CREATE INDEX`). Any other relation of the name
 * (a sequence) is refused the same way.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import { pgMigrationScript } from '../../lib/db/postgres/migration-script.ts';
import { pgMigrations } from '../../lib/db/postgres/migrations.ts';
import { PostgresDriver } from '../../lib/db/postgres/postgres-driver.ts';
import { QueueBoxError } from '../../lib/errors.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';

const psqlVersion = spawnSync('psql', ['--version'], { encoding: 'utf8' });
const noPsql = psqlVersion.error !== undefined ? `psql is not installed (${psqlVersion.error.message}): the test applies the script with psql as a user would` : false;

describe('migrate refuses an index name of its migrations that another table\'s index holds', { timeout: 180_000 }, () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase();
  });
  after(async () => db.drop());

  /** The schema's relations with, for an index, its table: what "nothing changed" compares. */
  const relations = async (schema: string) =>
    (
      await db.query<{ relation: string }>(
        `SELECT c.relname || ':' || c.relkind::text || COALESCE(' on ' || t.relname, '') AS relation
           FROM pg_class c LEFT JOIN pg_index i ON i.indexrelid = c.oid LEFT JOIN pg_class t ON t.oid = i.indrelid
          WHERE c.relnamespace = to_regnamespace($1) ORDER BY 1`,
        [`"${schema}"`],
      )
    ).map((r) => r.relation);
  const versions = async (schema: string) => (await db.query<{ version: number }>(`SELECT version FROM "${schema}".queuebox_migrations ORDER BY version`)).map((r) => r.version);
  /** The table (its name) an index of the schema is on (undefined: no index of the name). */
  const tableOf = async (schema: string, index: string) =>
    (await db.query<{ table: string }>(`SELECT t.relname AS table FROM pg_index i JOIN pg_class t ON t.oid = i.indrelid WHERE i.indexrelid = to_regclass($1)`, [`"${schema}"."${index}"`]))[0]?.table;
  /** The migration's own line that creates `index`, with `"<schema>"` for the schema. */
  const ddlOf = (driver: PostgresDriver, index: string) =>
    pgMigrations.flatMap((m) => m.sql(driver.ctx.names).split('\n')).find((line) => line.startsWith(`CREATE INDEX IF NOT EXISTS "${index}" `))!;
  function psql(script: string): { status: number | null; stderr: string } {
    return spawnSync('psql', ['-X', '-q', '-v', 'ON_ERROR_STOP=1', '--single-transaction', '-f', '-', db.url], { input: script, encoding: 'utf8' });
  }

  it('before the first migrate: an application index and a sequence under QueueBox\'s index names; migrate and the script refuse, create nothing; renamed, migrate goes through', { skip: noPsql }, async () => {
    const schema = `${db.schema}_app`;
    const s = `"${schema}"`;
    const driver = new PostgresDriver({ config: { ...db.config, database: { ...db.config.database, schema } }, url: db.url });
    try {
      await db.query(`CREATE SCHEMA ${s};
        CREATE TABLE ${s}.app_events (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT now());
        CREATE INDEX outbox_pending_idx ON ${s}.app_events (created_at);
        CREATE SEQUENCE ${s}.inbox_lease_idx`);
      const before = await relations(schema);
      const lines = [
        `index ${s}."outbox_pending_idx" is on table ${s}."app_events", not ${s}."outbox": migration 1 would find the name taken and skip the index of ${s}."outbox", which would go without it; ` +
          `rename or drop that index (ALTER INDEX ${s}."outbox_pending_idx" RENAME TO …), then migrate again`,
        `relation ${s}."inbox_lease_idx" is a sequence, not an index of ${s}."inbox": migration 1 would find the name taken and skip the index of ${s}."inbox", which would go without it; ` +
          `rename or drop that sequence (ALTER SEQUENCE ${s}."inbox_lease_idx" RENAME TO …), then migrate again`,
      ];
      await assert.rejects(driver.migrate(), (error: unknown) => {
        assert.ok(error instanceof QueueBoxError, String(error));
        assert.equal(error.message, `migrate refused, nothing changed:\n${lines.map((l) => `- ${l}`).join('\n')}`);
        return true;
      });
      assert.deepEqual(await relations(schema), before, 'migrate created nothing (no queuebox_migrations, no table)');

      const script = pgMigrationScript(driver.ctx.names, driver.claimStatements());
      await assert.rejects(db.query(script), (error: Error) => error.message === `QueueBox refuses to migrate schema ${schema}: ${lines.join('\n')}`);
      const applied = psql(script);
      assert.notEqual(applied.status, 0, 'psql refuses too');
      assert.ok(applied.stderr.includes(`QueueBox refuses to migrate schema ${schema}: ${lines.join('\n')}`), applied.stderr);
      assert.deepEqual(await relations(schema), before, 'the script created nothing');

      const check = await driver.migrateCheck();
      for (const line of lines) assert.ok(check.includes(line), `--check names it:\n${check.join('\n')}`);

      // The fix the lines give: rename, then migrate again.
      await db.query(`ALTER INDEX ${s}.outbox_pending_idx RENAME TO app_events_created_idx; ALTER SEQUENCE ${s}.inbox_lease_idx RENAME TO app_counter`);
      assert.deepEqual((await driver.migrate()).applied, pgMigrations.map((m) => m.version));
      assert.equal(await tableOf(schema, 'outbox_pending_idx'), 'outbox', 'the outbox has its own index');
      assert.equal(await tableOf(schema, 'inbox_lease_idx'), 'inbox', 'the inbox has its own index');
      assert.equal(await tableOf(schema, 'app_events_created_idx'), 'app_events', 'the application\'s index is untouched');
      assert.deepEqual(await driver.migrateCheck(), []);
    } finally {
      await driver.close();
      await db.query(`DROP SCHEMA IF EXISTS ${s} CASCADE`);
    }
  });

  it('after a full migrate: QueueBox\'s index dropped and its name given to another table\'s; migrate and the script refuse, applying nothing; renamed and created, they go through', { skip: noPsql }, async () => {
    const s = `"${db.schema}"`;
    // Migration 10 not yet applied (an upgrade), and its index's name taken as well: the line of a
    // migration to run says "migrate again", the line of a recorded one gives its CREATE INDEX.
    await db.query(`DELETE FROM ${s}.queuebox_migrations WHERE version = 10; DROP INDEX ${s}.outbox_key_busy_idx;
      DROP INDEX ${s}.inbox_push_pending_idx;
      CREATE TABLE ${s}.app_events (id bigserial PRIMARY KEY, kind text NOT NULL, created_at timestamptz NOT NULL DEFAULT now());
      CREATE INDEX inbox_push_pending_idx ON ${s}.app_events (created_at);
      CREATE INDEX outbox_key_busy_idx ON ${s}.app_events (kind)`);
    const before = { relations: await relations(db.schema), versions: await versions(db.schema) };
    assert.deepEqual(before.versions, [1, 2, 3, 4, 6, 7, 8, 9]);
    const ddl = ddlOf(db.driver, 'inbox_push_pending_idx');
    assert.match(ddl, new RegExp(`^CREATE INDEX IF NOT EXISTS "inbox_push_pending_idx" ON ${s}\\."inbox" \\(`));
    const lines = [
      `index ${s}."inbox_push_pending_idx" is on table ${s}."app_events", not ${s}."inbox": migration 1 found the name taken and skipped the index of ${s}."inbox", which goes without it; ` +
        `rename or drop that index (ALTER INDEX ${s}."inbox_push_pending_idx" RENAME TO …), then create the index (migration 1 is recorded, so migrate does not run it again) and migrate again: ${ddl}`,
      `index ${s}."outbox_key_busy_idx" is on table ${s}."app_events", not ${s}."outbox": migration 10 would find the name taken and skip the index of ${s}."outbox", which would go without it; ` +
        `rename or drop that index (ALTER INDEX ${s}."outbox_key_busy_idx" RENAME TO …), then migrate again`,
    ];
    await assert.rejects(db.driver.migrate(), (error: unknown) => {
      assert.ok(error instanceof QueueBoxError, String(error));
      assert.equal(error.message, `migrate refused, nothing changed:\n${lines.map((l) => `- ${l}`).join('\n')}`);
      return true;
    });
    assert.deepEqual({ relations: await relations(db.schema), versions: await versions(db.schema) }, before, 'migration 10 not applied, no index created');

    const script = pgMigrationScript(db.driver.ctx.names, db.driver.claimStatements());
    await assert.rejects(db.query(script), (error: Error) => error.message === `QueueBox refuses to migrate schema ${db.schema}: ${lines.join('\n')}`);
    const refused = psql(script);
    assert.notEqual(refused.status, 0, 'psql refuses too');
    assert.ok(refused.stderr.includes(`QueueBox refuses to migrate schema ${db.schema}: ${lines.join('\n')}`), refused.stderr);
    assert.deepEqual({ relations: await relations(db.schema), versions: await versions(db.schema) }, before, 'the script applied nothing');

    // --check gives the same lines (and the migration to apply).
    assert.deepEqual(await db.driver.migrateCheck(), ['migration 10 (keys of the outbox rows in flight) is not applied', ...lines]);

    // The fix the lines give: rename both, create the recorded migration's index, migrate again (here: the script, with psql).
    await db.query(`ALTER INDEX ${s}.inbox_push_pending_idx RENAME TO app_events_created_idx; ALTER INDEX ${s}.outbox_key_busy_idx RENAME TO app_events_kind_idx`);
    await db.query(ddl);
    const applied = psql(script);
    assert.equal(applied.status, 0, applied.stderr);
    assert.deepEqual(await versions(db.schema), [1, 2, 3, 4, 6, 7, 8, 9, 10]);
    assert.equal(await tableOf(db.schema, 'inbox_push_pending_idx'), 'inbox');
    assert.equal(await tableOf(db.schema, 'outbox_key_busy_idx'), 'outbox');
    assert.equal(await tableOf(db.schema, 'app_events_kind_idx'), 'app_events', 'the application\'s indexes are untouched');
    assert.deepEqual(await db.driver.migrateCheck(), []);
    assert.deepEqual((await db.driver.migrate()).applied, []);
  });
});
