/**
 * `npm run bench:console-explain`: the operator console's reads on a 1,000,000-row outbox (and a
 * 200,000-row inbox), each run under `EXPLAIN (ANALYZE, BUFFERS)` with the console's own limits.
 * Prints the plans as Markdown (the source of the plans in docs/console.md).
 *
 * The table mixes what a busy production table holds: 960,000 sent rows over the last day, a
 * 30,000-row backlog over 3,000 keys, 5,000 dead rows, 1,000 retries (300 of them poison), 200
 * claims in flight of which 20 have expired leases, and 3,800 rows scheduled in the future.
 * Uses DATABASE_URL (a schema of its own, dropped at the end), or starts an embedded PostgreSQL.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { parseConfig } from '../lib/config/load-config.ts';
import { BLOCKED_LIMITS } from '../lib/console/blocked-page.ts';
import { DEAD_GROUPS, DEAD_PAGE } from '../lib/console/dead-page.ts';
import { CLAIMS_SHOWN, COUNT_CAP } from '../lib/console/overview-page.ts';
import * as reads from '../lib/db/postgres/console-queries.ts';
import type { PgContext } from '../lib/db/postgres/context.ts';
import { PostgresDriver } from '../lib/db/postgres/postgres-driver.ts';
import { startEmbeddedDatabase } from '../lib/local/embedded-database.ts';
import { createdSchema, dropSchemasOnSignal } from '../test/helpers/drop-on-signal.ts';

dropSchemasOnSignal();
const embedded = process.env.DATABASE_URL ? undefined : await startEmbeddedDatabase();
const url = process.env.DATABASE_URL ?? embedded!.url;
const schema = `qb_console_explain_${randomBytes(4).toString('hex')}`;
const forget = createdSchema(url, schema);
const config = parseConfig({ database: { url, schema } });
const driver = new PostgresDriver({ config, url });
const pool = new pg.Pool({ connectionString: url, max: 2 });
const o = `"${schema}".outbox`;
const i = `"${schema}".inbox`;

try {
  await driver.migrate();
  const started = Date.now();
  await pool.query(`INSERT INTO ${o} (topic, key, payload, state, attempt, scheduled_at, created_at, updated_at, last_error, claim_token, claimed_at, lease_expires_at)
    SELECT 'orders.' || (n % 20), 'key-' || (n % 50000), jsonb_build_object('orderId', n, 'amount', n % 1000), s.state, s.attempt, s.scheduled_at,
           now() - (n % 86400) * interval '1 second', s.updated_at, s.last_error, s.token, s.claimed_at, s.lease
      FROM generate_series(1, 1000000) n
     CROSS JOIN LATERAL (SELECT
        CASE WHEN n <= 960000 THEN 'sent' WHEN n <= 965000 THEN 'dead' WHEN n <= 965200 THEN 'processing' ELSE 'pending' END AS state,
        CASE WHEN n BETWEEN 965201 AND 965900 THEN 1 WHEN n BETWEEN 965901 AND 966200 THEN 4 WHEN n BETWEEN 960001 AND 965000 THEN 5 ELSE 0 END AS attempt,
        CASE WHEN n BETWEEN 965201 AND 965900 OR n > 996200 THEN now() + interval '5 minutes' ELSE now() - (n % 600) * interval '1 second' END AS scheduled_at,
        now() - (n % 86400) * interval '1 second' AS updated_at,
        CASE WHEN n > 960000 AND n <= 966200 AND n NOT BETWEEN 965001 AND 965200 THEN 'HTTP 500 from destination' END AS last_error,
        CASE WHEN n BETWEEN 965001 AND 965200 THEN gen_random_uuid() END AS token,
        CASE WHEN n BETWEEN 965001 AND 965200 THEN now() - interval '1 minute' END AS claimed_at,
        CASE WHEN n BETWEEN 965001 AND 965020 THEN now() - interval '30 seconds' WHEN n BETWEEN 965021 AND 965200 THEN now() + interval '4 minutes' END AS lease) s`);
  // Keys of the backlog: 3,000 keys of 10 rows each (the poison and retry rows are their heads).
  await pool.query(`UPDATE ${o} SET key = 'backlog-' || (sequence % 3000) WHERE state IN ('pending', 'processing')`);
  await pool.query(`INSERT INTO ${i} (source, idempotency_key, aggregate_id, payload, state, consumption, created_at, updated_at, processed_at, last_error)
    SELECT 'payments', 'evt-' || n, 'agg-' || (n % 20000), '{"type":"charge"}', CASE WHEN n <= 195000 THEN 'processed' WHEN n <= 196000 THEN 'dead' ELSE 'pending' END,
           CASE WHEN n % 10 = 0 THEN 'pull' ELSE 'push' END, now() - (n % 86400) * interval '1 second', now() - (n % 86400) * interval '1 second',
           CASE WHEN n <= 195000 THEN now() END, CASE WHEN n > 195000 AND n <= 196000 THEN 'no route' END
      FROM generate_series(1, 200000) n`);
  await pool.query(`VACUUM ANALYZE ${o}`);
  await pool.query(`VACUUM ANALYZE ${i}`);
  const counts = await pool.query<{ state: string; n: string }>(`SELECT state, count(*) AS n FROM ${o} GROUP BY state ORDER BY state`);
  console.log(`seeded in ${((Date.now() - started) / 1000).toFixed(1)} s; outbox ${counts.rows.map((r) => `${r.state} ${r.n}`).join(', ')}\n`);

  // A context whose queries are explained instead of run: the console's own statements and values.
  const plans: string[] = [];
  const explaining: PgContext = {
    names: driver.ctx.names,
    pool: {
      query: async (text: string, values?: unknown[]) => {
        const result = await pool.query<{ 'QUERY PLAN': string }>(`EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, SUMMARY ON) ${text}`, values);
        plans.push(result.rows.map((r) => r['QUERY PLAN']).join('\n'));
        return { rows: [], rowCount: 0 };
      },
    } as unknown as pg.Pool,
  };
  const cases: Array<[string, () => Promise<unknown>]> = [
    ['outboxStatsByState', () => reads.outboxStatsByState(explaining, { countCap: COUNT_CAP })],
    ['outboxClaimsInFlight', () => reads.outboxClaimsInFlight(explaining, { limit: CLAIMS_SHOWN })],
    ['outboxBlockedKeys', () => reads.outboxBlockedKeys(explaining, BLOCKED_LIMITS)],
    ['outboxDeadSearch (topic filter)', () => reads.outboxDeadSearch(explaining, { ...DEAD_PAGE, label: 'orders.7' })],
    ['outboxDeadGroups', () => reads.outboxDeadGroups(explaining, DEAD_GROUPS)],
    ['outboxRowGet', () => reads.outboxRowGet(explaining, { id: '00000000-0000-4000-8000-000000000000' })],
    ['inboxStatsByState', () => reads.inboxStatsByState(explaining, { countCap: COUNT_CAP })],
    ['inboxBlockedAggregates', () => reads.inboxBlockedAggregates(explaining, BLOCKED_LIMITS)],
    ['inboxDeadSearch', () => reads.inboxDeadSearch(explaining, { ...DEAD_PAGE })],
    ['inboxDeadGroups', () => reads.inboxDeadGroups(explaining, DEAD_GROUPS)],
  ];
  for (const [name, run] of cases) {
    plans.length = 0;
    await run().catch(() => {});
    const plan = plans[0] ?? '';
    const time = /Execution Time: ([\d.]+) ms/.exec(plan)?.[1];
    console.log(`### ${name} — ${time} ms\n\n\`\`\`\n${plan.split('\n').filter((l) => !/^\s*(Buffers|Planning:|Heap Fetches)/.test(l)).join('\n')}\n\`\`\`\n`);
  }
} finally {
  await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`).then(forget, () => {});
  await pool.end();
  await driver.close();
  await embedded?.stop();
}
