/**
 * `npm run bench:sweep`: the floor and graphile-worker at their best on this machine. For each
 * workload it runs every candidate setting of each case once, runs the two fastest again
 * (`--confirm` times, alternating; default once), and writes the setting with the best median run to
 * bench/best-settings.json, which `npm run bench` then uses (see bench/best-settings.ts).
 *
 * Candidates:
 * - floor, in two stages: `--batches` × `--loops` with the plain statement (`claim` cte, not
 *   prepared), then the other statement shapes (`claim` in, `prepared` on) at the best size;
 * - graphile-worker: `--concurrency` × `--local-queue`; on a keyed workload `--concurrency` with
 *   localQueue off, the only setting that keeps its per-queue order (graphile/worker#621). A run
 *   that broke per-key order (the case's order check) is never a winner.
 *
 * Options: `--cases floor,graphile-worker`, `--workloads a,b` (default all), `--sizes m[,b[,d]]`
 * (default the full sizes), `--batches 100,1000`, `--loops 2,4`, `--concurrency 24,48`,
 * `--local-queue 500,2000`, `--confirm n` (default 1), `--warmup n` (default 5,000),
 * `--peer-seconds s` (graphile-worker's drain cap, default 20), `--out path`, `--dry-run` (print
 * the winners, write nothing). Uses DATABASE_URL, or starts an embedded PostgreSQL.
 */
import { parseArgs } from 'node:util';
import { startEmbeddedDatabase, type EmbeddedDatabase } from '../lib/local/embedded-database.ts';
import type { CaseSettings } from './bench-case.ts';
import { BEST_SETTINGS_PATH, writeBestSettings, type BestSettings } from './best-settings.ts';
import type { CaseResult } from './case-child.ts';
import { buildChild, medianRun, runChild } from './child-runner.ts';
import { dropSchemasOnSignal } from '../test/helpers/drop-on-signal.ts';
import { FULL_SIZES, parseSizes, workloads } from './workloads.ts';
import { orderKept } from './order-check.ts';

const SWEPT = ['floor', 'graphile-worker'];

const list = (text: string) => text.split(',').map((p) => p.trim());
const numbers = (name: string, text: string) =>
  list(text).map((p) => {
    const n = Number(p);
    if (!Number.isInteger(n) || n < 0) throw new Error(`--${name}: ${p} is not a non-negative integer`);
    return n;
  });
const label = (s: CaseSettings) =>
  Object.entries(s)
    .map(([k, v]) => `${k}=${String(v)}`)
    .join(' ');

