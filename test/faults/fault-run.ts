/**
 * One fault run: seeds outbox, push-inbox and pull-inbox rows, runs several outbox pollers, inbox
 * relays and pull workers at once as short overlapping invocations (short leases, clocks skewed
 * by minutes, some with a tiny statement timeout, some frozen past their lease, some killed),
 * while the injector cuts connections, holds locks and emulates a restart; then the checker
 * judges the outcome. A seed fixes every fault decision (timings still vary with the machine).
 */
import type { Driver } from '../../lib/db/driver.ts';
import { createPgPool, pgTransaction } from '../../lib/db/postgres/pg-pool.ts';
import { PostgresDriver } from '../../lib/db/postgres/postgres-driver.ts';
import { runRelayPass } from '../../lib/inbox/relay-pass.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import { runOutboxPass } from '../../lib/outbox/outbox-pass.ts';
import { createRouter } from '../../lib/outbox/routes.ts';
import { createPullWorker } from '../../lib/pull/pull-worker.ts';
import { createDeadline } from '../../lib/runtime/deadline.ts';
import { createInvocationContext } from '../../lib/runtime/invocation-context.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { installAuditTrail } from './audit-trail.ts';
import { brokenFenceDriver } from './broken-fence-driver.ts';
import { checkRun, type CheckReport, type CounterTotals } from './checker.ts';
import { DEFAULT_DESTINATION_RATES, FaultDestination } from './fault-destination.ts';
import { Injector } from './injector.ts';
import { invocationTimings, profileDriver, type FaultProfile, type ProfileCounts } from './fault-profiles.ts';
import { faultyDriver, InvocationFaults, Ledger } from './invocation-faults.ts';
import { Prng } from './prng.ts';
import { seedRows } from './seed-rows.ts';

export interface FaultRunOptions {
  seed: number;
  /** Total messages: outbox rows, push inbox rows (relayed, then delivered) and pull rows. */
  messages: number;
  /** Shares of push and pull inbox rows; default 0.25 and 0.15 (the rest are outbox rows). */
  pushShare?: number;
  pullShare?: number;
  /** Invocations of each kind running at once. */
  outboxWorkers?: number;
  relayWorkers?: number;
  pullWorkers?: number;
  /** `outbox.rowsPerKey` of the outbox passes (default: the configuration's default). */
  rowsPerKey?: number;
  /** Give up (and report what is unfinished as loss) after this long. */
  maxRunMs?: number;
  /** Use the deliberately broken mark-sent (proves the checker). */
  brokenFence?: boolean;
  /** Fault profile (see fault-profiles.ts); default `default`. */
  profile?: FaultProfile;
  /** Progress lines. */
  log?: (line: string) => void;
}

export interface FaultRunResult {
  seed: number;
  profile: FaultProfile;
  messages: number;
  durationMs: number;
  invocations: Record<string, number>;
  faults: Record<string, number>;
  counters: CounterTotals;
  report: CheckReport;
  database: string;
}

const silent = createLogger({ serviceName: 'queuebox-faults', logLevel: 'SILENT' });
const pullLogger = { warn: () => {}, error: () => {} };

