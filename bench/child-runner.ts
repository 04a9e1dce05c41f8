/**
 * Compiles the bench case child once per run and runs one case in it (`npm run bench`,
 * `npm run bench:sweep`).
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import { LAMBDA_NODE_TARGET } from '../lib/serverless/bundle.ts';
import { childProcess, createdSchema } from '../test/helpers/drop-on-signal.ts';
import { warmSchema } from './bench-case.ts';
import type { CaseResult, ChildInput } from './case-child.ts';

const here = dirname(fileURLToPath(import.meta.url));

/**
 * Compiles the case child once per run with esbuild, as `npm run build` compiles the Lambda
 * functions: the children then run plain JavaScript, like a deployed poller, instead of going
 * through the `tsx` loader (which added ~30 MB of RSS and CPU for on-the-fly compilation and
 * `keepNames` wrappers to every case). Dependencies stay in node_modules (`packages: 'external'`).
 * `name` keeps concurrent builds (a bench and a sweep) out of each other's directory.
 */
export async function buildChild(name = 'queuebox-bench'): Promise<string> {
  const outdir = join(here, '..', 'node_modules', '.cache', name);
  rmSync(outdir, { recursive: true, force: true });
  await build({
    entryPoints: { 'case-child': join(here, 'case-child.ts') },
    outdir,
    outExtension: { '.js': '.mjs' },
    // One chunk per case module, loaded when its case runs (see cases.ts).
    splitting: true,
    bundle: true,
    packages: 'external',
    format: 'esm',
    platform: 'node',
    target: LAMBDA_NODE_TARGET,
    sourcemap: true,
    logLevel: 'error',
  });
  return join(outdir, 'case-child.mjs');
}

/**
 * Runs one case in a child process; resolves with its result line. The case's schemas are named
 * here (`qb_bench_<random>` and its warm-up's `…_warm`), so that on Ctrl-C this process, which
 * kills the child, drops them (`drop-on-signal.ts`).
 */
export function runChild(script: string, options: Omit<ChildInput, 'schema'>): Promise<CaseResult> {
  const input: ChildInput = { ...options, schema: `qb_bench_${randomBytes(4).toString('hex')}` };
  const forget = [createdSchema(input.url, input.schema), createdSchema(input.url, warmSchema(input.schema))];
  return new Promise<CaseResult>((resolve, reject) => {
    const child = spawn(process.execPath, ['--enable-source-maps', script, JSON.stringify(input)], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    childProcess(child);
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    child.on('error', reject);
    child.on('close', (code) => {
      const last = out.trim().split('\n').pop() ?? '';
      if (code === 0 && last.startsWith('{')) resolve(JSON.parse(last) as CaseResult);
      else reject(new Error(`case ${input.caseName}/${input.workload.name} exited ${code}: ${err.trim().slice(0, 1500)}`));
    });
  }).finally(() => forget.forEach((f) => f()));
}

/** The run with the median throughput (lower middle for an even count), with every run's rate attached. */
export function medianRun(list: CaseResult[]): CaseResult {
  const sorted = [...list].sort((a, b) => a.messagesPerSecond - b.messagesPerSecond);
  const median = sorted[Math.floor((sorted.length - 1) / 2)]!;
  return { ...median, runs: list.map((r) => r.messagesPerSecond) };
}
