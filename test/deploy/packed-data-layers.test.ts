/**
 * The data-layer subpaths as an application gets them: `npm pack`, installed into a scratch app
 * with every supported library at the version the suite runs (Prisma's client generated into the
 * app, as its docs show). Each example of docs/data-layers.md, unchanged, is type-checked (strict,
 * `nodenext`, `skipLibCheck` off) and run with Node.js (its type stripping) against a fresh
 * database, then run again with the transaction rolled back: committed → one pending row, rolled
 * back → none. A CommonJS application on `node10` resolution (`types`/`typesVersions`, not
 * `exports`) type-checks its imports of the root and of every typed subpath. A second app installs
 * the package alone: every subpath imports without its library.
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
import { dataLayerExamples, dataLayerPrismaSchema } from '../data-layers/docs-examples.ts';
import { testDatabaseUrl } from '../helpers/database.ts';
import { packedTarball } from '../helpers/packed-package.ts';

const TSC = resolve('node_modules/typescript/bin/tsc');
const PRISMA = resolve('node_modules/prisma/build/index.js');
const manifest = JSON.parse(readFileSync('package.json', 'utf8')) as { devDependencies: Record<string, string>; exports: Record<string, { types?: string }> };

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

/** Example heading → the subpath it imports, and the packages an application installs for it. */
const LIBRARIES: Record<string, { subpath: string; packages: string[] }> = {
  Kysely: { subpath: 'kysely', packages: ['kysely'] },
  'Drizzle (node-postgres; postgres.js alike)': { subpath: 'drizzle', packages: ['drizzle-orm'] },
  Knex: { subpath: 'knex', packages: ['knex'] },
  'postgres.js': { subpath: 'postgres-js', packages: ['postgres'] },
  TypeORM: { subpath: 'typeorm', packages: ['typeorm'] },
  Prisma: { subpath: 'prisma', packages: ['@prisma/client', '@prisma/adapter-pg'] },
  MikroORM: { subpath: 'mikro-orm', packages: ['@mikro-orm/core', '@mikro-orm/postgresql'] },
  Sequelize: { subpath: 'sequelize', packages: ['sequelize'] },
};

/** Prisma's schema in the app: no models (the adapter writes raw SQL); the client where the docs' example imports it. */
/** The example with its transaction rolled back: it enqueues \`order.rolled-back\` for \`key\`, then throws inside the callback. */
function rolledBack(example: string, key: string): string {
  const enqueueLine = /^(\s*)await enqueue\((\w+), \{ topic: 'order\.paid', key: 'o-1', payload: \{ orderId: 'o-1' \} \}\);$/m;
  const match = enqueueLine.exec(example);
  assert.ok(match, `the example enqueues order.paid for o-1 in one line:\n${example}`);
  const [line, indent, tx] = match;
  const after = match.index + line.length;
  const close = example.indexOf('\n});', after);
  assert.ok(close >= after, `the transaction's callback closes with "});":\n${example}`);
  return (
    example.slice(0, match.index) +
    `${indent}await enqueue(${tx}, { topic: 'order.rolled-back', key: '${key}', payload: {} });\n${indent}throw new Error('roll back');` +
    example.slice(after, close) +
    "\n}).catch((error: unknown) => {\n  if (!(error instanceof Error) || error.message !== 'roll back') throw error;\n});" +
    example.slice(close + '\n});'.length)
  );
}

/** Imports each subpath with no library installed, and calls its enqueue with a non-transaction. */
const IMPORT_ALL = `const refused = {};
for (const name of ${JSON.stringify(Object.values(LIBRARIES).map((l) => l.subpath))}) {
  const { enqueue } = await import('queuebox/' + name);
  refused[name] = await enqueue({}, { topic: 't', payload: {} }).catch((error) => error.name);
}
console.log(JSON.stringify(refused));
`;

/**
 * A CommonJS application on `node10` resolution: the root and each typed subpath, one export of
 * each used where a missing declaration is an error (no implicit any); each `@ts-expect-error`
 * holds only while the adapter's parameter is its library's own type (not `any`).
 */
