import pg from 'pg';
import type { CaseContext } from './bench/bench-case.ts';
import { seedOutbox, benchConfig } from './bench/outbox-table.ts';
import { PostgresDriver } from './lib/db/postgres/postgres-driver.ts';
import { NoopDestination } from './lib/destinations/noop-destination.ts';
import { QueueBoxMetrics } from './lib/observability/metrics.ts';
import { runOutboxPass } from './lib/outbox/outbox-pass.ts';
import { createRouter } from './lib/outbox/routes.ts';
import { createDeadline } from './lib/runtime/deadline.ts';
const url = process.env.DATABASE_URL!;
const keys = Number(process.env.KEYS ?? 1000);
const probe = new pg.Client({ connectionString: url });
await probe.connect();
for (let round = 0; round < 2; round++) {
  const ctx: CaseContext = { url, schema: `qb_trace_${round}`, workload: { name: 'w', seed: 20000, drain: 20000, keys }, workers: 1, timeLimitMs: 60000, probe };
  await probe.query(`DROP SCHEMA IF EXISTS qb_trace_${round} CASCADE`);
  await seedOutbox(ctx);
  const config = benchConfig(ctx, { destinations: { bench: { type: 'sqs', queueUrl: 'http://127.0.0.1:1/000000000000/bench', region: 'us-east-1' } }, outbox: { routes: [{ topicPattern: '**', destination: 'bench' }] } });
  const d = new PostgresDriver({ config, url });
  const t0 = performance.now();
  const log: string[] = [];
  const at = () => (performance.now() - t0).toFixed(1);
  const driver: any = {
    outboxClaimMany: async (p: any) => { const s = performance.now(); const r = await d.outboxClaimMany(p); log.push(`${at()} claim limit=${p.limit} rows=${r.length} ${(performance.now() - s).toFixed(1)}ms`); return r; },
    outboxMarkSentMany: async (p: any) => { const s = performance.now(); const r = await d.outboxMarkSentMany(p); log.push(`${at()} sent ${p.claims.length} ${(performance.now() - s).toFixed(1)}ms`); return r; },
    outboxRenewMany: (p: any) => { log.push(`${at()} renew`); return d.outboxRenewMany(p); },
    outboxRetryMany: (p: any) => d.outboxRetryMany(p), outboxMarkDeadMany: (p: any) => d.outboxMarkDeadMany(p),
    outboxReclaimExpired: (p: any) => d.outboxReclaimExpired(p), outboxStats: (s: any) => d.outboxStats(s),
  };
  const endAt = Date.now() + 60000;
  const summary = await runOutboxPass({ driver, config, destinations: new Map([['bench', new NoopDestination('bench')]]) as any, router: createRouter(config.outbox.routes, config.destinations), deadline: createDeadline({ getRemainingTimeInMillis: () => endAt - Date.now() }, 0), metrics: new QueueBoxMetrics({ namespace: 'b', serviceName: 'b', write: () => {} }), logger: { debug() {}, info() {}, warn() {}, error() {} }, mode: 'drain' });
  console.log('round', round, 'sent', summary.sent, 'ms', (performance.now() - t0).toFixed(0), 'rate', Math.round(summary.sent / ((performance.now() - t0) / 1000)));
  if (round === 1) console.log(log.join('\n'));
  await d.close();
  await probe.query(`DROP SCHEMA qb_trace_${round} CASCADE`);
}
await probe.end();
