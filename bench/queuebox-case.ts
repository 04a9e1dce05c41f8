/**
 * The queuebox cases: the real outbox pass (`runOutboxPass`) draining the seeded table.
 *
 * `workers` passes run at once (as concurrent scheduled invocations would), each with its own
 * driver and pool, in `drain` mode with default settings (batch 100, concurrency 8, two batches
 * in flight per pass). Settings (`ctx.settings`, e.g. `npm run bench -- --set
 * queuebox.batchSize=1000`): `batchSize`, `maxBatchSize` and `concurrency`, the `outbox` config keys. The destination is an in-process no-op (`queuebox`) or an SQS queue on
 * the fauxqs emulator (`queuebox-sqs`). A counting wrapper around `outboxMarkSentMany` aborts
 * every pass once the workload's drain count is sent (so a backlog drain stops at its target).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { idlePollDelayMs } from '../lib/claims/backoff.ts';
import { DEFAULT_ROWS_PER_KEY, type QueueBoxConfig } from '../lib/config/schema.ts';
import { PostgresDriver } from '../lib/db/postgres/postgres-driver.ts';
import { createDestinations, type Destinations } from '../lib/destinations/create-destinations.ts';
import { NoopDestination } from '../lib/destinations/noop-destination.ts';
import { QueueBoxMetrics } from '../lib/observability/metrics.ts';
import { runOutboxPass } from '../lib/outbox/outbox-pass.ts';
import type { OutboxPassDriver, PassLogger } from '../lib/outbox/pass-context.ts';
import { createRouter } from '../lib/outbox/routes.ts';
import { createDeadline } from '../lib/runtime/deadline.ts';
import type { BenchCase, CaseContext, DrainResult } from './bench-case.ts';
import { OrderCheck } from './order-check.ts';
import { benchConfig, dropSchema, outboxLatency, seedOutbox } from './outbox-table.ts';

const silent: PassLogger = { debug() {}, info() {}, warn() {}, error() {} };

/** The `outbox` config keys the case's settings change (none by default). */
function outboxSettings(ctx: CaseContext): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [name, value] of Object.entries(ctx.settings ?? {})) {
    if (name !== 'batchSize' && name !== 'maxBatchSize' && name !== 'concurrency') throw new Error(`queuebox: unknown setting ${name} (batchSize, maxBatchSize, concurrency)`);
    if (typeof value !== 'number') throw new Error(`queuebox: setting ${name} = ${String(value)} is not a number`);
    out[name] = value;
  }
  return out;
}

/** The case's `outbox` settings and its `outbox.rowsPerKey` (when the case names one). */
function outboxConfig(ctx: CaseContext, rowsPerKey?: number): Record<string, number> {
  return { ...outboxSettings(ctx), ...(rowsPerKey === undefined ? {} : { rowsPerKey }) };
}

function passConfig(ctx: CaseContext, prepared: boolean, rowsPerKey?: number): QueueBoxConfig {
  const queueUrl = ctx.sqs?.queueUrl ?? 'http://127.0.0.1:1/000000000000/bench';
  const config = benchConfig(ctx, {
    destinations: { bench: { type: 'sqs', queueUrl, region: 'us-east-1' } },
    outbox: { routes: [{ topicPattern: '**', destination: 'bench' }], ...outboxConfig(ctx, rowsPerKey) },
  });
  return { ...config, database: { ...config.database, preparedStatements: prepared } };
}

/** The no-op destination, counting per-key order as messages reach it (the same check as the peer's). */
class OrderCheckingNoop extends NoopDestination {
  constructor(private readonly order: OrderCheck) {
    super('bench');
  }

  override async publishBatch(...args: Parameters<NoopDestination['publishBatch']>): ReturnType<NoopDestination['publishBatch']> {
    // Each message runs from before the call's yield to its answer, as a real publish awaits its
    // I/O (graphile-worker's task yields the same way), so overlapping calls of a key are seen.
    // Keyless messages have no order to check: their payload is not parsed (a destination sends
    // the stored text, and the floor never parses a payload either).
    for (const m of args[0]) if (m.key !== null && m.key !== '') this.order.start(m.key, m.payload.i as number);
    await new Promise((resolve) => setImmediate(resolve));
    const outcomes = await super.publishBatch(...args);
    for (const m of args[0]) if (m.key !== null && m.key !== '') this.order.finish(m.key);
    return outcomes;
  }
}

function destinationsFor(ctx: CaseContext, config: QueueBoxConfig, kind: 'noop' | 'sqs', order: OrderCheck): Destinations {
  if (kind === 'noop') return new Map([['bench', new OrderCheckingNoop(order)]]);
  if (!ctx.sqs) throw new Error('queuebox-sqs needs the SQS emulator');
  return createDestinations(config, {
    clientOverrides: { endpoint: ctx.sqs.endpoint, region: 'us-east-1', credentials: { accessKeyId: 'bench', secretAccessKey: 'bench' } },
  });
}

