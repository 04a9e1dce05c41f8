import pg from 'pg';
import { Session } from 'node:inspector/promises';
import { writeFileSync } from 'node:fs';
import { queueboxNoopCase } from './bench/queuebox-case.ts';
import type { CaseContext } from './bench/bench-case.ts';
import { PostgresDriver } from './lib/db/postgres/postgres-driver.ts';
const trace: string[] = [];
let t0 = 0;
for (const m of ['outboxClaimMany', 'outboxMarkSentMany'] as const) {
  const proto = PostgresDriver.prototype as any;
  const desc = Object.getOwnPropertyDescriptor(proto, m);
}

const url = process.env.DATABASE_URL!;
const probe = new pg.Client({ connectionString: url });
await probe.connect();
const keys = Number(process.env.KEYS ?? 0);
const workers = Number(process.env.WORKERS ?? 1);
const session = new Session(); session.connect();
await session.post('Profiler.enable');
for (let i = 0; i < 4; i++) {
  const ctx: CaseContext = { url, schema: `qb_prof_${i}`, workload: { name: 'w', seed: 20000, drain: 20000, keys }, workers, timeLimitMs: 60000, probe };
  await queueboxNoopCase.prepare(ctx);
  if (i === 3) await session.post('Profiler.start');
  const c0 = process.cpuUsage();
  const at = performance.now();
  const r = await queueboxNoopCase.drain(ctx);
  const cpu = process.cpuUsage(c0);
  console.log(i, Math.round(20000 / ((performance.now() - at) / 1000)), 'cpu ms/1k', ((cpu.user + cpu.system) / 1000 / 20).toFixed(1), JSON.stringify(r.notes));
  if (i === 3) { const { profile } = await session.post('Profiler.stop'); writeFileSync('/tmp/prof/drain.cpuprofile', JSON.stringify(profile)); }
  await queueboxNoopCase.cleanup(ctx);
}
await probe.end();
