/**
 * The claim functions run with their own `search_path` (`pg_catalog, pg_temp`), not the caller's:
 * every QueueBox object in their statement is schema-qualified, so what resolves through the path
 * is PostgreSQL's own. `migrate` installs them so; one whose path was changed or reset is not
 * QueueBox's definition (`altered`): it is never called, `migrate --check` names it and `migrate`
 * replaces it. A claim through the function works whatever the session's path.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { checkClaimFunctions } from '../../lib/db/postgres/claim-function-install.ts';
import { claimFunctionName } from '../../lib/db/postgres/claim-functions.ts';
import { PostgresDriver } from '../../lib/db/postgres/postgres-driver.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { sentOnce } from '../helpers/claim-function-state.ts';

describe('claim functions run with search_path pg_catalog, pg_temp (PostgreSQL)', () => {
  let db: TestDatabase;
  const settingsOf = async () =>
    (
      await db.query<{ name: string; config: string[] | null }>(
        `SELECT p.proname AS name, p.proconfig AS config FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1 ORDER BY 1`,
        [db.schema],
      )
    ).map((r) => ({ name: r.name, searchPath: (r.config ?? []).filter((s) => s.startsWith('search_path=')) }));

  before(async () => {
    db = await createTestDatabase({ outbox: { batchSize: 10 } });
  });
  after(async () => db.drop());

  it('migrate installs each claim function with its own search_path', async () => {
    const names = db.driver.claimStatements().map(claimFunctionName).sort();
    assert.deepEqual(await settingsOf(), names.map((name) => ({ name, searchPath: ['search_path=pg_catalog, pg_temp'] })));
    assert.deepEqual((await checkClaimFunctions(db.pool, db.driver.ctx.names, db.driver.claimStatements())).map((v) => v.status), ['usable', 'usable']);
  });

  it('a claim calls the function under a session search_path without QueueBox\'s schema or public', async () => {
    await db.query(`INSERT INTO "${db.schema}".outbox (topic, key, payload) SELECT 't', 'k' || g, '{}' FROM generate_series(1, 30) g`);
    // Every connection of this driver's pool starts with that path (a schema that does not exist: nothing resolves through it).
    const pool = new pg.Pool({ connectionString: db.url, max: 3, options: '-c search_path=qb_no_such_schema' });
    const driver = sentOnce(new PostgresDriver({ config: db.config, url: db.url, pool }));
    const warnings: string[] = [];
    driver.ctx.claimFunctions!.warn = (event) => warnings.push(event.code);
    const sent: string[] = [];
    pool.on('connect', (client) => {
      const query = client.query.bind(client) as (...args: unknown[]) => unknown;
      client.query = ((...args: unknown[]) => {
        const first = args[0] as string | { text?: string };
        sent.push(typeof first === 'string' ? first : (first.text ?? ''));
        return query(...args);
      }) as typeof client.query;
    });
    try {
      assert.deepEqual((await pool.query<{ search_path: string }>('SHOW search_path')).rows, [{ search_path: 'qb_no_such_schema' }]);
      let claimed = 0;
      for (let i = 0; i < 3; i++) claimed += (await driver.outboxClaimMany({ limit: 10, leaseMs: 60_000 })).length;
      assert.equal(claimed, 30);
      assert.deepEqual(warnings, [], 'no function was found unusable');
      assert.ok(sent.some((text) => text.startsWith(`SELECT * FROM "${db.schema}"."outbox_claim_`)), 'a claim called its function');
    } finally {
      await pool.end();
      await db.query(`DELETE FROM "${db.schema}".outbox`);
    }
  });

  it('a function whose search_path was reset is altered: never called, named by --check, replaced by migrate', async () => {
    const [window] = db.driver.claimStatements();
    const name = claimFunctionName(window!);
    await db.query(`ALTER FUNCTION "${db.schema}"."${name}" RESET search_path`);
    assert.equal((await checkClaimFunctions(db.pool, db.driver.ctx.names, [window!]))[0]!.status, 'altered');
    assert.ok((await db.driver.migrateCheck()).some((line) => line.includes(name) && /not the definition QueueBox creates/.test(line)));
    const result = await db.newDriver().migrate();
    assert.deepEqual(result.claimFunctions?.replaced, [name]);
    assert.deepEqual((await settingsOf()).find((f) => f.name === name)?.searchPath, ['search_path=pg_catalog, pg_temp']);
    assert.deepEqual(await db.driver.migrateCheck(), []);
  });
});
