/**
 * `migrate` on a large table: a migration's statements are not cut off by
 * `database.statementTimeoutMs` (migration 8 updates every unfinished outbox row, and one took
 * longer than the 30 s default on a large table), while a lock it waits for still is, with an error
 * that says what held it up and that nothing changed.
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import pg from 'pg';
import { pgMigrations } from '../../lib/db/postgres/migrations.ts';
import { PostgresDriver } from '../../lib/db/postgres/postgres-driver.ts';
import { withStatementBudget } from '../../lib/db/statement-budget.ts';
import { TransientDatabaseError } from '../../lib/errors.ts';
import { schemaAtMigration } from '../helpers/schema-at-migration.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';

/** The schema is built up to this migration; the next one updates outbox rows. */
const BEFORE_UPDATE = 7;

describe('migrate and the statement timeout', { timeout: 60_000 }, () => {
  let db: TestDatabase;
  let driver: PostgresDriver;
  before(async () => {
    db = await createTestDatabase();
    // statementTimeoutMs 1000: the pool's statements end after a second.
    driver = new PostgresDriver({ config: { ...db.config, database: { ...db.config.database, statementTimeoutMs: 1000 } }, url: db.url });
  });
  after(async () => {
    await driver.close();
    await db.drop();
  });
  const versions = async () => (await db.query<{ version: number }>(`SELECT version FROM "${db.schema}".queuebox_migrations ORDER BY version`)).map((r) => r.version);

  beforeEach(async () => {
    await schemaAtMigration(db, BEFORE_UPDATE);
    await db.query(`INSERT INTO "${db.schema}".outbox (topic, payload) VALUES ('t', '{}')`);
  });

  it('runs a migration statement longer than database.statementTimeoutMs to its end', async () => {
    // Every UPDATE of the outbox takes 1.5 s: migration 8's update of the unfinished rows too.
    await db.query(`CREATE FUNCTION "${db.schema}".slow_update() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(1.5); RETURN NULL; END $$`);
    await db.query(`CREATE TRIGGER slow_update BEFORE UPDATE ON "${db.schema}".outbox FOR EACH STATEMENT EXECUTE FUNCTION "${db.schema}".slow_update()`);
    const started = performance.now();
    const result = await driver.migrate();
    assert.ok(performance.now() - started >= 1500, 'the slow statement ran');
    assert.ok(result.applied.includes(BEFORE_UPDATE + 1), `applied ${result.applied.join(', ')}`);
    assert.deepEqual(await versions(), pgMigrations.map((m) => m.version));
    // The pool's own statements keep their timeout.
    await assert.rejects(driver.ctx.pool.query('SELECT pg_sleep(1.5)'), /statement timeout/);
  });

  it('inside an invocation, bounds each statement by the time left when it is sent, so none runs past the end', async () => {
    // Recording each migration takes 0.6 s: three of them (8, 9, 10) take 1.8 s, each well within
    // the 1.5 s the invocation had when migrate started, together past it.
    await db.query(`CREATE FUNCTION "${db.schema}".slow_record() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(0.6); RETURN NEW; END $$`);
    await db.query(`CREATE TRIGGER slow_record BEFORE INSERT ON "${db.schema}".queuebox_migrations FOR EACH ROW EXECUTE FUNCTION "${db.schema}".slow_record()`);
    const end = performance.now() + 1500;
    const started = performance.now();
    await assert.rejects(withStatementBudget(() => end - performance.now(), () => driver.migrate()));
    const took = performance.now() - started;
    assert.ok(took < 1500 + 400, `migrate ran ${Math.round(took)} ms of a 1500 ms invocation`);
    assert.deepEqual(await versions(), pgMigrations.filter((m) => m.version <= BEFORE_UPDATE).map((m) => m.version), 'nothing applied');
  });

  it('gives up a lock wait after database.statementTimeoutMs, saying what held it and that nothing changed', async () => {
    const holder = new pg.Client({ connectionString: db.url });
    await holder.connect();
    try {
      await holder.query('BEGIN');
      await holder.query(`LOCK TABLE "${db.schema}".outbox IN ACCESS SHARE MODE`);
      const started = performance.now();
      await assert.rejects(driver.migrate(), (error: unknown) => {
        assert.ok(error instanceof TransientDatabaseError, String(error));
        assert.match(error.message, /^migrate: a lock it needs was not granted within 1000 ms \(database\.statementTimeoutMs\): another migrate \(one stopped with Ctrl-C may still run on the server: see pg_stat_activity\), or a transaction on the QueueBox tables, holds it; nothing was changed/);
        return true;
      });
      const waited = performance.now() - started;
      assert.ok(waited >= 900 && waited < 5000, `waited ${Math.round(waited)} ms`);
    } finally {
      await holder.query('ROLLBACK');
      await holder.end();
    }
    assert.deepEqual(await versions(), pgMigrations.filter((m) => m.version <= BEFORE_UPDATE).map((m) => m.version), 'nothing applied');
    assert.ok((await driver.migrate()).applied.length > 0, 'the next migrate applies them');
  });
});
