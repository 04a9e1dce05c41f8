/**
 * `npm run bench`: every case x workload against one PostgreSQL, one child process per case.
 *
 * Options:
 *   --quick                 small sizes (2,000 messages; 100,000 backlog, drain 5,000), < 60 s
 *   --cases a,b             subset of cases (default: all, see bench/cases.ts)
 *   --workloads a,b         subset of workloads (see bench/workloads.ts: unkeyed, keys-100, keys-1000,
 *                           keys-10000, hot-keys-small, backlog, keys-100-backlog, keys-1000-backlog,
 *                           hot-keys)
 *   --sizes m[,b[,d]]       messages per workload, backlog rows, backlog drain
 *   --workers n             parallel loops / passes / worker slots per case (default 2)
 *   --peer-seconds s        time cap of a peer's or the SQS case's drain (default 20; quick 5)
 *   --rounds n              runs of the floor and QueueBox cases per workload, alternating; the
 *                           median is reported (default 3; quick 1; peers run once)
 *   --warmup n              messages each case child drains from a separate table of the same
 *                           shape before its timed drain, so the timed drain runs in a warm
 *                           process as in a reused Lambda container (default 5,000 — a
 *                           quarter of a workload; quick 2,000; 0 = a cold process)
 *   --best path|none        per-workload settings of the floor and graphile-worker (default
 *                           bench/best-settings.json, written by `npm run bench:sweep`; a backlog
 *                           not swept takes its small-table workload's; `none`: each case's
 *                           defaults — the floor 100 x 2 loops)
 *   --set case.name=value   a setting for every workload of a case, over the file's (repeatable;
 *                           e.g. queuebox.batchSize=1000, floor.loops=2, graphile-worker.localQueue=0)
 * Uses DATABASE_URL, or starts an embedded PostgreSQL. Prints one JSON line per case, then a table.
 */
import { parseArgs } from 'node:util';
import { startEmbeddedDatabase, type EmbeddedDatabase } from '../lib/local/embedded-database.ts';
import type { CaseSettings } from './bench-case.ts';
import { BEST_SETTINGS_PATH, bestFor, readBestSettings } from './best-settings.ts';
import type { CaseResult } from './case-child.ts';
import { CASE_NAMES } from './cases.ts';
import { buildChild, medianRun, runChild } from './child-runner.ts';
import { startSqsEmulator, type SqsEmulator } from './sqs-emulator.ts';
import { FULL_SIZES, QUICK_SIZES, parseSizes, workloads } from './workloads.ts';
import { formatSummary, formatTable, type RatedResult } from './format-table.ts';
import { serverInfo } from './server-info.ts';
import { dropSchemasOnSignal } from '../test/helpers/drop-on-signal.ts';

/** Cases whose drain is capped by `--peer-seconds` (slow by nature) rather than by the generous default. */
const PEERS = new Set(['pg-boss', 'graphile-worker', 'queuebox-sqs', 'queuebox-rows-1-sqs']);
const DEFAULT_CAP_MS = 300_000;

