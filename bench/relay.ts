/**
 * `npm run bench:relay`: how fast the push relay moves stored webhooks into the outbox.
 *
 * Each round seeds `--messages` push rows (keyless, and spread over `--aggregates` aggregates) in
 * a fresh schema and drains them with two concurrent relay passes (`runRelayPass`, drain mode,
 * default settings): once as shipped (one batched forward per claimed batch) and once forced onto
 * the row-by-row forward (the relay's fallback, and how it forwarded before batching: one
 * transaction of four round trips per row) — the baseline of the same run. Alternating rounds;
 * the median of each is reported, with the ratio to the baseline.
 *
 * Options: `--messages n` (default 20,000), `--aggregates a,b` (default 0,100; 0 = keyless),
 * `--rounds n` (default 3), `--modes a,b` (default row-by-row,batched; `--modes batched
 * --messages 200000` measures the ordered relay on a large aggregate backlog alone). Uses
 * DATABASE_URL, or starts an embedded PostgreSQL.
 */
import { randomBytes } from 'node:crypto';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { parseConfig } from '../lib/config/load-config.ts';
import type { Driver } from '../lib/db/driver.ts';
import { quoteIdent } from '../lib/db/postgres/names.ts';
import { PostgresDriver } from '../lib/db/postgres/postgres-driver.ts';
import { runRelayPass } from '../lib/inbox/relay-pass.ts';
import { createLogger } from '../lib/observability/logger.ts';
import { QueueBoxMetrics } from '../lib/observability/metrics.ts';
import { createDeadline } from '../lib/runtime/deadline.ts';
import { createdSchema, dropSchemasOnSignal } from '../test/helpers/drop-on-signal.ts';
import { withBenchDatabase } from './bench-database.ts';
import { count, markdownTable, median, ratio } from './bench-report.ts';
import { seedInbox } from './inbox-table.ts';
import { runMain } from './run-main.ts';
import { serverInfo } from './server-info.ts';

type Mode = 'batched' | 'row-by-row';

interface RelayResult {
  mode: Mode;
  aggregates: number;
  messages: number;
  rowsPerSecond: number;
  runs: number[];
  ratioToRowByRow: number | null;
}

async function drainOnce(url: string, admin: pg.Client, messages: number, aggregates: number, mode: Mode): Promise<number> {
  const schema = `qb_bench_${randomBytes(4).toString('hex')}`;
  const forget = createdSchema(url, schema);
  const config = parseConfig({ database: { url, schema, poolMax: 6 }, inbox: { sources: { shop: { type: 'http', path: '/shop', auth: { type: 'none' } } } } });
  const driver = new PostgresDriver({ config, url });
  const t = `${quoteIdent(schema)}.${quoteIdent('inbox')}`;
  try {
    await driver.migrate();
    await seedInbox(admin, t, { source: 'shop', count: messages, aggregates, consumption: 'push' });
    // The baseline: the batched forward refuses, so every batch takes the row-by-row fallback.
    const relayDriver: Driver =
      mode === 'batched' ? driver : Object.create(driver, { inboxForwardMany: { value: async () => Promise.reject(new Error('bench: row-by-row baseline')) } });
    const logger = createLogger({ serviceName: 'bench', logLevel: 'SILENT' });
    const pass = () =>
      runRelayPass({
        config,
        driver: relayDriver,
        logger,
        metrics: new QueueBoxMetrics({ namespace: 'bench', serviceName: 'bench', write: () => {} }),
        deadline: createDeadline({ getRemainingTimeInMillis: () => 600_000 }, 0),
        mode: 'drain',
      });
    const started = performance.now();
    // Drain mode ends a pass at its first empty claim, which two passes over few aggregates can
    // meet while the other still holds heads: run passes until every row is processed.
    for (;;) {
      await Promise.all([pass(), pass()]);
      const { rows } = await admin.query<{ left: number }>(`SELECT count(*)::int AS left FROM ${t} WHERE state <> 'processed'`);
      if (rows[0]!.left === 0) break;
    }
    return Math.round(messages / ((performance.now() - started) / 1000));
  } finally {
    await driver.close();
    await admin.query(`DROP SCHEMA IF EXISTS ${quoteIdent(schema)} CASCADE`);
    forget();
  }
}

async function main(): Promise<void> {
  dropSchemasOnSignal();
  const { values } = parseArgs({
    options: { messages: { type: 'string', default: '20000' }, aggregates: { type: 'string', default: '0,100' }, rounds: { type: 'string', default: '3' }, modes: { type: 'string', default: 'row-by-row,batched' } },
  });
  const modes = values.modes.split(',') as Mode[];
  if (modes.some((m) => m !== 'row-by-row' && m !== 'batched')) throw new Error('--modes is a list of row-by-row, batched');
  const messages = Number(values.messages);
  const rounds = Number(values.rounds);
  const aggregateCounts = values.aggregates.split(',').map(Number);
  if (!Number.isInteger(messages) || messages < 1 || !Number.isInteger(rounds) || rounds < 1 || aggregateCounts.some((a) => !Number.isInteger(a) || a < 0)) {
    throw new Error('--messages and --rounds are positive integers, --aggregates a list of non-negative integers');
  }
  const results: RelayResult[] = [];
  await withBenchDatabase(async (url, admin) => {
    process.stderr.write(`${await serverInfo(url)}\n`);
    for (const aggregates of aggregateCounts) {
      const runs: Record<Mode, number[]> = { batched: [], 'row-by-row': [] };
      for (let round = 0; round < rounds; round++) {
        for (const mode of modes) runs[mode].push(await drainOnce(url, admin, messages, aggregates, mode));
      }
      const baseline = runs['row-by-row'].length > 0 ? median(runs['row-by-row']) : undefined;
      for (const mode of modes) {
        const rate = median(runs[mode]);
        const ratioToRowByRow = mode === 'batched' && baseline !== undefined ? ratio(rate, baseline) : null;
        const result: RelayResult = { mode, aggregates, messages, rowsPerSecond: rate, runs: runs[mode], ratioToRowByRow };
        results.push(result);
        process.stdout.write(`${JSON.stringify(result)}\n`);
      }
    }
  });
  process.stdout.write(
    markdownTable(
      '| aggregates | relay forward | rows/s | × row-by-row | runs (rows/s) |',
      '|--:|---|--:|--:|--:|',
      results.map((r) => `| ${r.aggregates === 0 ? 'none' : count(r.aggregates)} | ${r.mode} | ${count(r.rowsPerSecond)} | ${r.ratioToRowByRow ?? '–'} | ${r.runs.map(count).join(' / ')} |`),
    ),
  );
}

runMain(main);
