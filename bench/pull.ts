/**
 * `npm run bench:pull`: how fast pull workers' claims move an ordered backlog of one source.
 *
 * Each run seeds pull rows of one source spread round-robin over `--aggregates` aggregates in a
 * fresh schema, then `--workers` loops (default 2) each repeat: claim up to 50 rows
 * (`pullClaimMany`, at most one per aggregate), complete each in its own transaction
 * (`pullComplete`, as a handler's business transaction does), until `--drain` rows are done. The
 * handler does nothing, so this measures the claim and the fenced completion. One run per size
 * in `--sizes` (seeded rows; default 20,000 and 200,000) — the ratio of the large to the small
 * table shows whether the claim's cost grows with the rows waiting behind busy aggregates.
 *
 * Options: `--sizes a,b` (rows seeded), `--drain n` (rows completed per run, default 20,000),
 * `--aggregates n` (default 100), `--workers n` (default 2). Uses DATABASE_URL, or starts an
 * embedded PostgreSQL.
 */
import { randomBytes } from 'node:crypto';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { parseConfig } from '../lib/config/load-config.ts';
import { quoteIdent } from '../lib/db/postgres/names.ts';
import { PostgresDriver } from '../lib/db/postgres/postgres-driver.ts';
import { startEmbeddedDatabase } from '../lib/local/embedded-database.ts';
import { createdSchema, dropSchemasOnSignal } from '../test/helpers/drop-on-signal.ts';
import { seedInbox } from './inbox-table.ts';
import { serverInfo } from './server-info.ts';

const BATCH = 50;

async function drainOnce(url: string, admin: pg.Client, seed: number, drain: number, aggregates: number, workers: number): Promise<number> {
  const schema = `qb_bench_${randomBytes(4).toString('hex')}`;
  const forget = createdSchema(url, schema);
  const config = parseConfig({ database: { url, schema, poolMax: workers + 2 } });
  const driver = new PostgresDriver({ config, url });
  const t = `${quoteIdent(schema)}.${quoteIdent('inbox')}`;
  try {
    await driver.migrate();
    await seedInbox(admin, t, { source: 'jobs', count: seed, aggregates, consumption: 'pull' });
    let done = 0;
    const loop = async () => {
      while (done < drain) {
        const rows = await driver.pullClaimMany({ source: 'jobs', limit: BATCH, leaseMs: 60_000 });
        if (rows.length === 0) {
          await new Promise((resolve) => setTimeout(resolve, 1));
          continue;
        }
        for (const row of rows) {
          const client = await driver.pool.connect();
          try {
            await client.query('BEGIN');
            if (!(await driver.pullComplete(client, { id: row.id, token: row.claimToken }))) throw new Error(`bench: claim of ${row.id} lost`);
            await client.query('COMMIT');
          } finally {
            client.release();
          }
          done++;
        }
      }
    };
    const started = performance.now();
    await Promise.all(Array.from({ length: workers }, loop));
    return Math.round(done / ((performance.now() - started) / 1000));
  } finally {
    await driver.close();
    await admin.query(`DROP SCHEMA IF EXISTS ${quoteIdent(schema)} CASCADE`);
    forget();
  }
}

async function main(): Promise<void> {
  dropSchemasOnSignal();
  const { values } = parseArgs({
    options: {
      sizes: { type: 'string', default: '20000,200000' },
      drain: { type: 'string', default: '20000' },
      aggregates: { type: 'string', default: '100' },
      workers: { type: 'string', default: '2' },
    },
  });
  const sizes = values.sizes.split(',').map(Number);
  const [drain, aggregates, workers] = [Number(values.drain), Number(values.aggregates), Number(values.workers)];
  if (sizes.some((s) => !Number.isInteger(s) || s < drain) || !Number.isInteger(drain) || drain < 1 || !Number.isInteger(aggregates) || aggregates < 0 || !Number.isInteger(workers) || workers < 1) {
    throw new Error('--sizes are integers ≥ --drain; --drain and --workers positive integers, --aggregates a non-negative integer');
  }
  const embedded = process.env.DATABASE_URL ? undefined : await startEmbeddedDatabase();
  const url = process.env.DATABASE_URL ?? embedded!.url;
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  const rates: number[] = [];
  try {
    process.stderr.write(`${await serverInfo(url)}\n`);
    for (const seed of sizes) {
      const rate = await drainOnce(url, admin, seed, drain, aggregates, workers);
      rates.push(rate);
      process.stdout.write(`${JSON.stringify({ seed, drain, aggregates, workers, rowsPerSecond: rate, ratioToFirst: Math.round((rate / rates[0]!) * 100) / 100 })}\n`);
    }
  } finally {
    await admin.end();
    await embedded?.stop();
  }
  const fmt = (n: number) => n.toLocaleString('en-US');
  process.stdout.write(
    `\n| rows seeded | aggregates | completed | rows/s | × first size |\n|--:|--:|--:|--:|--:|\n${sizes
      .map((s, i) => `| ${fmt(s)} | ${fmt(aggregates)} | ${fmt(drain)} | ${fmt(rates[i]!)} | ${Math.round((rates[i]! / rates[0]!) * 100) / 100} |`)
      .join('\n')}\n`,
  );
}

main().catch((error: unknown) => {
  process.stderr.write(`${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exit(1);
});