async function main(): Promise<void> {
  dropSchemasOnSignal();
  const { values } = parseArgs({
    options: {
      quick: { type: 'boolean', default: false },
      cases: { type: 'string' },
      workloads: { type: 'string' },
      sizes: { type: 'string' },
      workers: { type: 'string', default: '2' },
      'peer-seconds': { type: 'string' },
      rounds: { type: 'string' },
      warmup: { type: 'string' },
      best: { type: 'string', default: BEST_SETTINGS_PATH },
      set: { type: 'string', multiple: true, default: [] },
    },
  });
  const base = values.quick ? QUICK_SIZES : FULL_SIZES;
  const sizes = values.sizes ? parseSizes(values.sizes, base) : base;
  const caseNames = values.cases ? values.cases.split(',') : [...CASE_NAMES];
  const unknown = caseNames.filter((n) => !CASE_NAMES.includes(n));
  if (unknown.length) throw new Error(`unknown case(s) ${unknown.join(', ')}; known: ${CASE_NAMES.join(', ')}`);
  const all = workloads(sizes);
  const selected = values.workloads ? all.filter((w) => values.workloads!.split(',').includes(w.name)) : all;
  const workers = Number(values.workers);
  const peerCapMs = Number(values['peer-seconds'] ?? (values.quick ? 5 : 20)) * 1000;
  const rounds = Math.max(1, Number(values.rounds ?? (values.quick ? 1 : 3)));
  const warmup = Number(values.warmup ?? (values.quick ? 2000 : 5000));
  if (!Number.isInteger(warmup) || warmup < 0) throw new Error(`--warmup: ${values.warmup} is not a non-negative integer`);

  const best = values.best === 'none' ? {} : readBestSettings(values.best);
  const overrides = parseSets(values.set);
  const settingsOf = (caseName: string, workload: string) => {
    const found = bestFor(best, caseName, workload);
    if (found && found.from !== workload) process.stderr.write(`${caseName}/${workload}: the best settings of ${found.from} (not swept on ${workload})\n`);
    const settings = { ...found?.settings, ...overrides[caseName] };
    return Object.keys(settings).length > 0 ? { settings } : {};
  };

  let embedded: EmbeddedDatabase | undefined;
  let url = process.env.DATABASE_URL;
  if (!url) {
    process.stderr.write('DATABASE_URL not set: starting an embedded PostgreSQL\n');
    embedded = await startEmbeddedDatabase();
    url = embedded.url;
  }
  let sqs: SqsEmulator | undefined;
  if (caseNames.some((n) => n.endsWith('-sqs'))) sqs = await startSqsEmulator();
  const childScript = await buildChild();
  const info = await serverInfo(url);
  process.stderr.write(`${info}\n`);
  const results: RatedResult[] = [];
  try {
    for (const workload of selected) {
      // The floor and QueueBox's own cases run `rounds` times, alternating, and report their
      // median drain: a machine shared with other work moves both alike within a round. The
      // backlogs too, each run on a table seeded anew (about 10 s for 1,000,000 rows): their
      // drains are short (50,000 messages, 1–2 s), and one run of each moved the ratio by up to
      // 0.2 from run to run. Peers run once.
      const runs = new Map<string, CaseResult[]>();
      for (let round = 0; round < rounds; round++) {
        for (const caseName of caseNames) {
          if (round > 0 && PEERS.has(caseName)) continue;
          const result = await runChild(childScript, {
            caseName,
            url,
            workload,
            workers,
            warmup,
            timeLimitMs: PEERS.has(caseName) ? peerCapMs : DEFAULT_CAP_MS,
            ...(sqs && caseName.endsWith('-sqs') ? { sqs: await sqs.newQueue() } : {}),
            ...settingsOf(caseName, workload.name),
          }).catch((error: unknown) => {
            process.stderr.write(`${error instanceof Error ? error.message : String(error)}\n`);
            return undefined;
          });
          if (result) runs.set(caseName, [...(runs.get(caseName) ?? []), result]);
        }
      }
      const medians = new Map([...runs].map(([name, list]) => [name, medianRun(list)]));
      const floor = medians.get('floor');
      const peer = medians.get('graphile-worker');
      const ratio = (r: CaseResult, to: CaseResult | undefined, self: string) => (to && r.case !== self ? Math.round((r.messagesPerSecond / to.messagesPerSecond) * 100) / 100 : null);
      for (const caseName of caseNames) {
        const result = medians.get(caseName);
        if (!result) continue;
        const withRatio: RatedResult = { ...result, ratioToFloor: ratio(result, floor, 'floor'), ratioToGraphileWorker: ratio(result, peer, 'graphile-worker') };
        results.push(withRatio);
        process.stdout.write(`${JSON.stringify(withRatio)}\n`);
      }
    }
  } finally {
    await sqs?.stop();
    await embedded?.stop();
  }
  process.stdout.write(`\n${formatTable(results)}\n\n${formatSummary(results)}\n\n${info}\n`);
}

/** `--set case.name=value` → case → settings (numbers and booleans parsed; anything else a string). */
function parseSets(sets: string[]): Record<string, CaseSettings> {
  const out: Record<string, CaseSettings> = {};
  for (const item of sets) {
    const match = /^([\w-]+)\.(\w+)=(.+)$/.exec(item);
    if (!match) throw new Error(`--set ${item}: expected case.name=value`);
    const [, caseName, name, raw] = match as unknown as [string, string, string, string];
    if (!CASE_NAMES.includes(caseName)) throw new Error(`--set ${item}: unknown case ${caseName}`);
    const value = raw === 'true' ? true : raw === 'false' ? false : Number.isFinite(Number(raw)) ? Number(raw) : raw;
    (out[caseName] ??= {})[name] = value;
  }
  return out;
}

main().catch((error: unknown) => {
  process.stderr.write(`${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exit(1);
});
