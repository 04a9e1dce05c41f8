/**
 * The data-layer subpaths as an application gets them: `npm pack`, installed into a scratch app
 * with Kysely and Drizzle (the versions the suite runs) and no other data-layer library. The
 * Kysely and Drizzle examples of docs/data-layers.md, unchanged, plus a rollback and a refusal per
 * library, are type-checked (strict, `nodenext`, `skipLibCheck` off), compiled and run against a
 * fresh database; every other subpath is imported without its library installed.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { parseConfig } from '../../lib/config/load-config.ts';
import { PostgresDriver } from '../../lib/db/postgres/postgres-driver.ts';
import { dataLayerExamples } from '../data-layers/docs-examples.ts';
import { testDatabaseUrl } from '../helpers/database.ts';

const TSC = resolve('node_modules/typescript/bin/tsc');
const manifest = JSON.parse(readFileSync('package.json', 'utf8')) as { devDependencies: Record<string, string> };

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

function run(command: string, args: string[], options: { cwd: string; env?: NodeJS.ProcessEnv }): Promise<Run> {
  return new Promise((done) => {
    execFile(command, args, { cwd: options.cwd, env: options.env ?? process.env, timeout: 240_000, maxBuffer: 16 * 1024 * 1024 }, (error, stdout, stderr) => {
      done({ code: error ? (typeof error.code === 'number' ? error.code : 1) : 0, stdout, stderr });
    });
  });
}

const explain = (r: Run) => `exit ${r.code}\nstdout:\n${r.stdout}\nstderr:\n${r.stderr}`;

/** A rollback and a refusal per library, beside the docs' examples. */
const ROLLBACK_KYSELY = `import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import { enqueue } from 'queuebox/kysely';

const db = new Kysely<Record<string, never>>({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: process.env.DATABASE_URL }) }) });
let rolledBack = '';
await db.transaction().execute(async (trx) => {
  rolledBack = await enqueue(trx, { topic: 'order.cancelled', key: 'k-1', payload: { orderId: 'k-1' } });
  throw new Error('roll back');
}).catch(() => {});
// @ts-expect-error a Kysely instance is not a transaction
const refused = await enqueue(db, { topic: 'outside', payload: {} }).catch((error: Error) => error.name);
console.log(JSON.stringify({ rolledBack, refused }));
await db.destroy();
`;

const ROLLBACK_DRIZZLE = `import { drizzle } from 'drizzle-orm/node-postgres';
import { enqueue } from 'queuebox/drizzle';

const db = drizzle(process.env.DATABASE_URL!);
let rolledBack = '';
await db.transaction(async (tx) => {
  rolledBack = await enqueue(tx, { topic: 'order.cancelled', key: 'd-1', payload: { orderId: 'd-1' } });
  tx.rollback();
}).catch(() => {});
// @ts-expect-error Drizzle's database object is not a transaction
const refused = await enqueue(db, { topic: 'outside', payload: {} }).catch((error: Error) => error.name);
console.log(JSON.stringify({ rolledBack, refused }));
await db.$client.end();
`;

/** Imports each subpath whose library is not installed, and calls its enqueue with a non-transaction. */
const IMPORT_OTHERS = `const names = ['knex', 'postgres-js', 'typeorm', 'prisma', 'mikro-orm', 'sequelize'];
const refused = {};
for (const name of names) {
  const { enqueue } = await import('queuebox/' + name);
  refused[name] = await enqueue({}, { topic: 't', payload: {} }).catch((error) => error.name);
}
console.log(JSON.stringify(refused));
`;

