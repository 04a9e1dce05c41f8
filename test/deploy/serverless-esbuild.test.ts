/**
 * A service whose own Node.js functions serverless-esbuild bundles, with QueueBox's plugin beside
 * it (docs/deploy.md, "Your own functions that import queuebox" and "Names"): the packed package
 * and `mssql` installed into a scratch service under the temporary directory, esbuild and
 * serverless-esbuild linked from this checkout (the versions it pins), and the real `osls package`
 * run with the plugins in either order and `package.individually: true`, which the page asks for
 * (without it serverless-esbuild's one package of the service carries all of `.queuebox/`). The
 * service's handler, which enqueues from `queuebox` in a pg transaction, is bundled with no
 * setting for QueueBox (CommonJS, serverless-esbuild's default) and as ESM (`outputFileExtension:
 * .mjs` and the `require` banner); its zip holds its bundle alone and runs, unzipped into a folder
 * without node_modules, against the test database. QueueBox's functions are packaged from their
 * own `.queuebox/` bundles, as without serverless-esbuild; `osls invoke local` of one fails, as the
 * page says. On SQL Server, `external: ['mssql']` ships `mssql` in the zip of a function that
 * imports it.
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { inflateRawSync } from 'node:zlib';
import { FUNCTIONS, functionKey, functionLogicalId } from '../../lib/serverless/functions.ts';
import { ENQUEUE_HANDLER_TS } from '../helpers/app-handler.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { explain, npmInstall, packedTarball, run } from '../helpers/packed-package.ts';
import { OSLS, QUIET_OSLS_ENV } from '../helpers/repo-service.ts';
import { zipEntries } from '../helpers/zip-entries.ts';

const devDependencies = (JSON.parse(readFileSync('package.json', 'utf8')) as { devDependencies: Record<string, string> }).devDependencies;

const QUEUEBOX_YML = `destinations:
  events: { type: eventbridge, eventBusName: app-bus, source: com.example.shop }
outbox:
  routes:
    - { topicPattern: '**', destination: events }
`;


/** The same on SQL Server: enqueue in the handler's own mssql transaction. */
const SQL_HANDLER_TS = `import sql from 'mssql';
import { enqueue } from 'queuebox';

let pool: sql.ConnectionPool | undefined;
export const handler = async (event: { orderId: string }) => {
  pool ??= await new sql.ConnectionPool(process.env.APP_DATABASE_URL ?? '').connect();
  const tx = new sql.Transaction(pool);
  await tx.begin();
  const id = await enqueue(tx, { topic: 'order.paid', key: event.orderId, payload: { orderId: event.orderId } });
  await tx.commit();
  return { id };
};
`;

const REQUIRE_BANNER = "import { createRequire as __createRequire } from 'node:module'; const require = __createRequire(import.meta.url);";

/** The service's serverless.yml: its function(s), `package.individually` (docs/deploy.md), the plugins in the order given. */
function serviceYml(plugins: string[], esbuild: Record<string, unknown> | undefined, sqlFunction: boolean): string {
  return `service: shop
frameworkVersion: '>=3'
plugins:
${plugins.map((p) => `  - ${p}`).join('\n')}
provider:
  name: aws
  runtime: nodejs24.x
  region: eu-west-1
package:
  individually: true
functions:
  order:
    handler: src/handler.handler
${sqlFunction ? '  sqlOrder:\n    handler: src/sql-handler.handler\n' : ''}custom:
${esbuild ? `  esbuild: ${JSON.stringify(esbuild)}\n` : ''}  queuebox:
    databaseUrlParameter: /shop/test/database-url
`;
}

/** The files of a zip archive (stored or deflated, as osls and serverless-esbuild write them), those `wanted` only. */
function zipFiles(path: string, wanted: (name: string) => boolean = () => true): Map<string, Buffer> {
  const zip = readFileSync(path);
  let end = zip.length - 22;
  while (end >= 0 && zip.readUInt32LE(end) !== 0x06054b50) end--;
  assert.ok(end >= 0, `${path} is a zip archive`);
  const files = new Map<string, Buffer>();
  let offset = zip.readUInt32LE(end + 16);
  for (let i = 0; i < zip.readUInt16LE(end + 10); i++) {
    const method = zip.readUInt16LE(offset + 10);
    const size = zip.readUInt32LE(offset + 20);
    const nameLength = zip.readUInt16LE(offset + 28);
    const local = zip.readUInt32LE(offset + 42);
    const name = zip.toString('utf8', offset + 46, offset + 46 + nameLength);
    offset += 46 + nameLength + zip.readUInt16LE(offset + 30) + zip.readUInt16LE(offset + 32);
    if (name.endsWith('/') || !wanted(name)) continue;
    const start = local + 30 + zip.readUInt16LE(local + 26) + zip.readUInt16LE(local + 28);
    const data = zip.subarray(start, start + size);
    assert.ok(method === 0 || method === 8, `${path}: ${name} is stored or deflated`);
    files.set(name, method === 0 ? Buffer.from(data) : inflateRawSync(data));
  }
  return files;
}