async function drainWithPasses(ctx: CaseContext, kind: 'noop' | 'sqs', prepared: boolean, rowsPerKey?: number): Promise<DrainResult> {
  const config = passConfig(ctx, prepared, rowsPerKey);
  const target = ctx.workload.drain;
  const stop = new AbortController();
  const cap = setTimeout(() => stop.abort(), ctx.timeLimitMs);
  let sent = 0;
  const endAt = Date.now() + ctx.timeLimitMs + 60_000;
  const drivers = Array.from({ length: ctx.workers }, () => new PostgresDriver({ config, url: ctx.url }));
  const order = new OrderCheck();
  const destinations = destinationsFor(ctx, config, kind, order);
  const router = createRouter(config.outbox.routes, config.destinations);
  // Database time of the claims and the sent marks, summed over all passes (the notes), the time
  // from a claim's answer to its batch's sent mark (routing, the publish, the lease keeper), the
  // backlog gauges' reads at the end of a pass (`outboxStats`, counting the pending rows), and when
  // the first claim was sent and the last message marked sent (from the start of the drain).
  const started = performance.now();
  const timing: { claims: number; claimMs: number; emptyClaims: number; settles: number; settleMs: number; deliverMs: number; stats: number; statsMs: number; firstClaimAt?: number; targetAt?: number } = { claims: 0, claimMs: 0, emptyClaims: 0, settles: 0, settleMs: 0, deliverMs: 0, stats: 0, statsMs: 0 };
  const claimedAt = new Map<string, number>();
  const counting = (driver: PostgresDriver): OutboxPassDriver => ({
    outboxClaimMany: async (p) => {
      const at = performance.now();
      // Set when sent, not when answered: the passes' first claims are sent before either answers.
      timing.firstClaimAt ??= at - started;
      const rows = await driver.outboxClaimMany(p);
      const now = performance.now();
      timing.claimMs += now - at;
      timing.claims++;
      if (rows.length === 0) timing.emptyClaims++;
      else claimedAt.set(rows[0]!.id, now);
      return rows;
    },
    outboxRenewMany: (p) => driver.outboxRenewMany(p),
    outboxMarkSentMany: async (p) => {
      const at = performance.now();
      const claimed = p.claims.length > 0 ? claimedAt.get(p.claims[0]!.id) : undefined;
      if (claimed !== undefined) {
        timing.deliverMs += at - claimed;
        claimedAt.delete(p.claims[0]!.id);
      }
      const ids = await driver.outboxMarkSentMany(p);
      timing.settleMs += performance.now() - at;
      timing.settles++;
      sent += ids.length;
      if (sent >= target && timing.targetAt === undefined) {
        timing.targetAt = performance.now() - started;
        stop.abort();
      }
      return ids;
    },
    outboxRetryMany: (p) => driver.outboxRetryMany(p),
    outboxMarkDeadMany: (p) => driver.outboxMarkDeadMany(p),
    outboxReclaimExpired: (p) => driver.outboxReclaimExpired(p),
    outboxStats: async (scope) => {
      const at = performance.now();
      const stats = await driver.outboxStats(scope);
      // A read the database gate kept shut (another pass read within the interval) counted nothing.
      if (stats.skipped !== true) {
        timing.stats++;
        timing.statsMs += performance.now() - at;
      }
      return stats;
    },
  });
  let passes = 0;
  let dead = 0;
  let retried = 0;
  // When a pass of any worker last claimed rows: five seconds with none means nothing is left to move.
  let lastClaimAt = performance.now();
  try {
    await Promise.all(
      drivers.map(async (pool) => {
        // One wrapper per driver, as a container keeps its driver across invocations.
        const driver = counting(pool);
        // A pass in drain mode returns when a claim finds nothing; with several passes and keyed
        // rows that can happen while others still hold heads, so run passes until the target.
        // A run of passes that claim nothing means nothing is left to move (e.g. rows went dead).
        // After a pass that claimed nothing the next starts as a deployed poller's next claim
        // after an empty one does: `idlePollDelayMs` of the empty passes in a row (from
        // `outbox.pollIntervalMs`, doubling up to `outbox.maxPollIntervalMs`), back to the start
        // once a pass claims rows. Started at once, the passes of a worker whose keys another pass
        // holds spun, each restart a claim (and a lease gate) that read the window and the open
        // keys for nothing — on 100 keys, 103 of 177 claims and 77 passes; started a fixed
        // `pollIntervalMs` later, 37 claims that found nothing in a six-second drain, each reading
        // a window of rows of keys in flight (docs/performance.md).
        // This worker's passes in a row that claimed nothing (its own wait, as its own container's).
        let emptyPasses = 0;
        while (sent < target && !stop.signal.aborted && performance.now() - lastClaimAt < 5_000) {
          passes++;
          const summary = await runOutboxPass({
            driver,
            config,
            destinations,
            router,
            deadline: createDeadline({ getRemainingTimeInMillis: () => endAt - Date.now() }, 0),
            metrics: new QueueBoxMetrics({ namespace: 'bench', serviceName: 'bench', write: () => {} }),
            logger: silent,
            signal: stop.signal,
            mode: 'drain',
          });
          dead += summary.dead;
          retried += summary.retried;
          emptyPasses = summary.claimed === 0 ? emptyPasses + 1 : 0;
          if (summary.claimed > 0) lastClaimAt = performance.now();
          if (summary.claimed === 0) await sleep(idlePollDelayMs(emptyPasses - 1, config.outbox), undefined, { signal: stop.signal }).catch(() => {});
        }
      }),
    );
  } finally {
    clearTimeout(cap);
    await Promise.all(drivers.map((d) => d.close()));
  }
  // After the last message was marked sent: the passes' wind-down (the batch still in flight, the
  // gauges) and the pools closing.
  const tailMs = timing.targetAt === undefined ? undefined : Math.round(performance.now() - started - timing.targetAt);
  // Claim statements whose function was missing, so they were sent as statements (0 when every
  // claim called its function; absent with `database.preparedStatements`, which uses none).
  const fallbacks = drivers.map((d) => d.ctx.claimFunctions?.missing.size);
  const claimFunctionsMissing = fallbacks.every((n) => n === undefined) ? undefined : fallbacks.reduce<number>((a, n) => a + (n ?? 0), 0);
  const average = (ms: number, n: number) => Math.round((ms / Math.max(1, n)) * 10) / 10;
  return {
    moved: Math.min(sent, target),
    capped: sent < target,
    notes: { passes, dead, retried, ...(claimFunctionsMissing === undefined ? {} : { claimFunctionsMissing }), claims: timing.claims, emptyClaims: timing.emptyClaims, claimMsAvg: average(timing.claimMs, timing.claims), deliverMsAvg: average(timing.deliverMs, timing.settles), settleMsAvg: average(timing.settleMs, timing.settles), gaugeReads: timing.stats, gaugeMsAvg: average(timing.statsMs, timing.stats), ...(timing.firstClaimAt === undefined ? {} : { firstClaimMs: Math.round(timing.firstClaimAt * 10) / 10 }), ...(tailMs === undefined ? {} : { tailMs }), ...(kind === 'noop' && ctx.workload.keys > 0 ? order.notes() : {}) },
  };
}

