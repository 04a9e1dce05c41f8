/**
 * `npm run bench:latency`: what an idle outbox poller costs, and how long a message waits between
 * the commit that wrote it and its publish, at light load.
 *
 * Everything runs in a database of its own (created, then dropped), with the default
 * configuration: outbox passes as the deployed handler runs them (`runOutboxPass`, deadline mode,
 * `lambda.deadlineMarginMs` 5 s) publishing to the fauxqs SQS emulator, and a writer on its own
 * connection committing one message per transaction (`outboxInsert`, then `COMMIT`), in the same
 * process (one clock). A latency runs from the writer's `COMMIT` returning to the SQS
 * `SendMessageBatch` call that carried the message returning.
 *
 * 1. Idle: one invocation of `--idle-seconds` (default 60, the deployed timeout) with nothing to
 *    do, once as shipped and once with a fixed 100 ms interval (`maxPollIntervalMs` 100, the
 *    behaviour before the idle backoff): transactions (`pg_stat_database` of the bench database),
 *    claims, and round trips.
 * 2. First message after idle: `--samples` times (default 20) within one invocation, nothing is
 *    written for 5–6 s (the idle wait has reached its cap), then one message.
 * 3. Light load: for each of `--rates` (default 5,20 messages a second), the writer commits at
 *    that rate, evenly spaced, for `--load-seconds` (default 120) while invocations run on the
 *    default schedule: one every `--period` seconds (default 60) with a timeout of that length
 *    (the deployed `rate(1 minute)`, 60 s). Messages committed while a pass was running and those
 *    committed between two invocations (each returns about margin + claim window before the next
 *    starts) are reported apart.
 *
 * Options: `--quick` (idle 15 s, 5 samples, rate 10, load 30 s, period 15 s). Uses DATABASE_URL
 * (a role that may create databases), or starts an embedded PostgreSQL.
 */
import { parseArgs } from 'node:util';
import pg from 'pg';
import type { ConfigInput } from '../lib/config/schema.ts';
import { createDestinations } from '../lib/destinations/create-destinations.ts';
import type { Destination } from '../lib/destinations/destination.ts';
import type { PostgresDriver } from '../lib/db/postgres/postgres-driver.ts';
import { startEmbeddedDatabase } from '../lib/local/embedded-database.ts';
import { createLogger } from '../lib/observability/logger.ts';
import { QueueBoxMetrics } from '../lib/observability/metrics.ts';
import { runOutboxPass, type OutboxPassSummary } from '../lib/outbox/outbox-pass.ts';
import type { OutboxPassDriver } from '../lib/outbox/pass-context.ts';
import { createRouter } from '../lib/outbox/routes.ts';
import { createDeadline, sleep } from '../lib/runtime/deadline.ts';
import { createInvocationContext } from '../lib/runtime/invocation-context.ts';
import { createCountedDatabase, type CountedDatabase } from '../test/helpers/transaction-count.ts';
import { dropSchemasOnSignal } from '../test/helpers/drop-on-signal.ts';
import { installQueryCounter, queryCount } from './query-counter.ts';
import { serverInfo } from './server-info.ts';
import { startSqsEmulator } from './sqs-emulator.ts';

interface Latencies {
  count: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
}

/** Nearest-rank percentiles of `values` (ms, rounded). */
function latencies(values: number[]): Latencies {
  const sorted = [...values].sort((a, b) => a - b);
  const rank = (p: number) => Math.round(sorted[Math.max(0, Math.ceil((p / 100) * sorted.length) - 1)] ?? Number.NaN);
  return { count: sorted.length, p50Ms: rank(50), p99Ms: rank(99), maxMs: rank(100) };
}

interface Bench {
  db: CountedDatabase;
  destinations: Map<string, Destination>;
  /** When each message id's publish call returned (`performance.now()`). */
  published: Map<string, number>;
}

/** A plain pass driver over `driver` that counts claims. */
function countingDriver(driver: PostgresDriver, counts: { claims: number }): OutboxPassDriver {
  return {
    outboxClaimMany: (p) => (counts.claims++, driver.outboxClaimMany(p)),
    outboxRenewMany: (p) => driver.outboxRenewMany(p),
    outboxMarkSentMany: (p) => driver.outboxMarkSentMany(p),
    outboxRetryMany: (p) => driver.outboxRetryMany(p),
    outboxMarkDeadMany: (p) => driver.outboxMarkDeadMany(p),
    outboxReclaimExpired: (p) => driver.outboxReclaimExpired(p),
    outboxStats: (p) => driver.outboxStats(p),
  };
}

/** One scheduled invocation of `timeoutMs`: a pass in deadline mode, as the deployed poller runs it. */
function invoke(bench: Bench, driver: OutboxPassDriver, timeoutMs: number, options: { maxPollIntervalMs?: number; signal?: AbortSignal } = {}): Promise<OutboxPassSummary> {
  const { config } = bench.db;
  return runOutboxPass({
    driver,
    config: { outbox: { ...config.outbox, ...(options.maxPollIntervalMs !== undefined ? { maxPollIntervalMs: options.maxPollIntervalMs } : {}) } },
    destinations: bench.destinations,
    router: createRouter(config.outbox.routes),
    deadline: createDeadline(createInvocationContext({ timeoutMs }), config.lambda.deadlineMarginMs),
    metrics: new QueueBoxMetrics({ namespace: 'bench', serviceName: 'bench', write: () => {} }),
    logger: createLogger({ serviceName: 'bench', logLevel: 'SILENT' }),
    ...(options.signal ? { signal: options.signal } : {}),
  });
}