/** Writes a zip's files under `dir`, as Lambda unpacks a function to /var/task. */
function unzipTo(path: string, dir: string): void {
  for (const [name, data] of zipFiles(path)) {
    mkdirSync(dirname(join(dir, name)), { recursive: true });
    writeFileSync(join(dir, name), data);
  }
}

/** Every file under `dir`, relative to `base`. */
function filesUnder(dir: string, base: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? filesUnder(join(dir, e.name), base) : [relative(base, join(dir, e.name))]));
}

/** Calls the unzipped handler as Lambda would, then exits (ending the pool's idle connection). */
const INVOKE = (bundle: string, orderId: string) =>
  `import(${JSON.stringify(bundle)}).then((m) => m.handler({ orderId: ${JSON.stringify(orderId)} })).then((r) => { console.log(JSON.stringify(r)); process.exit(0); }, (e) => { console.error(e); process.exit(1); });`;

/** The variables a shell passes npm for the network: certificates and proxies (none on most machines). */
const NETWORK_ENV = Object.fromEntries(
  Object.entries(process.env).filter(([name]) => /^(NODE_EXTRA_CA_CERTS|SSL_CERT_FILE|SSL_CERT_DIR|HTTPS?_PROXY|NO_PROXY|https?_proxy|no_proxy|npm_config_(cafile|ca|proxy|https_proxy|noproxy|registry|strict_ssl))$/.test(name)),
);

type LambdaFunction = { Properties: { Handler: string; Code: { S3Key: string } } };