const NODE10_APP = `import { enqueue, type EnqueueOptions, type OutboxMessageInput } from 'queuebox';
import { enqueue as enqueueKysely } from 'queuebox/kysely';
import { enqueue as enqueueDrizzle, type DrizzleTransaction } from 'queuebox/drizzle';
import { enqueue as enqueueKnex } from 'queuebox/knex';
import { enqueue as enqueuePostgresJs, type PostgresJsTransaction } from 'queuebox/postgres-js';
import { enqueue as enqueueTypeorm } from 'queuebox/typeorm';
import { enqueue as enqueuePrisma, type PrismaTransactionClient } from 'queuebox/prisma';
import { enqueue as enqueueMikroOrm } from 'queuebox/mikro-orm';
import { enqueue as enqueueSequelize } from 'queuebox/sequelize';
import QueueBoxServerlessPlugin, { BUILD_DIR } from 'queuebox/serverless';

const message: OutboxMessageInput = { topic: 'order.paid', key: 'o-1', payload: { orderId: 'o-1' } };
const options: EnqueueOptions = { schema: 'app' };
export const buildDir: '.queuebox' = BUILD_DIR;
export const hooks = (plugin: QueueBoxServerlessPlugin): Record<string, () => Promise<void>> => plugin.hooks;
export const viaDrizzle = (tx: DrizzleTransaction): Promise<string> => enqueueDrizzle(tx, message, options);
export const viaPostgresJs = (tx: PostgresJsTransaction): Promise<string> => enqueuePostgresJs(tx, message, options);
export const viaPrisma = (tx: PrismaTransactionClient): Promise<string> => enqueuePrisma(tx, message, options);
export async function refused(): Promise<void> {
  // @ts-expect-error a pg client in a transaction, not a plain object
  await enqueue({}, message, options);
  // @ts-expect-error a Kysely transaction
  await enqueueKysely({}, message, options);
  // @ts-expect-error a Knex transaction
  await enqueueKnex({}, message, options);
  // @ts-expect-error a TypeORM EntityManager or QueryRunner
  await enqueueTypeorm({}, message, options);
  // @ts-expect-error a MikroORM EntityManager
  await enqueueMikroOrm({}, message, options);
  // @ts-expect-error a Sequelize transaction
  await enqueueSequelize({}, message, options);
}
`;

const slug = (heading: string) => heading.replace(/[^A-Za-z]+/g, '-').replace(/-+$/, '').toLowerCase();

