/**
 * Runs one bench case in its own process, so its peak RSS is its own.
 *
 * Input: one JSON argument (`ChildInput`). Output: the last stdout line is the `CaseResult` JSON.
 * Round trips are counted only during `drain`; RSS is sampled every 50 ms during `drain` and
 * `maxRSS` (whole child lifetime) is reported too.
 */
import { loadavg } from 'node:os';
import { warmSchema, type BenchCase, type CaseContext, type CaseSettings } from './bench-case.ts';
import { loadCase } from './cases.ts';
import { installQueryCounter, queryCount, uncountedClient } from './query-counter.ts';
import { cpuSample, postgresSeconds } from './server-cpu.ts';
import type { Workload } from './workloads.ts';

export interface ChildInput {
  caseName: string;
  url: string;
  /** The case's schema, named by the parent (`child-runner.ts`), which drops it on Ctrl-C. */
  schema: string;
  workload: Workload;
  workers: number;
  timeLimitMs: number;
  /** Messages drained from a separate table of the same shape before the timed drain (0: none). */
  warmup?: number;
  sqs?: { endpoint: string; queueUrl: string };
  /** The case's tunables (see `CaseContext.settings`). */
  settings?: CaseSettings;
}

/** One JSON line of the bench output. */
export interface CaseResult {
  case: string;
  workload: string;
  settings: string;
  /** The tunables the case ran with (`ChildInput.settings`), absent for its defaults. */
  tuning?: CaseSettings;
  messages: number;
  capped: boolean;
  seconds: number;
  messagesPerSecond: number;
  p50Ms: number | null;
  p99Ms: number | null;
  roundTripsPerMessage: number;
  peakRssMb: number;
  /** CPU time (user + system) of this process during the drain, per 1,000 messages moved. */
  cpuMsPer1000: number;
  /**
   * CPU time of the PostgreSQL server's processes during the drain, per 1,000 messages moved
   * (`server-cpu.ts`: every session of a server on this machine); null when no `postgres`
   * process is visible (a remote server).
   */
  serverCpuMsPer1000?: number | null;
  maxRssMb: number;
  prepareSeconds: number;
  /** 1-minute load average when the drain started (the machine is shared). */
  loadAverage: number;
  /** msg/s of every run of this case when the bench ran it several times (this line is the median run). */
  runs?: number[];
  notes?: Record<string, number | string>;
}

/**
 * Drains `messages` messages of the workload's shape from a separate schema (untimed, uncounted),
 * so the timed drain measures a warm process — V8 has compiled the hot paths, as in a reused
 * Lambda container — and not JIT start-up, which weighs heavily in a half-second drain.
 */
async function warmUp(c: BenchCase, ctx: CaseContext, messages: number): Promise<void> {
  const warm: CaseContext = { ...ctx, schema: warmSchema(ctx.schema), workload: { name: `${ctx.workload.name}-warmup`, seed: messages, drain: messages, keys: Math.min(ctx.workload.keys, messages), ...(ctx.workload.hot ? { hot: true } : {}) } };
  try {
    await c.prepare(warm);
    await c.drain(warm);
  } finally {
    await c.cleanup(warm).catch(() => {});
  }
}

async function runCase(c: BenchCase, ctx: CaseContext, input: ChildInput): Promise<CaseResult> {
  if ((input.warmup ?? 0) > 0) await warmUp(c, ctx, input.warmup!);
  const p0 = performance.now();
  await c.prepare(ctx);
  const prepareSeconds = (performance.now() - p0) / 1000;
  let peak = process.memoryUsage.rss();
  const sampler = setInterval(() => {
    peak = Math.max(peak, process.memoryUsage.rss());
  }, 50);
  const load = loadavg()[0]!;
  const q0 = queryCount();
  const cpu0 = process.cpuUsage();
  const server0 = cpuSample().postgres;
  const t0 = performance.now();
  const result = await c.drain(ctx);
  const seconds = (performance.now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  const server1 = cpuSample().postgres;
  const trips = queryCount() - q0;
  clearInterval(sampler);
  peak = Math.max(peak, process.memoryUsage.rss());
  const latency = await c.latency(ctx);
  return {
    case: input.caseName,
    workload: input.workload.name,
    settings: c.describe(ctx),
    ...(input.settings ? { tuning: input.settings } : {}),
    messages: result.moved,
    capped: result.capped,
    seconds: round(seconds, 3),
    messagesPerSecond: Math.round(result.moved / seconds),
    p50Ms: latency ? round(latency.p50Ms, 1) : null,
    p99Ms: latency ? round(latency.p99Ms, 1) : null,
    roundTripsPerMessage: result.moved === 0 ? 0 : round(trips / result.moved, 3),
    peakRssMb: round(peak / 1048576, 1),
    cpuMsPer1000: result.moved === 0 ? 0 : round((cpu.user + cpu.system) / 1000 / (result.moved / 1000), 1),
    serverCpuMsPer1000: server1.size === 0 || result.moved === 0 ? null : round((postgresSeconds(server0, server1) * 1000) / (result.moved / 1000), 1),
    maxRssMb: round(process.resourceUsage().maxRSS / 1024, 1),
    prepareSeconds: round(prepareSeconds, 1),
    loadAverage: round(load, 1),
    ...(result.notes ? { notes: result.notes } : {}),
  };
}

function round(value: number, digits: number): number {
  const f = 10 ** digits;
  return Math.round(value * f) / f;
}

async function main(): Promise<void> {
  const input = JSON.parse(process.argv[2] ?? '{}') as ChildInput;
  installQueryCounter();
  const c = await loadCase(input.caseName);
  const probe = await uncountedClient(input.url);
  const ctx: CaseContext = {
    url: input.url,
    schema: input.schema,
    workload: input.workload,
    workers: input.workers,
    timeLimitMs: input.timeLimitMs,
    probe,
    ...(input.sqs ? { sqs: input.sqs } : {}),
    ...(input.settings ? { settings: input.settings } : {}),
  };
  try {
    const result = await runCase(c, ctx, input);
    process.stdout.write(`\n${JSON.stringify(result)}\n`);
  } finally {
    await c.cleanup(ctx).catch(() => {});
    await probe.end();
  }
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    process.stderr.write(`${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    process.exit(1);
  },
);