describe('a service bundling its own functions with serverless-esbuild next to plugins: [queuebox/serverless]', { timeout: 600_000 }, () => {
  let work: string;
  let service: string;
  let db: TestDatabase;
  let env: NodeJS.ProcessEnv;
  const osls = (args: string[]) => run(process.execPath, [OSLS, ...args], { cwd: service, env, timeoutMs: 240_000 });

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'qb-sls-esbuild-'));
    service = join(work, 'shop');
    mkdirSync(join(service, 'src'), { recursive: true });
    writeFileSync(join(service, 'package.json'), JSON.stringify({ name: 'shop', private: true }));
    writeFileSync(join(service, 'queuebox.yml'), QUEUEBOX_YML);
    writeFileSync(join(service, 'src/handler.ts'), ENQUEUE_HANDLER_TS);
    writeFileSync(join(service, 'src/sql-handler.ts'), SQL_HANDLER_TS);
    // queuebox and mssql are the service's dependencies (serverless-esbuild reads mssql's version there).
    await npmInstall(service, [await packedTarball(), `mssql@${devDependencies.mssql}`]);
    for (const tool of ['esbuild', 'serverless-esbuild']) symlinkSync(resolve('node_modules', tool), join(service, 'node_modules', tool));
    db = await createTestDatabase();
    // Only what a shell gives — with the certificates and proxies npm needs on a machine behind a
    // proxy or a private CA — and npm (serverless-esbuild's packager) from its cache where it can:
    // its `npm ci` of the externals fetches what the cache lacks.
    env = { PATH: process.env.PATH, HOME: process.env.HOME, ...NETWORK_ENV, ...QUIET_OSLS_ENV, AWS_ACCESS_KEY_ID: 'local', AWS_SECRET_ACCESS_KEY: 'local', npm_config_prefer_offline: 'true', npm_config_audit: 'false', npm_config_fund: 'false' };
  }, { timeout: 300_000 });
  after(async () => {
    await db?.drop();
    rmSync(work, { recursive: true, force: true });
  });

  /** Packages the service; checks the template and every QueueBox zip against the bundles on disk; returns the path of the zip of the service's function `order`. */
  async function packageService(plugins: string[], esbuild: Record<string, unknown> | undefined, sqlFunction = false): Promise<string> {
    writeFileSync(join(service, 'serverless.yml'), serviceYml(plugins, esbuild, sqlFunction));
    const packaged = await osls(['package', '--stage', 'test']);
    assert.equal(packaged.code, 0, explain(packaged));
    const resources = (JSON.parse(readFileSync(join(service, '.serverless/cloudformation-template-update-stack.json'), 'utf8')) as { Resources: Record<string, LambdaFunction> }).Resources;
    const order = resources.OrderLambdaFunction!.Properties;
    assert.equal(order.Handler, 'src/handler.handler');
    for (const fn of FUNCTIONS) {
      const props = resources[functionLogicalId(fn.name)]!.Properties;
      assert.deepEqual([props.Handler, props.Code.S3Key.split('/').at(-1)], [`.queuebox/${fn.name}/index.handler`, `${functionKey(fn.name)}.zip`], fn.name);
      // What osls packs without serverless-esbuild: the function's bundle as QueueBox's plugin built it, and the configuration.
      const zip = join(service, `.serverless/${functionKey(fn.name)}.zip`);
      const built = filesUnder(join(service, '.queuebox', fn.name), service);
      assert.deepEqual(zipEntries(zip).sort(), [...built, '.queuebox/queuebox.yml'].sort(), `${fn.name}: its .queuebox/ bundle, nothing else`);
      assert.ok(built.includes(`.queuebox/${fn.name}/index.js`), `${fn.name} was bundled by QueueBox's plugin`);
      const shipped = zipFiles(zip, (name) => name === `.queuebox/${fn.name}/index.js`).get(`.queuebox/${fn.name}/index.js`);
      assert.ok(shipped?.equals(readFileSync(join(service, '.queuebox', fn.name, 'index.js'))), `${fn.name}: the zip's index.js is QueueBox's bundle, not rebuilt`);
    }
    return join(service, '.serverless', order.Code.S3Key.split('/').at(-1)!);
  }

  /** Unzips the function's zip into a folder without node_modules and runs `bundle` from it: the row is in the outbox. */
  async function invokeUnzipped(zip: string, folder: string, bundle: string, orderId: string): Promise<void> {
    const dir = join(work, folder);
    unzipTo(zip, dir);
    const result = await run(process.execPath, ['--input-type=module', '-e', INVOKE(bundle, orderId)], { cwd: dir, env: { PATH: process.env.PATH, HOME: process.env.HOME, APP_DATABASE_URL: db.url, APP_SCHEMA: db.schema } });
    assert.equal(result.code, 0, explain(result));
    const { id } = JSON.parse(result.stdout) as { id: string };
    assert.deepEqual(await db.query(`SELECT key, state FROM "${db.schema}".outbox WHERE id = $1`, [id]), [{ key: orderId, state: 'pending' }]);
  }

  it('[queuebox/serverless, serverless-esbuild], individually, no esbuild setting (CommonJS): the function zip holds its bundle alone, which enqueues from a folder without node_modules', async () => {
    const zip = await packageService(['queuebox/serverless', 'serverless-esbuild'], undefined);
    assert.deepEqual(zipEntries(zip), ['src/handler.js'], 'no QueueBox bundle, no node_modules');
    await invokeUnzipped(zip, 'lambda-cjs', './src/handler.js', 'o-cjs');
  });

  it('`osls invoke local -f queuebox<Name>` looks for the bundle in serverless-esbuild\'s build folder, where it is not', async () => {
    const invoked = await osls(['invoke', 'local', '-f', 'queueboxMigrate', '--stage', 'test']);
    assert.notEqual(invoked.code, 0, explain(invoked));
    assert.match(invoked.stdout + invoked.stderr, /Exception encountered when loading .*\.esbuild\/\.build\/\.queuebox\/migrate\/index/);
    rmSync(join(service, '.esbuild'), { recursive: true, force: true });
  });

  it('[serverless-esbuild, queuebox/serverless], individually, ESM (.mjs and the require banner), external mssql: the same, and mssql ships with the function that imports it only', async () => {
    const zip = await packageService(['serverless-esbuild', 'queuebox/serverless'], { format: 'esm', outputFileExtension: '.mjs', banner: { js: REQUIRE_BANNER }, external: ['mssql'] }, true);
    assert.deepEqual(zipEntries(zip), ['src/handler.mjs'], 'no QueueBox bundle, no node_modules, mssql not imported');
    await invokeUnzipped(zip, 'lambda-esm', './src/handler.mjs', 'o-esm');
    const sqlZip = join(service, '.serverless/sqlOrder.zip');
    const shipped = zipEntries(sqlZip);
    assert.deepEqual(shipped.filter((f) => !f.startsWith('node_modules/')), ['src/sql-handler.mjs']);
    for (const name of ['mssql', 'tedious']) assert.ok(shipped.includes(`node_modules/${name}/package.json`), `ships ${name}`);
    for (const name of ['queuebox', 'pg']) assert.ok(!shipped.some((f) => f.startsWith(`node_modules/${name}/`)), `bundled, not shipped: ${name}`);
    // Lambda loads it from the unzipped folder: mssql resolves from the zip's node_modules.
    const dir = join(work, 'lambda-sql');
    unzipTo(sqlZip, dir);
    const loaded = await run(process.execPath, ['--input-type=module', '-e', 'import("./src/sql-handler.mjs").then((m) => console.log(typeof m.handler))'], { cwd: dir, env: { PATH: process.env.PATH, HOME: process.env.HOME } });
    assert.deepEqual([loaded.code, loaded.stdout], [0, 'function\n'], explain(loaded));
  });
});