describe('the data-layer subpaths of the packed package, installed into an application', () => {
  let work: string;
  let app: string;
  let bare: string;
  let admin: pg.Pool;
  let pool: pg.Pool;
  const examples = dataLayerExamples();
  const database = `qb_packed_dl_${randomBytes(5).toString('hex')}`;
  const url = new URL(testDatabaseUrl());
  url.pathname = `/${database}`;
  const env = () => ({ ...process.env, DATABASE_URL: url.href });

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'qb-packed-dl-'));
    app = join(work, 'app');
    bare = join(work, 'bare');
    const tarball = await packedTarball();
    const libraries = Object.values(LIBRARIES).flatMap((l) => l.packages.map((name) => `${name}@${manifest.devDependencies[name]}`));
    for (const [dir, packages] of [
      [app, [tarball, ...libraries]],
      [bare, [tarball]],
    ] as const) {
      mkdirSync(dir);
      writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'qb-scratch-data-layers', private: true, type: 'module' }));
      const installed = await run('npm', ['install', '--omit=dev', '--prefer-offline', '--no-audit', '--no-fund', ...packages], { cwd: dir });
      assert.equal(installed.code, 0, explain(installed));
    }
    // `prisma generate` with the prisma-client generator runs no engine; the CLI still looks for its
    // schema engine at start-up and would download it (no access here): a stand-in is named.
    // The schema the Prisma example shows, where `npx prisma generate` looks for it.
    mkdirSync(join(app, 'prisma'));
    writeFileSync(join(app, 'prisma', 'schema.prisma'), dataLayerPrismaSchema());
    const generated = await run(process.execPath, [PRISMA, 'generate'], {
      cwd: app,
      env: { ...process.env, PRISMA_SCHEMA_ENGINE_BINARY: '/bin/false', PRISMA_HIDE_UPDATE_MESSAGE: '1', CHECKPOINT_DISABLE: '1' },
    });
    assert.equal(generated.code, 0, explain(generated));
    admin = new pg.Pool({ connectionString: testDatabaseUrl(), max: 1 });
    await admin.query(`CREATE DATABASE "${database}"`);
    const driver = new PostgresDriver({ config: parseConfig({ database: { url: url.href } }), url: url.href });
    await driver.migrate();
    await driver.close();
    pool = new pg.Pool({ connectionString: url.href, max: 1 });
    for (const heading of Object.keys(LIBRARIES)) {
      const example = examples.get(heading);
      assert.ok(example, `docs/data-layers.md has the ${heading} example`);
      writeFileSync(join(app, `${slug(heading)}.ts`), example);
      writeFileSync(join(app, `${slug(heading)}-rollback.ts`), rolledBack(example, `r-${slug(heading)}`));
    }
    writeFileSync(join(bare, 'import-all.mjs'), IMPORT_ALL);
  });
  after(async () => {
    await pool?.end();
    // Pools resolve end() before their sockets close: let the server see them go before the drop.
    for (let i = 0; i < 50 && admin; i++) {
      const { rows } = await admin.query<{ n: number }>(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = $1`, [database]);
      if (rows[0]!.n === 0) break;
      await new Promise((done) => setTimeout(done, 100));
    }
    await admin?.query(`DROP DATABASE IF EXISTS "${database}" WITH (FORCE)`);
    await admin?.end();
    rmSync(work, { recursive: true, force: true });
  });

  it('imports every subpath without its library installed (each loads its library only when used)', async () => {
    const result = await run(process.execPath, ['import-all.mjs'], { cwd: bare, env: env() });
    assert.equal(result.code, 0, explain(result));
    assert.deepEqual(JSON.parse(result.stdout), Object.fromEntries(Object.values(LIBRARIES).map((l) => [l.subpath, 'UsageError'])));
  });

  it("type-checks every example under strict nodenext with skipLibCheck off: errors only inside drizzle-orm's and postgres-interval's own declarations", async () => {
    const compilerOptions = { target: 'es2022', module: 'nodenext', moduleResolution: 'nodenext', strict: true, skipLibCheck: false, allowImportingTsExtensions: true, types: ['node'], noEmit: true };
    const files = Object.keys(LIBRARIES).flatMap((h) => [`${slug(h)}.ts`, `${slug(h)}-rollback.ts`]);
    writeFileSync(join(app, 'tsconfig.json'), JSON.stringify({ compilerOptions, files }));
    const checked = await run(process.execPath, [TSC, '-p', 'tsconfig.json'], { cwd: app });
    const errorFiles = new Set([...checked.stdout.matchAll(/^([^\s(]+)\(\d+,\d+\): error/gm)].map((m) => m[1]!));
    // drizzle-orm 0.45's declarations fail skipLibCheck: false on their own (drizzle-orm#5187: its
    // gel, mysql, singlestore and sqlite cores); postgres-interval 4.1 (a dependency of
    // @mikro-orm/postgresql) declares a method returning Temporal.Duration, a type TypeScript 5.9's
    // libraries do not have yet.
    for (const file of errorFiles) assert.match(file, /^node_modules\/(drizzle-orm|postgres-interval)\//, `${file}: ${explain(checked)}`);
    assert.ok(checked.code === 0 || errorFiles.size > 0, explain(checked));
  });

  it('type-checks the root and every typed subpath in a CommonJS application under node10 resolution (typesVersions), strict, skipLibCheck off', async () => {
    const imported = [...NODE10_APP.matchAll(/^import .* from '(queuebox[^']*)';$/gm)].map((m) => m[1]!.replace(/^queuebox/, '.'));
    const typed = Object.entries(manifest.exports).filter(([, entry]) => entry.types !== undefined).map(([key]) => key);
    assert.deepEqual(imported, typed, 'the application imports the root and every subpath that has types');
    writeFileSync(join(app, 'node10.ts'), NODE10_APP);
    // As `tsc --init` writes a CommonJS project (esModuleInterop), with nothing skipped.
    const compilerOptions = { target: 'es2022', module: 'commonjs', moduleResolution: 'node10', esModuleInterop: true, strict: true, noImplicitAny: true, skipLibCheck: false, types: ['node'], noEmit: true };
    writeFileSync(join(app, 'tsconfig.node10.json'), JSON.stringify({ compilerOptions, files: ['node10.ts'] }));
    const checked = await run(process.execPath, [TSC, '-p', 'tsconfig.node10.json'], { cwd: app });
    const errorFiles = new Set([...checked.stdout.matchAll(/^([^\s(]+)\(\d+,\d+\): error/gm)].map((m) => m[1]!));
    // Only drizzle-orm's own declarations, as under nodenext above (drizzle-orm#5187).
    for (const file of errorFiles) assert.match(file, /^node_modules\/drizzle-orm\//, `${file}: ${explain(checked)}`);
    assert.ok(checked.code === 0 || errorFiles.size > 0, explain(checked));
  });

  for (const [heading, { subpath }] of Object.entries(LIBRARIES)) {
    it(`queuebox/${subpath}: the docs example commits one pending row; rolled back, it leaves none`, async () => {
      const count = async (topic: string, key: string) =>
        (await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM outbox WHERE topic = $1 AND key = $2 AND state = 'pending'`, [topic, key])).rows[0]!.n;
      const before = await count('order.paid', 'o-1');
      const committed = await run(process.execPath, [`${slug(heading)}.ts`], { cwd: app, env: env() });
      assert.equal(committed.code, 0, explain(committed));
      assert.equal(await count('order.paid', 'o-1'), before + 1, 'one more pending order.paid row for o-1');
      const rolled = await run(process.execPath, [`${slug(heading)}-rollback.ts`], { cwd: app, env: env() });
      assert.equal(rolled.code, 0, explain(rolled));
      const left = await pool.query(`SELECT state FROM outbox WHERE key = $1`, [`r-${slug(heading)}`]);
      assert.deepEqual(left.rows, [], 'the rolled-back row is absent');
    });
  }
});