describe('the data-layer subpaths of the packed package, installed into an application', () => {
  let work: string;
  let app: string;
  let admin: pg.Pool;
  let pool: pg.Pool;
  const database = `qb_packed_dl_${randomBytes(5).toString('hex')}`;
  const url = new URL(testDatabaseUrl());
  url.pathname = `/${database}`;
  const env = () => ({ ...process.env, DATABASE_URL: url.href });

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'qb-packed-dl-'));
    app = join(work, 'app');
    const packed = await run('npm', ['pack', '--pack-destination', work, '--json'], { cwd: process.cwd() });
    assert.equal(packed.code, 0, explain(packed));
    const tarball = join(work, (JSON.parse(packed.stdout.slice(packed.stdout.indexOf('['))) as Array<{ filename: string }>)[0]!.filename);
    mkdirSync(app);
    writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'qb-scratch-data-layers', private: true, type: 'module' }));
    const libraries = ['kysely', 'drizzle-orm'].map((name) => `${name}@${manifest.devDependencies[name]}`);
    const installed = await run('npm', ['install', '--omit=dev', '--prefer-offline', '--no-audit', '--no-fund', tarball, ...libraries], { cwd: app });
    assert.equal(installed.code, 0, explain(installed));
    admin = new pg.Pool({ connectionString: testDatabaseUrl(), max: 1 });
    await admin.query(`CREATE DATABASE "${database}"`);
    const driver = new PostgresDriver({ config: parseConfig({ database: { url: url.href } }), url: url.href });
    await driver.migrate();
    await driver.close();
    pool = new pg.Pool({ connectionString: url.href, max: 1 });
    const examples = dataLayerExamples();
    writeFileSync(join(app, 'kysely-example.ts'), examples.get('Kysely')!);
    writeFileSync(join(app, 'drizzle-example.ts'), examples.get('Drizzle (node-postgres; postgres.js alike)')!);
    writeFileSync(join(app, 'kysely-rollback.ts'), ROLLBACK_KYSELY);
    writeFileSync(join(app, 'drizzle-rollback.ts'), ROLLBACK_DRIZZLE);
    writeFileSync(join(app, 'import-others.mjs'), IMPORT_OTHERS);
  });
  after(async () => {
    await pool?.end();
    // Pools resolve end() before their sockets close: let the server see them go before the drop.
    for (let i = 0; i < 50; i++) {
      const { rows } = await admin.query<{ n: number }>(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = $1`, [database]);
      if (rows[0]!.n === 0) break;
      await new Promise((done) => setTimeout(done, 100));
    }
    await admin?.query(`DROP DATABASE IF EXISTS "${database}" WITH (FORCE)`);
    await admin?.end();
    rmSync(work, { recursive: true, force: true });
  });

  it('imports every other subpath without its library installed (each loads its library only when used)', async () => {
    const result = await run(process.execPath, ['import-others.mjs'], { cwd: app, env: env() });
    assert.equal(result.code, 0, explain(result));
    const names = ['knex', 'postgres-js', 'typeorm', 'prisma', 'mikro-orm', 'sequelize'];
    assert.deepEqual(JSON.parse(result.stdout), Object.fromEntries(names.map((n) => [n, 'UsageError'])));
  });

  it('type-checks the Kysely files under strict nodenext with skipLibCheck off', async () => {
    const compilerOptions = { target: 'es2022', module: 'nodenext', moduleResolution: 'nodenext', strict: true, skipLibCheck: false, types: ['node'], noEmit: true };
    writeFileSync(join(app, 'tsconfig.kysely.json'), JSON.stringify({ compilerOptions, files: ['kysely-example.ts', 'kysely-rollback.ts'] }));
    const checked = await run(process.execPath, [TSC, '-p', 'tsconfig.kysely.json'], { cwd: app });
    assert.equal(checked.code, 0, explain(checked));
  });

  it('type-checks the Drizzle files under strict nodenext with skipLibCheck off: errors only inside drizzle-orm\'s own declarations', async () => {
    const compilerOptions = { target: 'es2022', module: 'nodenext', moduleResolution: 'nodenext', strict: true, skipLibCheck: false, types: ['node'], noEmit: true };
    writeFileSync(join(app, 'tsconfig.drizzle.json'), JSON.stringify({ compilerOptions, files: ['drizzle-example.ts', 'drizzle-rollback.ts'] }));
    const checked = await run(process.execPath, [TSC, '-p', 'tsconfig.drizzle.json'], { cwd: app });
    const files = new Set([...checked.stdout.matchAll(/^([^\s(]+)\(\d+,\d+\): error/gm)].map((m) => m[1]!));
    // drizzle-orm 0.45's declarations do not pass skipLibCheck: false on their own (a bare import of
    // drizzle-orm/node-postgres reports the same errors in its gel, mysql, singlestore and sqlite cores).
    for (const file of files) assert.match(file, /^node_modules\/drizzle-orm\//, `${file}: ${explain(checked)}`);
  });

  it('compiles and runs both libraries: committed rows pending, rolled-back rows absent, the non-transaction refused', async () => {
    const compilerOptions = { target: 'es2022', module: 'nodenext', moduleResolution: 'nodenext', strict: true, skipLibCheck: true, types: ['node'], outDir: 'out' };
    writeFileSync(join(app, 'tsconfig.build.json'), JSON.stringify({ compilerOptions, files: ['kysely-example.ts', 'drizzle-example.ts', 'kysely-rollback.ts', 'drizzle-rollback.ts'] }));
    const built = await run(process.execPath, [TSC, '-p', 'tsconfig.build.json'], { cwd: app });
    assert.equal(built.code, 0, explain(built));
    for (const example of ['kysely-example', 'drizzle-example']) {
      const result = await run(process.execPath, [`out/${example}.js`], { cwd: app, env: env() });
      assert.equal(result.code, 0, explain(result));
    }
    const rolledBack: string[] = [];
    for (const script of ['kysely-rollback', 'drizzle-rollback']) {
      const result = await run(process.execPath, [`out/${script}.js`], { cwd: app, env: env() });
      assert.equal(result.code, 0, explain(result));
      const outcome = JSON.parse(result.stdout) as { rolledBack: string; refused: string };
      assert.equal(outcome.refused, 'UsageError', script);
      assert.match(outcome.rolledBack, /^[0-9a-f-]{36}$/, script);
      rolledBack.push(outcome.rolledBack);
    }
    const { rows } = await pool.query<{ topic: string; key: string; state: string }>(`SELECT topic, key, state FROM outbox ORDER BY sequence`);
    assert.deepEqual(rows, [
      { topic: 'order.paid', key: 'o-1', state: 'pending' },
      { topic: 'order.paid', key: 'o-1', state: 'pending' },
    ]);
    assert.deepEqual((await pool.query(`SELECT id FROM outbox WHERE id = ANY($1::uuid[])`, [rolledBack])).rows, []);
  });
});
