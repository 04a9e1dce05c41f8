/**
 * `queuebox migrate --sql` and `--check` through the real CLI (`bin/queuebox.ts` in a child
 * Node.js): the printed DDL, applied by `psql` to an empty schema, passes `--check`; applied twice
 * it changes nothing; `--check` names exactly what is behind (a batch size without its claim
 * functions, a migration not recorded, a missing column, a function that is not QueueBox's
 * definition) and exits 1. SQL Server's script is checked for its shape (no server here).
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { runCli } from '../../bin/cli-program.ts';
import { runTsx } from '../helpers/run-tsx.ts';
import { testDatabaseUrl } from '../helpers/database.ts';

const psqlVersion = spawnSync('psql', ['--version'], { encoding: 'utf8' });
const noPsql = psqlVersion.error !== undefined ? `psql is not installed (${psqlVersion.error.message}): the test applies the script with psql as a user would` : false;

describe('queuebox migrate --sql and --check', { timeout: 180_000 }, () => {
  const dir = mkdtempSync(join(tmpdir(), 'queuebox-migrate-sql-'));
  const schema = `qb_sql_${randomBytes(5).toString('hex')}`;
  const url = testDatabaseUrl();
  const admin = new pg.Pool({ connectionString: url, max: 2 });
  const env = { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? dir, DATABASE_URL: url };

  function configFile(name: string, yaml: string): string {
    const path = join(dir, name);
    writeFileSync(path, yaml);
    return path;
  }
  const cli = (config: string, ...args: string[]) => runTsx(['bin/queuebox.ts', '--config', config, 'migrate', ...args], env, 60_000);
  function psql(script: string): void {
    const result = spawnSync('psql', ['-X', '-q', '-v', 'ON_ERROR_STOP=1', '--single-transaction', '-f', '-', url], { input: script, encoding: 'utf8' });
    assert.equal(result.status, 0, `psql failed: ${result.stderr}`);
  }

  let config25: string;
  before(() => {
    config25 = configFile('queuebox.yml', `database:\n  schema: ${schema}\noutbox:\n  batchSize: 25\n`);
  });
  after(async () => {
    await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await admin.end();
    rmSync(dir, { recursive: true, force: true });
  });

  it('the script applied by psql to an empty schema passes --check, and applied again changes nothing', { skip: noPsql }, async () => {
    const printed = await cli(config25, '--sql');
    assert.equal(printed.code, 0, printed.stderr);
    assert.match(printed.stdout, new RegExp(`CREATE SCHEMA IF NOT EXISTS "${schema}"`));
    assert.match(printed.stdout, /outbox\.batchSize 25/);
    const before = await cli(config25, '--check');
    assert.equal(before.code, 1);
    assert.match(before.stderr, new RegExp(`schema "${schema}" does not exist`));
    psql(printed.stdout);
    const check = await cli(config25, '--check');
    assert.deepEqual([check.code, check.stdout, check.stderr], [0, 'schema is up to date\n', '']);
    const objects = async () => (await admin.query(`SELECT count(*)::int AS n FROM pg_class WHERE relnamespace = $1::regnamespace`, [`"${schema}"`])).rows[0].n as number;
    const count = await objects();
    psql(printed.stdout);
    assert.equal(await objects(), count, 'a second run creates nothing');
    const migrate = await cli(config25);
    assert.deepEqual([migrate.code, migrate.stdout], [0, 'schema is up to date\n'], 'migrate agrees: nothing to apply, no function to create');
  });

  it('--check names a batch size without its claim functions, a migration not recorded, a missing column and an altered function, and exits 1', { skip: noPsql }, async () => {
    const config30 = configFile('batch30.yml', `database:\n  schema: ${schema}\noutbox:\n  batchSize: 30\n`);
    const other = await cli(config30, '--check');
    assert.equal(other.code, 1);
    const missing = other.stderr.split('\n').filter((line) => line.startsWith('- '));
    assert.equal(missing.length, 2, other.stderr);
    for (const line of missing) assert.match(line, new RegExp(`^- claim function ${schema}\\.outbox_claim_[0-9a-f]{12} \\(outbox\\.batchSize 30\\) is missing`));

    await admin.query(`DELETE FROM "${schema}".queuebox_migrations WHERE version = 6`);
    await admin.query(`ALTER TABLE "${schema}".outbox DROP COLUMN replay_count`);
    const fn = (await admin.query<{ sig: string }>(`SELECT oid::regprocedure::text AS sig FROM pg_proc WHERE pronamespace = $1::regnamespace ORDER BY proname LIMIT 1`, [`"${schema}"`])).rows[0]!.sig;
    await admin.query(`ALTER FUNCTION ${fn} SET search_path = public`);
    const behind = await cli(config25, '--check');
    assert.equal(behind.code, 1);
    // What migrate applies, and what it does not restore (a column dropped by hand: its SQL is given).
    assert.match(behind.stderr, /run `queuebox migrate` for migrations and claim functions not applied; a line that gives SQL names an object changed by hand after its migration, which `queuebox migrate` does not restore: run that SQL/);
    const lines = behind.stderr.split('\n').filter((line) => line.startsWith('- '));
    assert.deepEqual(lines, [
      '- migration 6 (one row in flight per key as an index; aggregates per source; keyless rows apart) is not applied',
      `- a column is missing: ALTER TABLE "${schema}"."outbox" ADD COLUMN "replay_count" integer NOT NULL DEFAULT 0;`,
      ...lines.slice(2).filter((line) => line.includes('is not the definition QueueBox creates')),
    ]);
    assert.equal(lines.length, 3, behind.stderr);
    assert.match(lines[2]!, new RegExp(`function ${fn.replaceAll('(', '\\(').replaceAll(')', '\\)')} \\(owner postgres\\)`));

    await admin.query(`ALTER TABLE "${schema}".outbox ADD COLUMN replay_count integer NOT NULL DEFAULT 0`);
    const migrate = await cli(config25);
    assert.equal(migrate.code, 0, migrate.stderr);
    assert.match(migrate.stdout, /applied migrations 6\nreplaced claim functions that were not QueueBox's definition: outbox_claim_/);
    assert.equal((await cli(config25, '--check')).code, 0);
  });

  it('migrate --help documents --sql and --check', async () => {
    let out = '';
    const code = await runCli(['migrate', '--help'], { stdout: (t) => (out += t), stderr: (t) => (out += t), env: {} });
    assert.equal(code, 0);
    assert.match(out, /--sql\s+print the DDL migrate applies/);
    assert.match(out, /--check\s+change nothing; exit 1 naming each difference/);
    assert.match(out, /psql -v ON_ERROR_STOP=1 --single-transaction -f queuebox\.sql/);
    assert.match(out, /claims send their statement/);
  });

  it('SQL Server: --sql prints the migrations as sqlcmd batches, each guarded by its row, in the configured schema and tables', async () => {
    const config = configFile('sqlserver.yml', 'database:\n  type: sqlserver\n  schema: qb_sales\ntables:\n  outbox: sales_outbox\n  inbox: sales_inbox\n');
    const printed = await runTsx(['bin/queuebox.ts', '--config', config, 'migrate', '--sql'], { PATH: env.PATH, HOME: env.HOME }, 60_000);
    assert.equal(printed.code, 0, printed.stderr);
    const batches = printed.stdout.split(/^GO$/m).map((b) => b.trim()).filter((b) => b !== '');
    assert.match(batches[0]!, /^-- [^\n]*\nSET XACT_ABORT ON;\nBEGIN TRANSACTION;\n[\s\S]*sp_getapplock @Resource = N'queuebox_migrate', @LockMode = N'Exclusive', @LockOwner = N'Transaction'/);
    assert.equal(batches.at(-1), 'COMMIT TRANSACTION;');
    assert.match(batches[1]!, /IF SCHEMA_ID\(N'qb_sales'\) IS NULL EXEC\(N'CREATE SCHEMA \[qb_sales\]'\)/);
    assert.match(printed.stdout, /CREATE TABLE \[qb_sales\]\.\[sales_outbox\]/);
    assert.doesNotMatch(printed.stdout, /\[dbo\]|\[outbox\]|"/, 'only the configured schema and tables, no PostgreSQL quoting');
    for (const batch of batches.slice(3, -1)) assert.match(batch, /IF NOT EXISTS \(SELECT 1 FROM \[qb_sales\]\.\[queuebox_migrations\] WHERE version = \d+\)/, batch);
    const recorded = [...printed.stdout.matchAll(/INSERT INTO \[qb_sales\]\.\[queuebox_migrations\] \(version, name\) VALUES \((\d+),/g)].map((m) => Number(m[1]));
    const { mssqlMigrations } = await import('../../lib/db/sqlserver/migrations.ts');
    assert.deepEqual(recorded, mssqlMigrations.map((m) => m.version));
  });
});