interface IdleResult {
  phase: 'idle';
  polling: string;
  invocationSeconds: number;
  passSeconds: number;
  transactions: number;
  claims: number;
  roundTrips: number;
}

async function idleInvocation(bench: Bench, seconds: number, maxPollIntervalMs?: number): Promise<IdleResult> {
  const counts = { claims: 0 };
  const { result, transactions } = await bench.db.transactionsOf(async (driver) => {
    const before = queryCount();
    const summary = await invoke(bench, countingDriver(driver, counts), seconds * 1000, maxPollIntervalMs !== undefined ? { maxPollIntervalMs } : {});
    return { summary, roundTrips: queryCount() - before };
  });
  return {
    phase: 'idle',
    polling: maxPollIntervalMs === undefined ? 'shipped: 100 ms doubling to 1 s' : `fixed ${maxPollIntervalMs} ms`,
    invocationSeconds: seconds,
    passSeconds: Math.round(result.summary.durationMs / 100) / 10,
    transactions,
    claims: counts.claims,
    roundTrips: result.roundTrips,
  };
}

/** Commits one message on `writer` (its own transaction); resolves with its id and when `COMMIT` returned. */
async function write(writer: pg.Client, driver: PostgresDriver, n: number): Promise<{ id: string; committedAt: number }> {
  await writer.query('BEGIN');
  const id = await driver.outboxInsert(writer, { topic: 'bench.latency', payload: { n } }, { maxAttempts: 5 });
  await writer.query('COMMIT');
  return { id, committedAt: performance.now() };
}

async function waitPublished(bench: Bench, ids: string[], timeoutMs: number): Promise<void> {
  const until = performance.now() + timeoutMs;
  while (ids.some((id) => !bench.published.has(id))) {
    if (performance.now() > until) throw new Error(`${ids.filter((id) => !bench.published.has(id)).length} messages not published after ${timeoutMs} ms`);
    await sleep(5);
  }
}

async function firstAfterIdle(bench: Bench, writer: pg.Client, driver: PostgresDriver, samples: number): Promise<Latencies & { phase: string }> {
  const stop = new AbortController();
  const running = invoke(bench, driver, samples * 8000 + 20_000, { signal: stop.signal });
  const values: number[] = [];
  try {
    for (let i = 0; i < samples; i++) {
      // Past the 100 + 200 + 400 + 800 ms ramp: the pass claims once a second, at a phase the commit does not know.
      await sleep(5000 + Math.random() * 1000);
      const { id, committedAt } = await write(writer, driver, i);
      await waitPublished(bench, [id], 10_000);
      values.push(bench.published.get(id)! - committedAt);
    }
  } finally {
    stop.abort();
    await running;
  }
  return { phase: 'first message after 5-6 s idle', ...latencies(values) };
}

interface LoadResult {
  phase: 'light load';
  rate: number;
  seconds: number;
  periodSeconds: number;
  all: Latencies;
  whilePolling: Latencies;
  betweenInvocations: Latencies;
}

async function lightLoad(bench: Bench, writer: pg.Client, driver: PostgresDriver, rate: number, seconds: number, periodSeconds: number): Promise<LoadResult> {
  const started = performance.now();
  const passes: Array<{ from: number; to: number }> = [];
  const invocations: Array<Promise<unknown>> = [];
  const stop = new AbortController();
  // The schedule: an invocation every period, each timing out after one period, until every
  // message is published.
  const scheduler = (async () => {
    for (let k = 0; !stop.signal.aborted; k++) {
      await sleep(started + k * periodSeconds * 1000 - performance.now(), stop.signal);
      if (stop.signal.aborted) return;
      const pass = { from: performance.now(), to: Number.POSITIVE_INFINITY };
      passes.push(pass);
      invocations.push(
        invoke(bench, driver, periodSeconds * 1000, { signal: stop.signal }).then(() => {
          pass.to = performance.now();
        }),
      );
    }
  })();
  const written: Array<{ id: string; committedAt: number }> = [];
  for (let i = 0; i < rate * seconds; i++) {
    await sleep(started + (i * 1000) / rate - performance.now());
    written.push(await write(writer, driver, i));
  }
  // A message committed after the last invocation returned waits for the next one.
  await waitPublished(bench, written.map((w) => w.id), (periodSeconds + 30) * 1000);
  stop.abort();
  await scheduler;
  await Promise.all(invocations);
  const all: number[] = [];
  const whilePolling: number[] = [];
  const between: number[] = [];
  for (const w of written) {
    const ms = bench.published.get(w.id)! - w.committedAt;
    all.push(ms);
    // While an invocation ran: from its start until its pass returned (it stops claiming about
    // the claim window before that).
    (passes.some((p) => w.committedAt >= p.from && w.committedAt < p.to) ? whilePolling : between).push(ms);
  }
  return { phase: 'light load', rate, seconds, periodSeconds, all: latencies(all), whilePolling: latencies(whilePolling), betweenInvocations: latencies(between) };
}