async function main(): Promise<void> {
  dropSchemasOnSignal();
  const { values } = parseArgs({
    options: {
      cases: { type: 'string', default: SWEPT.join(',') },
      workloads: { type: 'string' },
      sizes: { type: 'string' },
      batches: { type: 'string', default: '100,1000' },
      loops: { type: 'string', default: '2,4' },
      concurrency: { type: 'string', default: '24,48' },
      'local-queue': { type: 'string', default: '500,2000' },
      confirm: { type: 'string', default: '1' },
      warmup: { type: 'string', default: '5000' },
      'peer-seconds': { type: 'string', default: '20' },
      out: { type: 'string', default: BEST_SETTINGS_PATH },
      'dry-run': { type: 'boolean', default: false },
    },
  });
  const caseNames = list(values.cases);
  const unknown = caseNames.filter((n) => !SWEPT.includes(n));
  if (unknown.length) throw new Error(`--cases: ${unknown.join(', ')} not swept; sweepable: ${SWEPT.join(', ')}`);
  const sizes = values.sizes ? parseSizes(values.sizes, FULL_SIZES) : FULL_SIZES;
  const all = workloads(sizes);
  const selected = values.workloads ? all.filter((w) => list(values.workloads!).includes(w.name)) : all;
  const confirm = numbers('confirm', values.confirm)[0]!;
  const warmup = numbers('warmup', values.warmup)[0]!;
  const capMs = numbers('peer-seconds', values['peer-seconds'])[0]! * 1000;

  let embedded: EmbeddedDatabase | undefined;
  let url = process.env.DATABASE_URL;
  if (!url) {
    process.stderr.write('DATABASE_URL not set: starting an embedded PostgreSQL\n');
    embedded = await startEmbeddedDatabase();
    url = embedded.url;
  }
  const script = await buildChild('queuebox-bench-sweep');
  const best: BestSettings = {};
  try {
    for (const workload of selected) {
      for (const caseName of caseNames) {
        const tried = new Map<string, { settings: CaseSettings; runs: CaseResult[] }>();
        const attempt = async (settings: CaseSettings): Promise<void> => {
          const result = await runChild(script, { caseName, url: url!, workload, workers: 2, warmup, timeLimitMs: caseName === 'floor' ? 300_000 : capMs, settings }).catch((error: unknown) => {
            process.stderr.write(`${caseName}/${workload.name} ${label(settings)}: ${error instanceof Error ? error.message : String(error)}\n`);
            return undefined;
          });
          if (!result) return;
          const key = label(settings);
          if (!orderKept(result.notes)) {
            process.stderr.write(`${workload.name} ${caseName} ${key}: ${result.messagesPerSecond} msg/s with ${String(result.notes?.orderViolations)} per-key order violations: not eligible\n`);
            return;
          }
          const entry = tried.get(key) ?? { settings, runs: [] };
          entry.runs.push(result);
          tried.set(key, entry);
          process.stderr.write(`${workload.name} ${caseName} ${key}: ${result.messagesPerSecond} msg/s${result.capped ? ' (capped)' : ''}, load ${result.loadAverage}\n`);
        };
        const rate = (key: string) => medianRun(tried.get(key)!.runs).messagesPerSecond;
        const ranked = () => [...tried.keys()].sort((a, b) => rate(b) - rate(a));
        for (const settings of firstStage(caseName, workload.keys > 0, values)) await attempt(settings);
        if (caseName === 'floor' && tried.size > 0) {
          const size = tried.get(ranked()[0]!)!.settings;
          for (const shape of [{ claim: 'in', prepared: false }, { claim: 'cte', prepared: true }, { claim: 'in', prepared: true }]) await attempt({ ...size, ...shape });
        }
        const top = ranked().slice(0, 2);
        for (let round = 0; round < confirm; round++) for (const key of top) await attempt(tried.get(key)!.settings);
        // After the confirmation the winner is one of the confirmed (its median over all its runs).
        const order = confirm > 0 ? top.sort((a, b) => rate(b) - rate(a)) : ranked();
        if (order.length === 0) continue;
        const winner = medianRun(tried.get(order[0]!)!.runs);
        (best[caseName] ??= {})[workload.name] = {
          settings: tried.get(order[0]!)!.settings,
          messagesPerSecond: winner.messagesPerSecond,
          candidates: tried.size,
          runnerUp: order[1] ? rate(order[1]) : null,
          sizes,
          load: winner.loadAverage,
          measuredAt: new Date().toISOString(),
        };
        process.stdout.write(`${JSON.stringify({ workload: workload.name, case: caseName, best: order[0], messagesPerSecond: winner.messagesPerSecond, runs: winner.runs, runnerUp: order[1] ?? null, runnerUpRate: order[1] ? rate(order[1]) : null })}\n`);
        if (!values['dry-run']) writeBestSettings({ [caseName]: { [workload.name]: best[caseName][workload.name]! } }, values.out);
      }
    }
  } finally {
    await embedded?.stop();
  }
}

/** The floor's batch sizes × loops with the plain statement; graphile-worker's whole grid. */
function firstStage(caseName: string, keyed: boolean, values: { batches: string; loops: string; concurrency: string; 'local-queue': string }): CaseSettings[] {
  if (caseName === 'floor') {
    return numbers('batches', values.batches).flatMap((batch) => numbers('loops', values.loops).map((loops) => ({ batch, loops, claim: 'cte', prepared: false })));
  }
  // On a keyed workload only settings that keep graphile-worker's per-queue order compete: with
  // localQueue on, jobs of one named queue run at once (graphile/worker#621; the order check of
  // the case counts them), so a keyed candidate runs with localQueue off.
  const localQueues = keyed ? [0] : numbers('local-queue', values['local-queue']);
  return numbers('concurrency', values.concurrency).flatMap((concurrency) => localQueues.map((localQueue) => ({ concurrency, localQueue })));
}

main().catch((error: unknown) => {
  process.stderr.write(`${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exit(1);
});
