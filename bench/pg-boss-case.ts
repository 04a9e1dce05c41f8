/**
 * Peer: pg-boss 10.4.2 draining the same number of jobs with a no-op handler.
 *
 * Settings (its best documented throughput path): `workers` loops of `fetch(queue, { batchSize:
 * 100 })` → `complete(queue, ids)` back to back, i.e. the `work()` loop without its minimum 0.5 s
 * `pollingIntervalSeconds` sleep; `supervise`/`schedule` off so no maintenance runs during the
 * drain. Keyed workloads: the queue uses policy `singleton` with `singletonKey` = key, which
 * pg-boss documents as "one active job per key"; it fetches in `created_on` order, so per-key
 * order holds while one job per key is active. A fetch whose batch collides with an active key
 * fails the unique index and returns no jobs (counted in `notes.emptyFetches`).
 * Jobs are seeded with one `INSERT … SELECT` into pg-boss's `job` table (the columns its own
 * `insert()` fills), so seeding 1,000,000 jobs takes seconds.
 */
import PgBoss from 'pg-boss';
import type { BenchCase, CaseContext, DrainResult, Latency } from './bench-case.ts';
import { quoteIdent } from '../lib/db/postgres/names.ts';
import { dropSchema } from './outbox-table.ts';
import { keyExpression } from './workloads.ts';

const QUEUE = 'bench';
const BATCH = 100;

function newBoss(ctx: CaseContext): PgBoss {
  const boss = new PgBoss({ connectionString: ctx.url, schema: ctx.schema, supervise: false, schedule: false, max: ctx.workers + 1 });
  boss.on('error', () => {});
  return boss;
}

async function prepare(ctx: CaseContext): Promise<void> {
  const boss = newBoss(ctx);
  await boss.start();
  const keyed = ctx.workload.keys > 0;
  await boss.createQueue(QUEUE, { name: QUEUE, policy: keyed ? 'singleton' : 'standard' });
  await boss.stop({ graceful: false });
  const table = `${quoteIdent(ctx.schema)}.job`;
  await ctx.probe.query(
    `INSERT INTO ${table} (name, data, singleton_key, policy, keep_until)
     SELECT $1, jsonb_build_object('i', g, 'body', 'x'), ${keyExpression(ctx.workload, 'g')}, $2, now() + interval '14 days'
       FROM generate_series(1, $3::int) AS g ORDER BY g`,
    [QUEUE, keyed ? 'singleton' : 'standard', ctx.workload.seed],
  );
  await ctx.probe.query(`ANALYZE ${table}`);
}

async function drain(ctx: CaseContext): Promise<DrainResult> {
  const boss = newBoss(ctx);
  await boss.start();
  const target = ctx.workload.drain;
  const stopAt = Date.now() + ctx.timeLimitMs;
  let moved = 0;
  let emptyFetches = 0;
  let errors = 0;
  const loop = async () => {
    while (moved < target && Date.now() < stopAt) {
      const jobs = await boss.fetch(QUEUE, { batchSize: BATCH });
      if (jobs.length === 0) {
        emptyFetches++;
        await new Promise((resolve) => setTimeout(resolve, 1));
        continue;
      }
      // With policy `singleton`, concurrent fetch and complete can deadlock on the unique index
      // of active keys; the bench retries the complete and counts it.
      for (let attempt = 1; ; attempt++) {
        try {
          await boss.complete(QUEUE, jobs.map((j) => j.id));
          break;
        } catch (error) {
          errors++;
          if (attempt >= 5) throw error;
        }
      }
      moved += jobs.length;
    }
  };
  try {
    await Promise.all(Array.from({ length: ctx.workers }, loop));
  } finally {
    await boss.stop({ graceful: false });
  }
  return { moved: Math.min(moved, target), capped: moved < target, notes: { emptyFetches, completeErrors: errors } };
}

async function latency(ctx: CaseContext): Promise<Latency | null> {
  const { rows } = await ctx.probe.query<{ p50: number | null; p99: number | null }>(
    `SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms) AS p50, percentile_cont(0.99) WITHIN GROUP (ORDER BY ms) AS p99
       FROM (SELECT EXTRACT(EPOCH FROM completed_on - started_on) * 1000 AS ms
               FROM ${quoteIdent(ctx.schema)}.job WHERE name = $1 AND state = 'completed') s`,
    [QUEUE],
  );
  const r = rows[0]!;
  return r.p50 === null || r.p99 === null ? null : { p50Ms: r.p50, p99Ms: r.p99 };
}

export const pgBossCase: BenchCase = {
  name: 'pg-boss',
  describe: (ctx) =>
    `pg-boss 10.4.2, ${ctx.workers} loop(s) x fetch(batchSize ${BATCH}) -> complete(ids), supervise/schedule off${ctx.workload.keys > 0 ? ', policy singleton + singletonKey' : ''}`,
  prepare,
  drain,
  latency,
  cleanup: (ctx) => dropSchema(ctx.probe, ctx.schema),
};