export async function runFaults(options: FaultRunOptions): Promise<FaultRunResult> {
  const started = Date.now();
  const log = options.log ?? (() => {});
  const root = new Prng(options.seed);
  const db: TestDatabase = await createTestDatabase({
    outbox: {
      batchSize: 50,
      concurrency: 4,
      pollIntervalMs: 20,
      retryBaseDelayMs: 20,
      maxAttempts: 10,
      claimTimeoutMs: 1500,
      shutdownTimeoutMs: 500,
      ...(options.rowsPerKey === undefined ? {} : { rowsPerKey: options.rowsPerKey }),
    },
    inbox: {
      relay: { batchSize: 50, concurrency: 4, pollIntervalMs: 20, claimTimeoutMs: 1500, shutdownTimeoutMs: 500, retryBaseDelayMs: 20, maxAttempts: 10 },
      sources: { shop: { type: 'http', path: '/shop', auth: { type: 'none' } }, jobs: { type: 'http', path: '/jobs', consumption: 'pull', auth: { type: 'none' } } },
    },
    database: { poolMax: 3 },
  });
  const s = `"${db.schema}"`;
  try {
    await db.pool.query(`CREATE TABLE ${s}.faults_effects (n bigserial PRIMARY KEY, inbox_id uuid NOT NULL)`);
    await installAuditTrail(db.pool, db.schema);
    const counts = await seedRows(db, options.messages, root.fork('seed'), { push: options.pushShare ?? 0.25, pull: options.pullShare ?? 0.15 });
    log(`seeded ${counts.outbox} outbox, ${counts.push} push, ${counts.pull} pull rows in schema ${db.schema}`);

    const ledger = new Ledger();
    const destination = new FaultDestination(root.fork('destination'), DEFAULT_DESTINATION_RATES, 2500);
    const live = new Set<InvocationFaults>();
    const injector = new Injector(db.pool, db.schema, live, root.fork('injector'));
    const metrics: QueueBoxMetrics[] = [];
    const invocations: Record<string, number> = { outbox: 0, relay: 0, pull: 0 };
    const injected = { kill: 0, freeze: 0, skewedClock: 0, shortStatementTimeout: 0, handlerError: 0 };
    const profile = options.profile ?? 'default';
    const profileCounts: ProfileCounts = {
      renewalStalls: 0,
      frozenHandlers: 0,
      claimedAgain: { outbox: 0, relay: 0, pull: 0 },
      leases: { claimed: 0, endingAfterInvocation: 0, maxPastEndMs: 0 },
    };
    const router = createRouter([{ topicPattern: '**', destination: 'faults' }]);
    let stop = false;
    // A kill and a freeze each run owes until one has been injected (see `invoke`).
    const owed = { kill: true, freeze: true };
    let clientErrors = 0;
    const everyPid: Array<Set<number>> = [];

    const invoke = async (kind: 'outbox' | 'relay' | 'pull', index: number): Promise<void> => {
      const rng = root.fork(`${kind}:${index}`);
      invocations[kind]!++;
      const { timeoutMs, claimTimeoutMs } = invocationTimings(profile, rng);
      const skewMs = rng.pick([0, 0, 0, 5 * 60_000, -5 * 60_000, 3 * 60_000]);
      if (skewMs !== 0) injected.skewedClock++;
      const shortTimeout = rng.chance(0.15);
      if (shortTimeout) injected.shortStatementTimeout++;
      const pool = createPgPool({ ...db.config.database, statementTimeoutMs: shortTimeout ? 150 : 10_000 }, db.url);
      const faults = new InvocationFaults(pool);
      live.add(faults);
      everyPid.push(faults.pids);
      const base = new PostgresDriver({ config: db.config, url: db.url, pool });
      const driver: Driver = profileDriver(faultyDriver(options.brokenFence ? brokenFenceDriver(base) : base, faults, ledger), profile, rng.fork('profile'), claimTimeoutMs, profileCounts, () => invocationEndsAt);
      const handlerFreezes = rng.fork('frozen-handler');
      const timers: NodeJS.Timeout[] = [];
      // Real time at which this invocation ends (the context's clock may be skewed; this one is not).
      let invocationEndsAt = Date.now() + timeoutMs;
      let onKill = () => {};
      const killed = new Promise<void>((resolve) => (onKill = resolve));
      // Every run kills and freezes at least one invocation, however fast the machine drains (a
      // fast run may otherwise end before the 8 % / 10 % draws come up): until one has been, the
      // next invocation to start takes the owed fault, early in its run. An invocation that ends
      // before its timer fires (a pass stopped at once by a statement timeout or a restart) hands
      // the owed fault on to the next one.
      const owesKill = owed.kill;
      if (owesKill) owed.kill = false;
      let killFired = false;
      if (rng.chance(0.08) || owesKill) {
        timers.push(setTimeout(() => {
          killFired = true;
          injected.kill++;
          faults.kill();
          void injector.terminate(faults.pids);
          onKill();
        }, owesKill ? rng.int(20, 150) : rng.int(100, timeoutMs - 500)));
      }
      const owesFreeze = owed.freeze;
      if (owesFreeze) owed.freeze = false;
      let freezeFired = false;
      if (rng.chance(options.brokenFence ? 0.5 : 0.1) || owesFreeze) {
        const freezeMs = Math.round(claimTimeoutMs * (1.5 + rng.float()));
        timers.push(setTimeout(() => {
          freezeFired = true;
          injected.freeze++;
          faults.freeze(freezeMs);
        }, owesFreeze ? rng.int(20, 150) : rng.int(50, timeoutMs - 500)));
      }
      invocationEndsAt = Date.now() + timeoutMs;
      const context = createInvocationContext({ timeoutMs, functionName: `faults-${kind}`, now: () => Date.now() + skewMs });
      const deadline = createDeadline(context, 300);
      const m = new QueueBoxMetrics({ namespace: 'QueueBoxFaults', serviceName: 'faults', write: () => {} });
      metrics.push(m);
      let work: Promise<unknown>;
      if (kind === 'outbox') {
        work = runOutboxPass({
          driver,
          config: { outbox: { ...db.config.outbox, claimTimeoutMs } },
          destinations: new Map([['faults', destination.forInvocation(faults)]]),
          router,
          deadline,
          metrics: m,
          logger: silent,
          mode: 'deadline',
          random: rng.float,
        });
      } else if (kind === 'relay') {
        work = runRelayPass({ config: { ...db.config, inbox: { ...db.config.inbox, relay: { ...db.config.inbox.relay, claimTimeoutMs } } }, driver, logger: silent, metrics: m, deadline, random: rng.float });
      } else {
        work = createPullWorker({
          driver,
          config: db.config,
          source: 'jobs',
          leaseMs: claimTimeoutMs,
          batch: 50,
          concurrency: 8,
          retry: { maxAttempts: 10, baseDelayMs: 20, maxDelayMs: 500, jitter: 0.2 },
          shutdownTimeoutMs: 300,
          metrics: m,
          logger: pullLogger,
          transactions: (fn) => faults.run(() => pgTransaction(pool, fn)),
          handler: async (message, { transaction }) => {
            await faults.gate();
            if (profile === 'frozen-pull' && handlerFreezes.chance(0.04)) {
              // Frozen past its lease, deaf to its signal: as far as the database can tell, the
              // lease ran out (a blocked process renews nothing); the row is claimed again.
              profileCounts.frozenHandlers++;
              await db.pool
                .query(`UPDATE ${s}.inbox SET lease_expires_at = clock_timestamp() WHERE id = $1 AND claim_token = $2`, [message.id, message.claim.token])
                .catch(() => {});
              await new Promise((resolve) => setTimeout(resolve, Math.round(claimTimeoutMs * (1.5 + handlerFreezes.float()))));
            }
            if ((message.payload as { poison?: boolean }).poison === true) throw new Error('poison message (injected)');
            if (rng.chance(0.03)) {
              injected.handlerError++;
              throw new Error('handler failed (injected)');
            }
            await transaction((tx) => tx.query(`INSERT INTO ${s}.faults_effects (inbox_id) VALUES ($1)`, [message.id]));
          },
        }).runOnce({ deadline });
      }
      await Promise.race([work.catch(() => {}), killed]);
      for (const t of timers) clearTimeout(t);
      if (owesKill && !killFired) owed.kill = true;
      if (owesFreeze && !freezeFired) owed.freeze = true;
      clientErrors += faults.clientErrors;
      live.delete(faults);
      if (faults.killed) void pool.end().catch(() => {});
      else await pool.end().catch(() => {});
    };

    const loop = async (kind: 'outbox' | 'relay' | 'pull', slot: number, width: number): Promise<void> => {
      for (let i = slot; !stop; i += width) {
        await invoke(kind, i);
        await new Promise((resolve) => setTimeout(resolve, 5 + (i % 7) * 5));
      }
    };
    const widths = { outbox: options.outboxWorkers ?? 3, relay: options.relayWorkers ?? 2, pull: options.pullWorkers ?? 2 };
    const loops: Array<Promise<void>> = [];
    for (const kind of ['outbox', 'relay', 'pull'] as const) for (let slot = 0; slot < widths[kind]; slot++) loops.push(loop(kind, slot, widths[kind]));
    injector.start(root.fork('restart').int(2000, 5000));
    // What autovacuum does on a normal server (the CI machine's PostgreSQL runs with it off):
    // without it, dead row versions pile up and every claim slows down as the run goes on.
    const vacuum = (async () => {
      while (!stop) {
        await new Promise((resolve) => setTimeout(resolve, 10_000));
        for (const table of ['outbox', 'inbox']) if (!stop) await db.pool.query(`VACUUM (ANALYZE) ${s}.${table}`).catch(() => {});
      }
    })();

    const maxRunMs = options.maxRunMs ?? 10 * 60_000;
    let lastLog = Date.now();
    let lastDeliveries = 0;
    for (;;) {
      await new Promise((resolve) => setTimeout(resolve, 1000));
      const { rows } = await db.pool.query<{ outbox: number; push: number; pull: number }>(
        `SELECT (SELECT count(*) FROM ${s}.outbox WHERE state IN ('pending', 'processing'))::int AS outbox,
                (SELECT count(*) FROM ${s}.inbox WHERE state IN ('pending', 'processing') AND consumption = 'push')::int AS push,
                (SELECT count(*) FROM ${s}.inbox WHERE state IN ('pending', 'processing') AND consumption = 'pull')::int AS pull`,
      );
      const open = rows[0]!.outbox + rows[0]!.push + rows[0]!.pull;
      if (Date.now() - lastLog > 10_000) {
        // Deliveries since the previous line, per second: the drain rate over the run, to see it hold as the backlog ages.
        const now = Date.now();
        const delivered = destination.deliveries.length;
        const rate = Math.round(((delivered - lastDeliveries) * 1000) / (now - lastLog));
        lastLog = now;
        lastDeliveries = delivered;
        log(`${Math.round((now - started) / 1000)} s: ${open} rows open (outbox ${rows[0]!.outbox}, push ${rows[0]!.push}, pull ${rows[0]!.pull}), ${delivered} deliveries, ${rate}/s since the last line`);
      }
      // The run goes on, tables empty, until the owed kill and freeze have been injected.
      if ((open === 0 && injected.kill > 0 && injected.freeze > 0) || Date.now() - started > maxRunMs) break;
    }
    stop = true;
    await injector.stop();
    await Promise.all(loops);
    await vacuum;

    // Connections a killed invocation left behind (its pool was never drained) would hold locks.
    await injector.terminate(everyPid.flatMap((pids) => [...pids]));
    const sum = (key: 'claimsLost' | 'outboxReclaimed', dims: Record<string, string> = {}) => metrics.reduce((n, m) => n + m.value(key, dims), 0);
    const counters: CounterTotals = {
      outboxClaimsLost: sum('claimsLost', { component: 'outbox' }),
      outboxReclaimed: sum('outboxReclaimed'),
      inboxClaimsLost: sum('claimsLost', { component: 'inbox' }),
      pullClaimsLost: sum('claimsLost', { component: 'pull' }),
    };
    const report = await checkRun({ pool: db.pool, schema: db.schema, deliveries: destination.deliveries, ledger, counters });
    const server = (await db.pool.query<{ v: string }>(`SELECT current_setting('server_version') AS v`)).rows[0]!.v;
    return {
      seed: options.seed,
      profile,
      messages: counts.outbox + counts.push + counts.pull,
      durationMs: Date.now() - started,
      invocations,
      faults: {
        'invocation killed (mid-publish / mid-transaction)': injected.kill,
        'invocation frozen past its lease': injected.freeze,
        'host clock skewed ±3–5 min': injected.skewedClock,
        'invocation with 150 ms statement_timeout': injected.shortStatementTimeout,
        'table lock window (statement timeouts)': injector.counts.lockWindows,
        'statement timeouts hit': ledger.errors.statementTimeout,
        'connection terminated (pg_terminate_backend)': injector.counts.connectionKills,
        'connection errors seen by invocations': ledger.errors.connection,
        'client error events on checked-out connections': clientErrors,
        'database restart (emulated: all backends terminated for 1.2 s)': injector.counts.restarts,
        'destination throttled': destination.injected.throttle,
        'destination timeout': destination.injected.timeout,
        'destination slow call (2.5 s, longer than the lease)': destination.injected.slow,
        'destination partial batch': destination.injected.partial,
        'destination entry retryable': destination.injected.entryRetryable,
        'destination entry permanent (retried)': destination.injected.entryPermanent,
        'destination poison (permanent, dead now)': destination.injected.poison,
        'pull handler error': injected.handlerError,
        'renewal stalled past its lease (profile short-lease)': profileCounts.renewalStalls,
        'pull handler frozen past its lease (profile frozen-pull)': profileCounts.frozenHandlers,
        'row claimed again by the outbox pass that had claimed it': profileCounts.claimedAgain.outbox,
        'row claimed again by the relay pass that had claimed it': profileCounts.claimedAgain.relay,
        'row claimed again by the pull worker that had claimed it': profileCounts.claimedAgain.pull,
        'claims (all kinds, as the claim statements returned them)': profileCounts.leases.claimed,
        'claimed rows whose lease ends after their invocation': profileCounts.leases.endingAfterInvocation,
        'latest such lease end after its invocation (ms)': Math.round(profileCounts.leases.maxPastEndMs),
      },
      counters,
      report,
      database: `PostgreSQL ${server}`,
    };
  } finally {
    if (process.env.FAULTS_KEEP_SCHEMA !== '1') await db.drop().catch(() => {});
  }
}

