/**
 * `npm run bench:scale-out`: what more concurrent outbox passes give against one database — the
 * sizing behind `outbox.scaleOut.maxConcurrentPasses` (docs/performance.md, "Scale-out").
 *
 * For each workload and each pass count k (`--passes 1,2,4`), a fresh schema is seeded with a
 * backlog (`--rows`, default 200,000 rows: unkeyed, and over 100 keys), then k passes run at once
 * for `--seconds` (default 20), each in a process of its own as Lambda invocations are
 * (`bench/scale-out-pass.ts`: the real `runOutboxPass`, default settings, a destination answering
 * after `--publish-ms` per call, default 20 ms as an SQS round trip; 0 measures the database
 * alone). Reported per run: rows sent per second by all passes together, the ratio to one pass
 * of the same round, the CPU the PostgreSQL processes used (cores, from /proc per process: the server is local)
 * and the machine's busy share, and the load average before the run; `(drained)` beside a rate
 * whose run sent every row before its end (the rate is then the backlog over the run's time, a
 * lower bound: raise `--rows`). Rounds (`--rounds`) alternate
 * the pass counts; the median of each is reported.
 *
 * Uses DATABASE_URL, or starts an embedded PostgreSQL.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { loadavg } from 'node:os';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { parseConfig } from '../lib/config/load-config.ts';
import { quoteIdent } from '../lib/db/postgres/names.ts';
import { PostgresDriver } from '../lib/db/postgres/postgres-driver.ts';
import { childProcess, createdSchema, dropSchemasOnSignal } from '../test/helpers/drop-on-signal.ts';
import { withBenchDatabase } from './bench-database.ts';
import { count, markdownTable, median, ratio } from './bench-report.ts';
import { runMain } from './run-main.ts';
import { serverInfo } from './server-info.ts';
import { cpuSample, postgresSeconds } from './server-cpu.ts';
import { keyExpression } from './workloads.ts';

interface PassLine {
  sent: number;
  claimed: number;
  batches: number;
  durationMs: number;
}

interface RunResult {
  workload: string;
  passes: number;
  rowsPerSecond: number;
  ratioToOnePass: number | null;
  /** Cores the PostgreSQL processes used during the run (the server's work for every session, other users' too). */
  dbCores: number;
  /** Share of the machine's CPU time that was busy during the run. */
  machineBusy: number;
  load1: number;
  runs: number[];
  /** Some run sent every row before its end: its rate is the backlog over the run's time, a lower bound (raise `--rows`). */
  drained: boolean;
}

async function seed(url: string, admin: pg.Client, schema: string, rows: number, keys: number): Promise<void> {
  const config = parseConfig({ database: { url, schema } });
  const driver = new PostgresDriver({ config, url });
  try {
    await driver.migrate();
  } finally {
    await driver.close();
  }
  const table = `${quoteIdent(schema)}.${quoteIdent('outbox')}`;
  await admin.query(
    `INSERT INTO ${table} (topic, key, payload) SELECT 'bench.event', ${keyExpression({ keys }, 'g')}, jsonb_build_object('i', g, 'body', 'x') FROM generate_series(1, $1::int) AS g ORDER BY g`,
    [rows],
  );
  await admin.query(`VACUUM ANALYZE ${table}`);
}

/** A pass process: connected and waiting for `go()`; `line` is its summary; it closes on `release()`. */
function startPass(args: string[]): { ready: Promise<void>; go(): void; line: Promise<PassLine>; release(): Promise<void> } {
  const child = spawn(process.execPath, ['--import', 'tsx', 'bench/scale-out-pass.ts', ...args], { stdio: ['pipe', 'pipe', 'pipe'] });
  childProcess(child);
  let stdout = '';
  let stderr = '';
  let markReady: () => void = () => {};
  let gotLine: (line: PassLine) => void = () => {};
  const ready = new Promise<void>((resolve) => (markReady = resolve));
  const line = new Promise<PassLine>((resolve) => (gotLine = resolve));
  child.stdout.on('data', (chunk: Buffer) => {
    stdout += chunk.toString();
    if (stdout.includes('ready\n')) markReady();
    const summary = stdout.split('\n').find((l) => l.startsWith('{') && l.endsWith('}'));
    if (summary !== undefined) gotLine(JSON.parse(summary) as PassLine);
  });
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const closed = new Promise<void>((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`pass exited ${String(code)}: ${stderr}`))));
  });
  // A pass that fails ends the waits too.
  return {
    ready: Promise.race([ready, closed]),
    go: () => child.stdin.write('go\n'),
    line: Promise.race([line, closed.then(() => Promise.reject(new Error(`pass ended without a summary: ${stderr}`)))]),
    release: () => {
      child.stdin.end();
      return closed;
    },
  };
}