async function main(): Promise<void> {
  // Ctrl-C (or SIGTERM): the bench's database (`createCountedDatabase`) is dropped, with its
  // connections, before the process exits.
  dropSchemasOnSignal();
  const { values } = parseArgs({
    options: {
      quick: { type: 'boolean', default: false },
      'idle-seconds': { type: 'string' },
      samples: { type: 'string' },
      rates: { type: 'string' },
      'load-seconds': { type: 'string' },
      period: { type: 'string' },
    },
  });
  const q = values.quick;
  const idleSeconds = Number(values['idle-seconds'] ?? (q ? 15 : 60));
  const samples = Number(values.samples ?? (q ? 5 : 20));
  const rates = (values.rates ?? (q ? '10' : '5,20')).split(',').map(Number);
  const loadSeconds = Number(values['load-seconds'] ?? (q ? 30 : 120));
  const periodSeconds = Number(values.period ?? (q ? 15 : 60));
  if ([idleSeconds, samples, loadSeconds, periodSeconds, ...rates].some((n) => !Number.isFinite(n) || n <= 0)) throw new Error('every option is a positive number');

  installQueryCounter();
  const embedded = process.env.DATABASE_URL ? undefined : await startEmbeddedDatabase();
  const serverUrl = process.env.DATABASE_URL ?? embedded!.adminUrl;
  const sqs = await startSqsEmulator();
  const { endpoint, queueUrl } = await sqs.newQueue();
  const overrides: ConfigInput = {
    destinations: { bench: { type: 'sqs', queueUrl, region: 'us-east-1' } },
    outbox: { routes: [{ topicPattern: '**', destination: 'bench' }] },
  };
  const db = await createCountedDatabase(overrides, serverUrl);
  const published = new Map<string, number>();
  const built = createDestinations(db.config, { clientOverrides: { endpoint, region: 'us-east-1', credentials: { accessKeyId: 'bench', secretAccessKey: 'bench' } } });
  const destinations = new Map(
    [...built].map(([name, d]): [string, Destination] => [
      name,
      {
        name: d.name,
        type: d.type,
        maxBatchSize: d.maxBatchSize,
        async publishBatch(messages, signal) {
          const outcomes = await d.publishBatch(messages, signal);
          const at = performance.now();
          for (const o of outcomes) if (o.status === 'sent') published.set(o.id, at);
          return outcomes;
        },
      },
    ]),
  );
  const bench: Bench = { db, destinations, published };
  const results: Array<IdleResult | (Latencies & { phase: string }) | LoadResult> = [];
  const report = (result: (typeof results)[number]) => {
    results.push(result);
    process.stdout.write(`${JSON.stringify(result)}\n`);
  };
  const driver = db.newDriver();
  const writer = new pg.Client({ connectionString: db.config.database.url, application_name: 'queuebox-bench-writer' });
  let cleaned: Promise<void> | undefined;
  const cleanUp = () =>
    (cleaned ??= (async () => {
      await writer.end().catch(() => {});
      await driver.close();
      await db.drop();
      await sqs.stop();
      await embedded?.stop();
    })());
  try {
    process.stderr.write(`${await serverInfo(serverUrl)}\n`);
    report(await idleInvocation(bench, idleSeconds));
    report(await idleInvocation(bench, idleSeconds, 100));
    await writer.connect();
    report(await firstAfterIdle(bench, writer, driver, samples));
    for (const rate of rates) report(await lightLoad(bench, writer, driver, rate, loadSeconds, periodSeconds));
  } finally {
    await cleanUp();
  }
  const row = (what: string, l: Latencies) => `| ${what} | ${l.count} | ${l.p50Ms} | ${l.p99Ms} | ${l.maxMs} |`;
  const lines = ['', '| idle invocation | timeout s | pass s | transactions | claims | round trips |', '|---|--:|--:|--:|--:|--:|'];
  for (const r of results) {
    if (r.phase === 'idle') {
      const i = r as IdleResult;
      lines.push(`| ${i.polling} | ${i.invocationSeconds} | ${i.passSeconds} | ${i.transactions} | ${i.claims} | ${i.roundTrips} |`);
    }
  }
  lines.push('', '| commit → publish | messages | p50 ms | p99 ms | max ms |', '|---|--:|--:|--:|--:|');
  for (const r of results) {
    if ('rate' in r) {
      lines.push(row(`${r.rate} msg/s, all`, r.all), row(`${r.rate} msg/s, committed while an invocation ran`, r.whilePolling), row(`${r.rate} msg/s, committed between invocations`, r.betweenInvocations));
    } else if ('p50Ms' in r) {
      lines.push(row(r.phase, r));
    }
  }
  process.stdout.write(`${lines.join('\n')}\n`);
}

main().catch((error: unknown) => {
  process.stderr.write(`${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exit(1);
});