function queueboxCase(name: string, kind: 'noop' | 'sqs', prepared = false, rowsPerKey?: number): BenchCase {
  return {
    name,
    describe: (ctx) =>
      `runOutboxPass x ${ctx.workers} concurrent, drain mode, batchSize ${outboxSettings(ctx).batchSize ?? 100} growing to ${outboxSettings(ctx).maxBatchSize ?? 1000}, concurrency ${outboxSettings(ctx).concurrency ?? 8}, ${kind === 'noop' ? 'no-op destination' : 'SQS SendMessageBatch on fauxqs'}${prepared ? ', database.preparedStatements' : ''}, outbox.rowsPerKey ${rowsPerKey ?? `default (${DEFAULT_ROWS_PER_KEY})`}`,
    // `migrate` in the seed creates the claim functions of this case's settings.
    prepare: (ctx) => seedOutbox(ctx, outboxConfig(ctx, rowsPerKey)),
    drain: (ctx) => drainWithPasses(ctx, kind, prepared, rowsPerKey),
    latency: outboxLatency,
    cleanup: (ctx) => dropSchema(ctx.probe, ctx.schema),
  };
}

/** The real pass to an in-process no-op destination. */
export const queueboxNoopCase = queueboxCase('queuebox', 'noop');
/** The same with `database.preparedStatements` (claims planned once per connection; direct connections only). */
export const queueboxPreparedCase = queueboxCase('queuebox-prepared', 'noop', true);
/** The real pass to a no-op destination taking one row of a key per claim (`outbox.rowsPerKey: 1`, the head only). */
export const queueboxRows1Case = queueboxCase('queuebox-rows-1', 'noop', false, 1);
/** The same with `outbox.rowsPerKey: 4`. */
export const queueboxRows4Case = queueboxCase('queuebox-rows-4', 'noop', false, 4);
/** The real pass to SQS on the fauxqs emulator. */
export const queueboxSqsCase = queueboxCase('queuebox-sqs', 'sqs');
/** The real pass to SQS on fauxqs with `outbox.rowsPerKey: 1`. */
export const queueboxSqsRows1Case = queueboxCase('queuebox-rows-1-sqs', 'sqs', false, 1);
