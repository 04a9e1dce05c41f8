/**
 * What `migrate` (and `--check`, start-up and the `--sql` script) refuses instead of skipping:
 *
 * - an index of a migration left invalid by a failed `CREATE INDEX CONCURRENTLY`: it reads as
 *   present by name, so `CREATE INDEX IF NOT EXISTS` skipped it while the planner never used it;
 *   the refusal names it and the concurrent statements that rebuild it (docs/upgrading.md);
 * - a second QueueBox table set in one schema: `queuebox_migrations` records versions only, so the
 *   second configuration found every version recorded and never got its tables, with start-up and
 *   `--check` asking for `migrate` for ever.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { pgMigrationScript } from '../../lib/db/postgres/migration-script.ts';
import { PostgresDriver } from '../../lib/db/postgres/postgres-driver.ts';
import { QueueBoxError, SchemaMismatchError } from '../../lib/errors.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';

describe('migrate refuses what it would otherwise skip', { timeout: 120_000 }, () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase();
  });
  after(async () => db.drop());

  const versions = async (schema: string) => (await db.query<{ version: number }>(`SELECT version FROM "${schema}".queuebox_migrations ORDER BY version`)).map((r) => r.version);
  const tables = async (schema: string) =>
    (await db.query<{ table_name: string }>(`SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY 1`, [schema])).map((r) => r.table_name);
  const valid = async (index: string) => (await db.query<{ indisvalid: boolean }>(`SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass($1)`, [index]))[0]?.indisvalid;

  it('an index left invalid by a failed CREATE INDEX CONCURRENTLY: --check names it and its concurrent rebuild, migrate and the script refuse, nothing changed', async () => {
    const s = `"${db.schema}"`;
    const index = `${s}."outbox_key_busy_idx"`;
    // A DBA builds migration 10's index ahead of `migrate`, without blocking writes, as on a large
    // live outbox. The build fails — here on two rows of a key in flight, since it was typed
    // UNIQUE (a statement timeout or a cancel leaves the same) — and leaves an invalid index.
    await db.query(`DELETE FROM ${s}.queuebox_migrations WHERE version = 10; DROP INDEX ${index}`);
    await db.query(`INSERT INTO ${s}.outbox (topic, key, payload, state, claim_token, lease_expires_at, key_first) VALUES
      ('t', 'k', '{}', 'processing', gen_random_uuid(), now() + interval '1 hour', true),
      ('t', 'k', '{}', 'processing', gen_random_uuid(), now() + interval '1 hour', false)`);
    await assert.rejects(db.query(`CREATE UNIQUE INDEX CONCURRENTLY outbox_key_busy_idx ON ${s}.outbox (key) WHERE state = 'processing' AND key <> ''`), /could not create unique index/);
    assert.equal(await valid(index), false, 'the failed build left an invalid index of the name');

    const definition = `ON ${s}."outbox" (key) WHERE state = 'processing' AND key <> ''`;
    const rebuild = `DROP INDEX CONCURRENTLY IF EXISTS ${index}; CREATE INDEX CONCURRENTLY IF NOT EXISTS "outbox_key_busy_idx" ${definition};`;
    const line = `index ${index} is invalid, left by a CREATE INDEX CONCURRENTLY (or REINDEX CONCURRENTLY) that failed or is still running: queries never use it, and migrate refuses to run over it (it would take it for built); once no build of it runs, rebuild it without blocking writes, one statement at a time outside a transaction: ${rebuild}`;
    assert.deepEqual(await db.driver.migrateCheck(), ['migration 10 (keys of the outbox rows in flight) is not applied', line]);
    await assert.rejects(db.driver.migrate(), (error: unknown) => {
      assert.ok(error instanceof QueueBoxError);
      assert.equal(error.message, `migrate refused, nothing changed:\n- ${line}`);
      return true;
    });
    const script = pgMigrationScript(db.driver.ctx.names, db.driver.claimStatements());
    await assert.rejects(db.query(script), (error: Error) => error.message === `QueueBox refuses to migrate schema ${db.schema}: ${line}`);
    assert.deepEqual(await versions(db.schema), [1, 2, 3, 4, 6, 7, 8, 9], 'migration 10 not recorded over the invalid index');
    assert.equal(await valid(index), false);

    // The statements the line gives, as a DBA runs them (each on its own, outside a transaction).
    for (const statement of rebuild.split('; ')) await db.query(statement);
    assert.equal(await valid(index), true);
    const [rebuilt] = await db.query<{ def: string }>(`SELECT pg_get_indexdef(to_regclass($1)) AS def`, [index]);
    assert.doesNotMatch(rebuilt!.def, /UNIQUE/, 'rebuilt as the migration defines it');
    assert.deepEqual(await db.driver.migrateCheck(), ['migration 10 (keys of the outbox rows in flight) is not applied']);
    assert.deepEqual((await db.driver.migrate()).applied, [10]);
    assert.deepEqual(await db.driver.migrateCheck(), []);
    await db.query(`DELETE FROM ${s}.outbox`);
  });

  it('a second table set in one schema: its migrate, --check, start-up and script refuse, naming the set there, and create nothing', async () => {
    const schema = `${db.schema}_sets`;
    const first = new PostgresDriver({ config: { ...db.config, database: { ...db.config.database, schema } }, url: db.url });
    const billing = { ...db.config.tables, outbox: 'billing_outbox', inbox: 'billing_inbox' };
    const second = new PostgresDriver({ config: { ...db.config, database: { ...db.config.database, schema }, tables: billing }, url: db.url });
    const elsewhere = new PostgresDriver({ config: { ...db.config, database: { ...db.config.database, schema: `${schema}_billing` }, tables: billing }, url: db.url });
    try {
      await first.migrate();
      const before = { tables: await tables(schema), versions: await versions(schema) };
      const line =
        `schema "${schema}"'s queuebox_migrations already records migrations (up to version 10) while this configuration's tables "${schema}"."billing_outbox", "${schema}"."billing_inbox" do not exist: ` +
        `they are the migrations of other QueueBox tables in the schema (tables.outbox: outbox, tables.inbox: inbox), and migrate would create none of this configuration's. ` +
        `One schema holds one QueueBox table set (queuebox_migrations records versions, not tables): use another database.schema for this configuration, or set its tables.* to those names if it is meant to use those tables`;
      await assert.rejects(second.migrate(), (error: unknown) => error instanceof QueueBoxError && error.message === `migrate refused, nothing changed: ${line}`);
      assert.deepEqual(await second.migrateCheck(), [line]);
      await assert.rejects(second.schemaVerify(), (error: unknown) => {
        assert.ok(error instanceof SchemaMismatchError);
        assert.deepEqual(error.statements, [
          `-- table "${schema}"."billing_outbox" does not exist: run \`queuebox migrate\``,
          `-- table "${schema}"."billing_inbox" does not exist: run \`queuebox migrate\``,
          `-- ${line}`,
        ]);
        return true;
      });
      await assert.rejects(db.query(pgMigrationScript(second.ctx.names, second.claimStatements())), (error: Error) => error.message === `QueueBox refuses to migrate schema ${schema}: ${line}`);
      assert.deepEqual({ tables: await tables(schema), versions: await versions(schema) }, before, 'nothing half-created');
      const functions = await db.query(`SELECT proname FROM pg_proc WHERE pronamespace = to_regnamespace($1) AND proname LIKE 'billing%'`, [`"${schema}"`]);
      assert.deepEqual(functions, [], 'no claim function of the refused set');
      // The first set is unaffected; the second, in a schema of its own, migrates.
      assert.deepEqual(await first.migrateCheck(), []);
      await elsewhere.migrate();
      assert.deepEqual(await elsewhere.migrateCheck(), []);
      await elsewhere.schemaVerify();

      // The tables dropped by hand, the bookkeeping left: nothing to name, and the way out is given.
      await db.query(`DROP TABLE "${schema}".outbox, "${schema}".inbox, "${schema}".queuebox_maintenance`);
      const orphan =
        `schema "${schema}"'s queuebox_migrations already records migrations (up to version 10) while this configuration's tables "${schema}"."outbox", "${schema}"."inbox", "${schema}"."queuebox_maintenance" do not exist: ` +
        `no other QueueBox table was found in the schema to name (dropped or renamed by hand?), and migrate would create none of them. ` +
        `One schema holds one QueueBox table set (queuebox_migrations records versions, not tables): use another database.schema for this configuration, or, if no other configuration uses this schema, DROP TABLE "${schema}".queuebox_migrations and migrate again`;
      assert.deepEqual(await first.migrateCheck(), [orphan]);
      await assert.rejects(first.migrate(), (error: unknown) => error instanceof QueueBoxError && error.message === `migrate refused, nothing changed: ${orphan}`);
      await db.query(`DROP TABLE "${schema}".queuebox_migrations`);
      assert.equal((await first.migrate()).applied.length, before.versions.length);
      assert.deepEqual(await first.migrateCheck(), []);
    } finally {
      await Promise.all([first.close(), second.close(), elsewhere.close()]);
      await db.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE; DROP SCHEMA IF EXISTS "${schema}_billing" CASCADE`);
    }
  });
});
