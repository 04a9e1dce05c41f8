/**
 * `npm run bench:profile`: where a batch's time goes, QueueBox's driver against the floor's
 * statements, one batch at a time on one connection each (no concurrency, so a statement's time
 * is its own cost, not a wait for the other loops' statements).
 *
 * Seeds one table per side (QueueBox's migrations, `--messages` rows, default 20,000; keyless, or
 * over `--keys` keys round-robin) and alternates batch by batch: the floor's claim (`claim` cte,
 * `--limit` rows, default 100; on keys, the floor's keyed claim) and sent mark by `unnest`;
 * QueueBox's `outboxClaimMany` (the claim function `migrate` made, `outbox.batchSize` = `--limit`,
 * default rows per key) and `outboxMarkSentMany`. Reports per side: round trips per batch, claim and settle ms (median and
 * mean), and client CPU per 1,000 messages (claim + settle, and the claims alone; measured around each call).
 * Uses DATABASE_URL, or starts an embedded PostgreSQL.
 */
import { randomBytes } from 'node:crypto';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { PostgresDriver } from '../lib/db/postgres/postgres-driver.ts';
import { startEmbeddedDatabase, type EmbeddedDatabase } from '../lib/local/embedded-database.ts';
import { withStatementBudget } from '../lib/db/statement-budget.ts';
import type { CaseContext } from './bench-case.ts';
import { floorClaimSql, floorSettleText } from './floor-case.ts';
import { benchConfig, dropSchema, outboxTable, seedOutbox } from './outbox-table.ts';
import { installQueryCounter, queryCount, uncountedClient } from './query-counter.ts';
import { createdSchema, dropSchemasOnSignal } from '../test/helpers/drop-on-signal.ts';

interface Side {
  name: string;
  trips: number;
  claimMs: number[];
  settleMs: number[];
  cpuUs: number;
  /** Client CPU of the claims alone (the rest of `cpuUs` is the sent marks'). */
  claimCpuUs: number;
  moved: number;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)] ?? 0;
const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length);
const cpuNow = () => {
  const c = process.cpuUsage();
  return c.user + c.system;
};

async function main(): Promise<void> {
  dropSchemasOnSignal();
  const { values } = parseArgs({ options: { messages: { type: 'string', default: '20000' }, limit: { type: 'string', default: '100' }, keys: { type: 'string', default: '0' } } });
  const [messages, limit, keys] = [values.messages, values.limit, values.keys].map(Number) as [number, number, number];
  if (![messages, limit].every((n) => Number.isInteger(n) && n > 0) || !Number.isInteger(keys) || keys < 0) throw new Error('--messages and --limit are positive integers, --keys a non-negative one');
  let embedded: EmbeddedDatabase | undefined;
  let url = process.env.DATABASE_URL;
  if (!url) {
    embedded = await startEmbeddedDatabase();
    url = embedded.url;
  }
  installQueryCounter();
  const probe = await uncountedClient(url);
  const ctxFor = (tag: string): CaseContext => ({ url: url!, schema: `qb_bench_profile_${tag}_${randomBytes(3).toString('hex')}`, workload: { name: keys > 0 ? `keys-${keys}` : 'unkeyed', seed: messages, drain: messages, keys }, workers: 1, timeLimitMs: 600_000, probe });
  const floorCtx = ctxFor('floor');
  const qbCtx = ctxFor('qb');
  const forget = [createdSchema(url, floorCtx.schema), createdSchema(url, qbCtx.schema)];
  const floorClient = new pg.Client({ connectionString: url });
  let driver: PostgresDriver | undefined;
  try {
    await seedOutbox(floorCtx);
    await seedOutbox(qbCtx, { batchSize: limit, maxBatchSize: limit });
    await floorClient.connect();
    const config = benchConfig(qbCtx, { outbox: { batchSize: limit, maxBatchSize: limit } });
    driver = new PostgresDriver({ config: { ...config, database: { ...config.database, poolMax: 1 } }, url });
    const claimText = floorClaimSql(outboxTable(floorCtx), keys > 0, { batch: limit, loops: 1, claim: 'cte', prepared: false });
    const settleText = floorSettleText(outboxTable(floorCtx));
    const floor: Side = { name: `floor (claim ${limit} cte, unnest settle)`, trips: 0, claimMs: [], settleMs: [], cpuUs: 0, claimCpuUs: 0, moved: 0 };
    const qb: Side = { name: 'QueueBox driver (outboxClaimMany, outboxMarkSentMany)', trips: 0, claimMs: [], settleMs: [], cpuUs: 0, claimCpuUs: 0, moved: 0 };
    const timed = async <T>(side: Side, into: number[], work: () => Promise<T>): Promise<T> => {
      const q0 = queryCount();
      const c0 = cpuNow();
      const t0 = performance.now();
      const result = await work();
      into.push(performance.now() - t0);
      const cpu = cpuNow() - c0;
      side.cpuUs += cpu;
      if (into === side.claimMs) side.claimCpuUs += cpu;
      side.trips += queryCount() - q0;
      return result;
    };
    let floorLeft = true;
    let qbLeft = true;
    await withStatementBudget(
      () => 600_000,
      async () => {
        while (floorLeft || qbLeft) {
          if (floorLeft) {
            const { rows } = await timed(floor, floor.claimMs, () => floorClient.query<{ id: string; claim_token: string }>(claimText));
            if (rows.length === 0) floorLeft = false;
            else {
              await timed(floor, floor.settleMs, () => floorClient.query(settleText, [rows.map((r) => r.id), rows.map((r) => r.claim_token)]));
              floor.moved += rows.length;
            }
          }
          if (qbLeft) {
            const rows = await timed(qb, qb.claimMs, () => driver!.outboxClaimMany({ limit, leaseMs: 300_000 }));
            if (rows.length === 0) qbLeft = false;
            else {
              await timed(qb, qb.settleMs, () => driver!.outboxMarkSentMany({ claims: rows.map((r) => ({ id: r.id, token: r.claimToken })) }));
              qb.moved += rows.length;
            }
          }
        }
      },
    );
    for (const side of [floor, qb]) {
      const batches = side.settleMs.length;
      process.stdout.write(
        `${JSON.stringify({
          side: side.name,
          moved: side.moved,
          batches,
          roundTripsPerBatch: Math.round((side.trips / Math.max(1, batches)) * 100) / 100,
          claimMsMedian: Math.round(median(side.claimMs) * 100) / 100,
          claimMsMean: Math.round(mean(side.claimMs) * 100) / 100,
          settleMsMedian: Math.round(median(side.settleMs) * 100) / 100,
          settleMsMean: Math.round(mean(side.settleMs) * 100) / 100,
          clientCpuMsPer1000: Math.round((side.cpuUs / 1000 / Math.max(1, side.moved / 1000)) * 10) / 10,
          claimCpuMsPer1000: Math.round((side.claimCpuUs / 1000 / Math.max(1, side.moved / 1000)) * 10) / 10,
        })}\n`,
      );
    }
  } finally {
    await driver?.close();
    await floorClient.end().catch(() => {});
    await dropSchema(probe, floorCtx.schema);
    await dropSchema(probe, qbCtx.schema);
    forget.forEach((f) => f());
    await probe.end();
    await embedded?.stop();
  }
}

main().catch((error: unknown) => {
  process.stderr.write(`${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exit(1);
});