async function measure(
  url: string,
  admin: pg.Client,
  o: { rows: number; keys: number; passes: number; seconds: number; publishMs: number },
): Promise<{ rate: number; dbCores: number; machineBusy: number; load1: number; drained: boolean }> {
  const schema = `qb_scale_${randomBytes(4).toString('hex')}`;
  const forget = createdSchema(url, schema);
  try {
    await seed(url, admin, schema, o.rows, o.keys);
    const load1 = loadavg()[0]!;
    const args = ['--url', url, '--schema', schema, '--seconds', String(o.seconds), '--publish-ms', String(o.publishMs)];
    const passes = Array.from({ length: o.passes }, () => startPass(args));
    await Promise.all(passes.map((p) => p.ready));
    const before = cpuSample();
    for (const p of passes) p.go();
    const lines = await Promise.all(passes.map((p) => p.line));
    const after = cpuSample();
    await Promise.all(passes.map((p) => p.release()));
    const sent = lines.reduce((sum, l) => sum + l.sent, 0);
    const wall = Math.max(...lines.map((l) => l.durationMs)) / 1000;
    const { rows: left } = await admin.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${quoteIdent(schema)}.${quoteIdent('outbox')} WHERE state = 'pending'`);
    return {
      drained: left[0]!.n === 0,
      rate: Math.round(sent / wall),
      dbCores: Math.round((postgresSeconds(before.postgres, after.postgres) / wall) * 100) / 100,
      machineBusy: Math.round(((after.busy - before.busy) / Math.max(0.01, after.total - before.total)) * 100) / 100,
      load1: Math.round(load1 * 100) / 100,
    };
  } finally {
    await admin.query(`DROP SCHEMA IF EXISTS ${quoteIdent(schema)} CASCADE`);
    forget();
  }
}

async function main(): Promise<void> {
  dropSchemasOnSignal();
  const { values } = parseArgs({
    options: {
      rows: { type: 'string', default: '200000' },
      keys: { type: 'string', default: '0,100' },
      passes: { type: 'string', default: '1,2,4' },
      seconds: { type: 'string', default: '20' },
      'publish-ms': { type: 'string', default: '20' },
      rounds: { type: 'string', default: '1' },
    },
  });
  const rows = Number(values.rows);
  const seconds = Number(values.seconds);
  const publishMs = Number(values['publish-ms']);
  const rounds = Number(values.rounds);
  const keyCounts = values.keys.split(',').map(Number);
  const passCounts = values.passes.split(',').map(Number);
  if (![rows, seconds, rounds, ...passCounts].every((n) => Number.isInteger(n) && n > 0) || !Number.isInteger(publishMs) || publishMs < 0 || keyCounts.some((k) => !Number.isInteger(k) || k < 0)) {
    throw new Error('--rows, --seconds, --rounds and --passes are positive integers, --publish-ms and --keys non-negative ones');
  }
  const results: RunResult[] = [];
  await withBenchDatabase(async (url, admin) => {
    process.stderr.write(`${await serverInfo(url)}; load average ${loadavg().map((l) => l.toFixed(2)).join(' ')}\n`);
    for (const keys of keyCounts) {
      const workload = keys === 0 ? 'unkeyed' : `keys-${keys}`;
      const runs = new Map<number, Array<Awaited<ReturnType<typeof measure>>>>(passCounts.map((k) => [k, []]));
      for (let round = 0; round < rounds; round++) {
        for (const passes of passCounts) runs.get(passes)!.push(await measure(url, admin, { rows, keys, passes, seconds, publishMs }));
      }
      const base = runs.has(1) ? median(runs.get(1)!.map((r) => r.rate)) : undefined;
      for (const passes of passCounts) {
        const of = runs.get(passes)!;
        const rate = median(of.map((r) => r.rate));
        const result: RunResult = {
          workload,
          passes,
          rowsPerSecond: rate,
          ratioToOnePass: base === undefined ? null : ratio(rate, base),
          dbCores: median(of.map((r) => r.dbCores)),
          machineBusy: median(of.map((r) => r.machineBusy)),
          load1: median(of.map((r) => r.load1)),
          runs: of.map((r) => r.rate),
          drained: of.some((r) => r.drained),
        };
        if (result.drained) process.stderr.write(`${workload}, ${passes} passes: the backlog ran out before the run's end; the rate is a lower bound (raise --rows)\n`);
        results.push(result);
        process.stdout.write(`${JSON.stringify(result)}\n`);
      }
    }
  });
  process.stdout.write(
    markdownTable(
      '| workload | passes | rows/s | × 1 pass | PostgreSQL CPU (cores) | machine busy | load (1 min) |',
      '|---|--:|--:|--:|--:|--:|--:|',
      results.map((r) => `| ${r.workload} | ${r.passes} | ${count(r.rowsPerSecond)}${r.drained ? ' (drained)' : ''} | ${r.ratioToOnePass ?? '–'} | ${r.dbCores} | ${Math.round(r.machineBusy * 100)} % | ${r.load1} |`),
    ),
  );
}

runMain(main);
