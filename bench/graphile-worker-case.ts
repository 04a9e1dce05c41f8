/**
 * Peer: graphile-worker 0.17.3 draining the same number of jobs with a no-op task.
 *
 * Settings (its batching options at their best in a sweep on this machine, see
 * docs/performance.md): one runner with `concurrency` = 12 × `workers` (jobs in flight),
 * `localQueue.size` 500 (the pool fetches and locks up to 500 jobs per `get_jobs` round trip and
 * hands them to the worker slots), `completeJobBatchDelay` 0 and `failJobBatchDelay` 0 (completions
 * of the same tick batched into one statement), `pollInterval` 100 ms (only matters when idle;
 * new jobs wake workers via LISTEN/NOTIFY), prepared statements on (its default),
 * `NO_LOG_SUCCESS`. Settings (`ctx.settings`: `npm run bench:sweep` tries them, `npm run bench`
 * runs each workload's best from bench/best-settings.json): `concurrency` (default 12 ×
 * `workers`) and `localQueue` (default 500; 0 or 1 = off). `GRAPHILE_CONCURRENCY` and
 * `GRAPHILE_LOCAL_QUEUE` override both. Keyed workloads use
 * `queue_name` = key: graphile-worker runs the jobs of one named queue serially, in order —
 * its documented per-key ordering — but only with localQueue off: with it on, one batch fetch
 * takes several jobs of a queue and the worker slots run them at once (graphile/worker#621,
 * reproduced on 0.17.3). The case counts that (`notes.orderViolations`: a job that started while
 * another of its queue was running, or after a later one), and `npm run bench:sweep` runs keyed
 * workloads with localQueue off only. Its "batch jobs" (array payloads merged under one `job_key`)
 * are not used: they turn many messages into one job that succeeds or fails as a whole.
 * Jobs are seeded with `add_jobs(job_spec[])` in chunks, server-side. graphile-worker deletes a
 * job when it completes, so claim-to-complete latency is measured in process, from the
 * `job:start` event (after `get_job` returned) to `job:complete` (after `complete_job`).
 */
import { run, runMigrations, type Logger } from 'graphile-worker';
import { Logger as GraphileLogger } from 'graphile-worker';
import type { BenchCase, CaseContext, DrainResult, Latency } from './bench-case.ts';
import { quoteIdent } from '../lib/db/postgres/names.ts';
import { dropSchema } from './outbox-table.ts';
import { keyExpression } from './workloads.ts';
import { OrderCheck } from './order-check.ts';

const SEED_CHUNK = 100_000;
const POLL_INTERVAL_MS = 100;
const silentLogger: Logger = new GraphileLogger(() => () => {});
const latencies = new Map<string, number[]>();

function setting(ctx: CaseContext, name: 'concurrency' | 'localQueue', env: string | undefined, fallback: number): number {
  const value = env !== undefined ? Number(env) : (ctx.settings?.[name] ?? fallback);
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 0) throw new Error(`graphile-worker: setting ${name} = ${String(value)} is not a non-negative integer`);
  return value;
}
const concurrencyFor = (ctx: CaseContext) => Math.max(1, setting(ctx, 'concurrency', process.env.GRAPHILE_CONCURRENCY, 12 * ctx.workers));
const localQueueSize = (ctx: CaseContext) => setting(ctx, 'localQueue', process.env.GRAPHILE_LOCAL_QUEUE, 500);

async function prepare(ctx: CaseContext): Promise<void> {
  process.env.NO_LOG_SUCCESS = '1';
  await runMigrations({ connectionString: ctx.url, schema: ctx.schema, logger: silentLogger });
  const s = quoteIdent(ctx.schema);
  for (let from = 1; from <= ctx.workload.seed; from += SEED_CHUNK) {
    const to = Math.min(ctx.workload.seed, from + SEED_CHUNK - 1);
    await ctx.probe.query(
      `SELECT count(*) FROM ${s}.add_jobs(ARRAY(
         SELECT ROW('noop', json_build_object('i', g, 'body', 'x'), ${keyExpression(ctx.workload, 'g')},
                    NULL, NULL, NULL, NULL, NULL)::${s}.job_spec
           FROM generate_series($1::int, $2::int) AS g ORDER BY g))`,
      [from, to],
    );
  }
}

async function drain(ctx: CaseContext): Promise<DrainResult> {
  const target = ctx.workload.drain;
  const durations: number[] = [];
  latencies.set(ctx.schema, durations);
  const started = new Map<string, number>();
  let moved = 0;
  let finish!: () => void;
  const done = new Promise<void>((resolve) => (finish = resolve));
  const runner = await run({
    connectionString: ctx.url,
    schema: ctx.schema,
    concurrency: concurrencyFor(ctx),
    maxPoolSize: concurrencyFor(ctx) + 2,
    pollInterval: POLL_INTERVAL_MS,
    noHandleSignals: true,
    logger: silentLogger,
    // The task yields once, as any real task awaits its I/O: a job that starts while another of its
    // queue has not finished shows up in the order check (a task that never yields hides it).
    taskList: { noop: async () => void (await new Promise((resolve) => setImmediate(resolve))) },
    preset: {
      worker: {
        ...(localQueueSize(ctx) > 1 ? { localQueue: { size: localQueueSize(ctx) } } : {}),
        completeJobBatchDelay: 0,
        failJobBatchDelay: 0,
      },
    },
  });
  // Per-queue order as graphile-worker ran it: a job of a named queue that starts before the
  // previous job of that queue has completed, or before an earlier one, breaks its documented
  // "one at a time, in series" (with localQueue on it does: graphile/worker#621).
  const order = new OrderCheck();
  runner.events.on('job:start', ({ job }) => {
    started.set(job.id, performance.now());
    order.start(job.job_queue_id, (job.payload as { i: number }).i);
  });
  runner.events.on('job:complete', ({ job, error }) => {
    order.finish(job.job_queue_id);
    if (error) return;
    const t = started.get(job.id);
    if (t !== undefined) durations.push(performance.now() - t);
    started.delete(job.id);
    moved++;
    if (moved >= target) finish();
  });
  const cap = setTimeout(finish, ctx.timeLimitMs);
  await done;
  clearTimeout(cap);
  const at = moved;
  await runner.stop();
  return { moved: Math.min(at, target), capped: at < target, ...(ctx.workload.keys > 0 ? { notes: order.notes() } : {}) };
}

async function latency(ctx: CaseContext): Promise<Latency | null> {
  const d = (latencies.get(ctx.schema) ?? []).sort((a, b) => a - b);
  if (d.length === 0) return null;
  const at = (q: number) => d[Math.min(d.length - 1, Math.floor(q * d.length))]!;
  return { p50Ms: at(0.5), p99Ms: at(0.99) };
}

export const graphileWorkerCase: BenchCase = {
  name: 'graphile-worker',
  describe: (ctx) =>
    `graphile-worker 0.17.3, concurrency ${concurrencyFor(ctx)}, localQueue ${localQueueSize(ctx) > 1 ? localQueueSize(ctx) : 'off'}, completeJobBatchDelay 0, pollInterval ${POLL_INTERVAL_MS} ms${ctx.workload.keys === 0 ? '' : localQueueSize(ctx) > 1 ? ', queue_name = key, NOT serial per key with localQueue on (graphile/worker#621)' : ', queue_name = key (serial per key)'}`,
  prepare,
  drain,
  latency,
  cleanup: (ctx) => dropSchema(ctx.probe, ctx.schema),
};
