/**
 * `npm run build`: bundles QueueBox's functions into `.queuebox/` as `osls package` does (the
 * plugin's bundler, `lib/serverless/bundle.ts`), without packaging, and prints each bundle's size.
 *
 * Usage: `tsx infra/build.ts [--config queuebox.yml] [--out .queuebox]`; the config path defaults to
 * `QUEUEBOX_CONFIG`, else `queuebox.yml`, else `queuebox.example.yml` (a fresh clone builds).
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { loadConfig } from '../lib/config/load-config.ts';
import { bundleFunctions, loadEsbuild, type BundleReport } from '../lib/serverless/bundle.ts';

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

/** Bundles every function with the configuration file; throws `ConfigError` for a bad configuration. */
export async function buildAll(options: BuildOptions): Promise<BundleReport> {
  // Build from the file alone: deploy-time QUEUEBOX_* overrides must not leak into the bundles.
  const config = loadConfig({ path: options.configPath, env: {} });
  return bundleFunctions({
    esbuild: await loadEsbuild('.'),
    config,
    configPath: options.configPath,
    outDir: options.outDir,
    log: options.log ?? ((line: string) => process.stderr.write(`${line}\n`)),
  });
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { values } = parseArgs({ options: { config: { type: 'string' }, out: { type: 'string' } } });
  const configPath = values.config ?? process.env.QUEUEBOX_CONFIG ?? defaultConfigPath();
  if (configPath.endsWith(EXAMPLE_CONFIG)) process.stderr.write(`no queuebox.yml: building with ${EXAMPLE_CONFIG} (copy it to queuebox.yml and edit it)\n`);
  try {
    await buildAll({ configPath, outDir: values.out ?? '.queuebox' });
  } catch (error) {
    process.stderr.write(`build failed: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exitCode = 1;
  }
}
