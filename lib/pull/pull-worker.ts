/**
 * A pull worker for applications (spec §6, seed: pull worker): claims rows of one `consumption:
 * pull` source and runs a handler on each, completing the row inside the handler's business
 * transaction.
 *
 * - `start()`: a long-running loop that polls every `pollMs` when idle, until `stop()`. It
 *   resolves once the loop's first claim has answered (the database and the source are
 *   reachable) and rejects, with the loop stopped, when that claim fails.
 * - `runOnce({ context })`: claims until nothing is claimable or the deadline passes, then returns
 *   a summary. Inside a Lambda every lease granted or renewed is
 *   `min(leaseMs, context.getRemainingTimeInMillis())`, so no lease outlives the invocation. One
 *   that starts with no time to claim (its deadline passed: a timeout at or below
 *   `lambda.deadlineMarginMs`) returns an empty summary and logs a warning saying what to change.
 * - `stop()`: stops claiming, releases claimed rows no handler started (no attempt spent), waits
 *   for running handlers up to `shutdownTimeoutMs`, then aborts them and completes nothing more.
 *   `runOnce` at its deadline ends the same way, giving up on its handlers no later than
 *   `GIVE_UP_BEFORE_END_MS` before the invocation's end; both return only once the transaction
 *   runner ended the transactions those handlers still had open (bounded: `PullRun`).
 * Defaults come from `config.pull` (batch 10, lease 30000 ms, concurrency 1, poll 1000 ms, retry
 * 5 attempts, 1000 ms × 2^attempt capped at 300000 ms, 20 % jitter).
 *
 * The source is checked when the worker is created: with a `config` that declares inbox sources, a
 * `source` that is not one of its pull sources is refused with a `UsageError` listing them (a
 * misspelled source would otherwise claim nothing, silently); a push source is refused in any case. A `driver` that is
 * still a Promise (`createDriver` without `await`) is refused with a `UsageError` saying so. So is
 * every option the loop would trip over only once it claims (and then dead-letter every message,
 * or stop): an option name the worker does not know (a typo such as `handle` or `concurency`), a
 * `handler` or `transactions` that is not a function, a `logger` without `warn` and `error`
 * functions, a `retry` that is not an object, and a `concurrency` that the pool shared by the
 * business transactions and the renewals cannot serve (`checkPoolSize`).
 *
 * Metrics are on by default: the worker counts `queuebox_pull_messages_total{status}` and
 * `queuebox_claims_lost_total{component="pull"}` in its own buffer (namespace and service from
 * `config.observability`) and writes them as EMF to standard output at the end of every
 * `runOnce` and every `PULL_METRICS_FLUSH_MS` of `start()` (and at its stop). Given a
 * `QueueBoxMetrics`, it counts into that one and the caller flushes; `metrics: false` turns them off.
 */
import type pg from 'pg';
import { leaseMsFor, MIN_LEASE_MS, renewalLeaseMsFor } from '../claims/lease.ts';
import { redactError } from '../claims/redact.ts';
import { parseConfig } from '../config/load-config.ts';
import { pullSchema, type QueueBoxConfig } from '../config/schema.ts';
import type { Driver } from '../db/driver.ts';
import { PostgresDriver } from '../db/postgres/postgres-driver.ts';
import { UsageError } from '../errors.ts';
import { createLogger } from '../observability/logger.ts';
import { QueueBoxMetrics } from '../observability/metrics.ts';
import { withStatementBudget } from '../db/statement-budget.ts';
import { answerWaitMs, createDeadline, type Deadline, type RemainingTime } from '../runtime/deadline.ts';
import { MAX_TIMER_MS } from '../runtime/timer-limit.ts';
import type { PullHandler, PullLogger, PullRetryPolicy } from './handle-pull-message.ts';
import { createPullClient } from './pull-client.ts';
import { PullRun, type PullRunPolicy, type PullRunSettings, type PullRunSummary } from './pull-run.ts';
import { defaultTransactionRunner, poolOfRunner, type TransactionRunner } from './transaction-runner.ts';

/** Default time `stop()` waits for running handlers. */
export const PULL_SHUTDOWN_TIMEOUT_MS = 30_000;

/** How often a long-running worker (`start()`) writes its own metrics. */
export const PULL_METRICS_FLUSH_MS = 60_000;

export interface PullWorkerOptions<Tx = pg.PoolClient> {
  /** The driver to use; or give `pool` (+ `config` for schema and table names). */
  driver?: Driver;
  /** A `pg` pool to build a PostgreSQL driver on (it is not ended by the worker). */
  pool?: pg.Pool;
  /** Table names, schema and the `pull` defaults; default: the schema defaults. */
  config?: QueueBoxConfig;
  /** The `consumption: pull` source to claim from. */
  source: string;
  handler: PullHandler<Tx>;
  /** Lease per claim and renewal, ms (renewed every third). Default `config.pull.leaseMs`. */
  leaseMs?: number;
  /**
   * Most rows per claim statement. A claim takes at most the handler slots free at that moment
   * (`min(batch, concurrency - running)`), so every row claimed starts its handler at once.
   * Default `config.pull.batchSize`.
   */
  batch?: number;
  /** Handlers running at once. Default `config.pull.concurrency`. */
  concurrency?: number;
  /** Idle poll interval of `start()`, ms. Default `config.pull.pollMs`. */
  pollMs?: number;
  retry?: Partial<PullRetryPolicy>;
  /** How long `stop()` waits for running handlers. Default 30000 ms. */
  shutdownTimeoutMs?: number;
  /**
   * How long a handler may run, ms; default: no limit. Past it the worker gives up on the run as
   * a forced stop does: the handler's `signal` fires, its open transaction ends, its claim is no
   * longer renewed (the lease ends and the next claim charges the attempt) and its slot is free.
   */
  handlerTimeoutMs?: number;
  /** Opens business transactions; default: the PostgreSQL driver's pool. Required for SQL Server. */
  transactions?: TransactionRunner<Tx>;
  /**
   * Where pull metrics are counted. Default: the worker's own buffer, written as EMF to standard
   * output after each `runOnce` and every minute of `start()`. A `QueueBoxMetrics` of yours: the
   * worker counts into it and you flush it. `false`: no metrics.
   */
  metrics?: QueueBoxMetrics | false;
  logger?: PullLogger;
}

export interface PullRunOnceOptions {
  /** The Lambda context: the pass ends `config.lambda.deadlineMarginMs` before the invocation. */
  context?: RemainingTime;
  /** An explicit deadline instead of `context` (another margin). */
  deadline?: Deadline;
}

export interface PullWorker {
  /**
   * Starts the long-running loop in the background; `stop()` ends it. Resolves once the first
   * claim has answered; rejects (the loop stopped) when it fails, e.g. the database is unreachable.
   */
  start(): Promise<void>;
  /** One bounded pass: claims until nothing is claimable or the deadline passes. */
  runOnce(options?: PullRunOnceOptions): Promise<PullRunSummary>;
  /** Graceful stop of `start()` (or of a running `runOnce`); resolves with the loop's summary. */
  stop(options?: { timeoutMs?: number }): Promise<PullRunSummary | undefined>;
}

type PullValues = Pick<PullRunSettings<unknown>, 'batch' | 'leaseMs' | 'concurrency' | 'pollMs' | 'retry'>;

/** Every option `createPullWorker` takes; any other name (a typo) is refused. */
const PULL_WORKER_OPTIONS = {
  driver: true,
  pool: true,
  config: true,
  source: true,
  handler: true,
  leaseMs: true,
  batch: true,
  concurrency: true,
  pollMs: true,
  retry: true,
  shutdownTimeoutMs: true,
  handlerTimeoutMs: true,
  transactions: true,
  metrics: true,
  logger: true,
} as const satisfies Record<keyof PullWorkerOptions<unknown>, true>;

/**
 * The options that stand for `pull` keys of the config (`batch` for `pull.batchSize`, `retry.*` for
 * `pull.retry.*`, the others by their name), each one given or else the config's value, checked
 * by the config schema's own rules (so an option is refused where its key would be), and the
 * durations that reach a timer or a lock timeout (`leaseMs`, `pollMs`, the retry delays) also at
 * most `MAX_TIMER_MS`. An error names the option, or the config key the value came from.
 */
function resolvePullValues(options: Pick<PullWorkerOptions<unknown>, 'batch' | 'leaseMs' | 'concurrency' | 'pollMs' | 'retry'>, defaults: QueueBoxConfig['pull']): PullValues {
  const retry = withoutUndefined(options.retry);
  const values = {
    // Absent is the config's value; `null` is a value, refused as any other of the wrong kind.
    batchSize: options.batch === undefined ? defaults.batchSize : options.batch,
    leaseMs: options.leaseMs === undefined ? defaults.leaseMs : options.leaseMs,
    concurrency: options.concurrency === undefined ? defaults.concurrency : options.concurrency,
    pollMs: options.pollMs === undefined ? defaults.pollMs : options.pollMs,
    retry: { ...defaults.retry, ...retry },
  };
  const nameOf = (path: readonly PropertyKey[]): string => {
    const key = path.map(String).join('.');
    const option = key === 'batchSize' ? 'batch' : key;
    const top = { ...options, batchSize: options.batch } as Record<PropertyKey, unknown>;
    const fromOption = path.length === 2 ? (retry as Record<PropertyKey, unknown>)[path[1]!] !== undefined : top[path[0]!] !== undefined;
    return fromOption ? option : `${option} (config pull.${key})`;
  };
  const result = pullSchema.safeParse(values);
  if (!result.success) {
    const issue = result.error.issues[0]!;
    if (issue.code === 'unrecognized_keys') throw new UsageError(`pull worker ${nameOf([...issue.path, issue.keys[0] ?? ''])} is not a pull setting`);
    const value = issue.path.reduce<unknown>((node, key) => (node as Record<PropertyKey, unknown>)[key], values);
    throw new UsageError(`pull worker ${nameOf(issue.path)}: ${issue.message}, got ${String(value)}`);
  }
  for (const path of [['leaseMs'], ['pollMs'], ['retry', 'baseDelayMs'], ['retry', 'maxDelayMs']] as const) {
    const value = path.length === 1 ? values[path[0]] : values.retry[path[1]];
    timerMs(nameOf(path), value);
  }
  return { batch: values.batchSize, leaseMs: values.leaseMs, concurrency: values.concurrency, pollMs: values.pollMs, retry: values.retry };
}

/**
 * A duration that reaches a timer (or a lock timeout): a whole number of ms, as every `…Ms` key of
 * the configuration (`leaseMs`, `pollMs` and the retry delays go through its rules), at least
 * `least`, at most `MAX_TIMER_MS`.
 */
function timerMs(name: string, value: unknown, least = 0): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < least) throw new UsageError(`pull worker ${name} must be a whole number of ms, at least ${least}, got ${String(value)}`);
  if (value > MAX_TIMER_MS) throw new UsageError(`pull worker ${name} must be at most ${MAX_TIMER_MS} ms (about 24.8 days: the longest delay a timer or a lock timeout takes), got ${value}`);
  return value;
}

/** How an error message shows a value given where another kind was expected. */
function described(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'object') return 'an object';
  if (typeof value === 'function') return 'a function';
  if (typeof value === 'string') return JSON.stringify(value);
  return String(value);
}

/**
 * Refuses what the loop would only trip over once it claims: an option name it does not know (a
 * typo leaves the option at its default, or the handler missing), and values of the wrong kind
 * for the options it calls — a missing handler or a runner that is not a function fails every
 * message it claims until each is dead-lettered, a logger without `warn`/`error` ends the loop
 * at its first log line, a `retry` that is not an object is silently the default.
 */
function checkOptionKinds(options: PullWorkerOptions<unknown>): void {
  for (const name of Object.keys(options)) {
    if (!Object.hasOwn(PULL_WORKER_OPTIONS, name)) throw new UsageError(`pull worker ${name} is not an option of createPullWorker; the options are: ${Object.keys(PULL_WORKER_OPTIONS).join(', ')}`);
  }
  if (typeof options.handler !== 'function') throw new UsageError(`pull worker handler must be a function, async (message, { signal, transaction }) => void; got ${described(options.handler)}`);
  if (options.transactions !== undefined && typeof options.transactions !== 'function') {
    throw new UsageError(`pull worker transactions must be a TransactionRunner, a function (work, { signal }) => Promise; got ${described(options.transactions)}`);
  }
  const logger = options.logger as Partial<Record<string, unknown>> | undefined;
  if (logger !== undefined) {
    if (typeof logger !== 'object' || logger === null) throw new UsageError(`pull worker logger must be an object with warn and error functions, got ${described(logger)}`);
    for (const method of ['warn', 'error']) {
      if (typeof logger[method] !== 'function') throw new UsageError(`pull worker logger must have a ${method}(message, attributes) function, got ${described(logger[method])}`);
    }
  }
  const retry: unknown = options.retry;
  if (retry !== undefined && (typeof retry !== 'object' || retry === null || Array.isArray(retry))) {
    throw new UsageError(`pull worker retry must be an object { maxAttempts?, baseDelayMs?, maxDelayMs?, jitter? }, got ${described(retry)}`);
  }
  const metrics: unknown = options.metrics;
  if (metrics !== undefined && metrics !== false && typeof (metrics as { count?: unknown } | null)?.count !== 'function') {
    throw new UsageError(`pull worker metrics must be a QueueBoxMetrics or false, got ${described(metrics)}`);
  }
}

/**
 * Refuses a `concurrency` the pool cannot serve when the business transactions run on the pool of
 * the worker's claims and renewals (the default runner on a PostgreSQL driver, the `pool` option's
 * pool when given): each running handler holds a connection for its transaction, and the claims
 * and renewals need one more. With fewer, handlers whose transactions outlast a third of the lease
 * take every connection, the renewals wait behind them until the leases end, and every claim is
 * lost. `pgTransactionRunner` on the same pool counts as the default runner; a runner of your own,
 * or one on another pool, is not known here: not checked.
 */
function checkPoolSize(driver: Driver, transactions: unknown, concurrency: number): void {
  if (!(driver instanceof PostgresDriver)) return;
  // A runner of `pgTransactionRunner` on the worker's own pool shares it as the default runner does.
  if (transactions !== undefined && poolOfRunner(transactions) !== driver.pool) return;
  const max = (driver.pool as Partial<pg.Pool>).options?.max;
  if (typeof max !== 'number' || !Number.isFinite(max) || concurrency + 1 <= max) return;
  throw new UsageError(
    `pull worker concurrency ${concurrency} needs a pool of at least ${concurrency + 1} connections (one per running handler's transaction, one for claims and renewals), and its pool's max is ${max}: raise the pool's max (database.poolMax, or max of your pg.Pool), lower concurrency, or pass transactions on a pool of their own`,
  );
}

/**
 * The logger as the worker calls it: a call that throws, or an async logger's promise that
 * rejects, is dropped. A log line is never worth more than the work it reports on: a throw from
 * inside the settle path would end the loop (or a run's wait for its handlers).
 */
function guardedLogger(logger: PullLogger): PullLogger {
  const guard =
    (method: 'warn' | 'error') =>
    (message: string, attributes?: Record<string, unknown>): void => {
      try {
        const result: unknown = logger[method](message, attributes);
        if (typeof (result as { catch?: unknown } | null | undefined)?.catch === 'function') (result as Promise<unknown>).catch(() => {});
      } catch {
        // Dropped: see above.
      }
    };
  return { warn: guard('warn'), error: guard('error') };
}

/** An options object without the entries set to `undefined` (those take the config's value). */
function withoutUndefined<T extends object>(options: T | undefined): Partial<T> {
  return Object.fromEntries(Object.entries(options ?? {}).filter(([, value]) => value !== undefined)) as Partial<T>;
}

/** Resolves the worker's settings from the options and `config.pull`; validates them. */
function resolveSettings<Tx>(options: PullWorkerOptions<Tx>): PullRunSettings<Tx> & { shutdownTimeoutMs: number; deadlineMarginMs: number; ownMetrics: boolean } {
  if (typeof options !== 'object' || options === null) throw new UsageError(`createPullWorker needs an options object, got ${described(options)}`);
  checkOptionKinds(options as PullWorkerOptions<unknown>);
  const config = options.config ?? parseConfig({});
  const defaults = config.pull;
  let driver = options.driver;
  if (typeof (driver as { then?: unknown } | undefined)?.then === 'function') {
    throw new UsageError('the pull worker\'s `driver` is a Promise: createDriver is async, so await it (`const driver = await createDriver(config)`)');
  }
  if (driver !== undefined && options.pool !== undefined) {
    throw new UsageError('a pull worker takes `driver` or `pool`, not both: the pool would go unused (a driver brings its own)');
  }
  if (driver === undefined) {
    if (options.pool === undefined) throw new UsageError('a pull worker needs `driver` or `pool`');
    // The start-up check of QueueBox's functions (`schemaVerify`: encoding, schema trust, row-level
    // security), before the first claim: `start()` and `runOnce()` reject with its error.
    driver = new PostgresDriver({ config, url: '', pool: options.pool, verifyBeforeClaims: true });
  }
  if (!options.source) throw new UsageError('a pull worker needs `source`');
  if (typeof options.source !== 'string' || options.source.trim() === '') throw new UsageError(`pull worker source must be the name of an inbox source, got ${described(options.source)}`);
  checkSource(config, options.source);
  const pull = resolvePullValues(options, defaults);
  checkPoolSize(driver, options.transactions, pull.concurrency);
  const ownMetrics = options.metrics === undefined;
  const metrics = ownMetrics
    ? new QueueBoxMetrics({ namespace: config.observability.namespace, serviceName: config.observability.serviceName })
    : options.metrics || undefined;
  return {
    driver,
    client: createPullClient(driver, { metrics }),
    source: options.source,
    handler: options.handler,
    transactions: options.transactions ?? (defaultTransactionRunner(driver) as unknown as TransactionRunner<Tx>),
    ...pull,
    deadlineMarginMs: config.lambda.deadlineMarginMs,
    shutdownTimeoutMs: timerMs('shutdownTimeoutMs', options.shutdownTimeoutMs === undefined ? PULL_SHUTDOWN_TIMEOUT_MS : options.shutdownTimeoutMs),
    handlerTimeoutMs: options.handlerTimeoutMs === undefined ? undefined : timerMs('handlerTimeoutMs', options.handlerTimeoutMs, 1),
    metrics,
    ownMetrics,
    logger: guardedLogger(options.logger ?? powertoolsPullLogger(config)),
  };
}

/**
 * Refuses a `source` the config declares as a push source, and one it does not declare when it
 * declares any inbox source. A config that declares no source at all (a pool without `config`, or
 * a worker's own minimal config) is not checked against.
 */
function checkSource(config: QueueBoxConfig, source: string): void {
  const pull = Object.entries(config.inbox.sources).filter(([, s]) => s.consumption === 'pull').map(([name]) => name);
  const declared = config.inbox.sources[source];
  if (declared?.consumption === 'pull' || (declared === undefined && Object.keys(config.inbox.sources).length === 0)) return;
  const listed = pull.length > 0 ? `the configured pull sources are: ${pull.join(', ')}` : 'the configuration declares no pull source (inbox.sources.<name>.consumption: pull)';
  if (declared !== undefined) throw new UsageError(`pull worker source "${source}" is a push source: the inbox relay forwards its rows to the outbox, no worker claims them; ${listed}`);
  throw new UsageError(`pull worker source "${source}" is not an inbox source of the configuration; ${listed}`);
}

/** The default logger: Powertools structured JSON at the configured level. */
function powertoolsPullLogger(config: QueueBoxConfig): PullLogger {
  const logger = createLogger({ serviceName: config.observability.serviceName, logLevel: config.observability.logLevel });
  return {
    warn: (message, attributes = {}) => logger.warn(message, attributes),
    error: (message, attributes = {}) => logger.error(message, attributes),
  };
}

/** What `runOnce` keeps back from its invocation when it waits for the ending of transactions it gave up on (ms). */
export const FORCED_END_RESERVE_MS = 250;

/**
 * What the forced end of the transactions of handlers given up on needs (ms): a new connection to
 * the database, the terminate of their server processes and the wait until those are gone
 * (`terminateBackend`, polled every 10 ms). About 40–70 ms against a server on the same host, of
 * which the connection is 15 ms; a TLS handshake and the round trips to a database in the same
 * region add some tens of ms. Kept at a few times that: every ms more is taken from the handlers.
 */
export const FORCED_END_MS = 250;

/**
 * How long before the invocation's end `runOnce` gives up on handlers still running (ms), whatever
 * `shutdownTimeoutMs`: the forced end of their transactions (`FORCED_END_MS`), then
 * `FORCED_END_RESERVE_MS` to return. Given up on at the invocation's end itself, the forced end
 * ran past it, and a handler that returns after its invocation's end is a timed-out invocation.
 */
export const GIVE_UP_BEFORE_END_MS = FORCED_END_MS + FORCED_END_RESERVE_MS;

/**
 * How long `runOnce` waits for the ending of the transactions of handlers it gave up on: until
 * `FORCED_END_RESERVE_MS` before the invocation's end, so that a terminate that cannot reach the
 * database (a partition) does not turn the invocation into a timeout. The handlers are given up on
 * `GIVE_UP_BEFORE_END_MS` before that end, which leaves `FORCED_END_MS` for the wait; a run that
 * comes to its drain with less than `FORCED_END_RESERVE_MS` left (an explicit `deadline` with a
 * smaller margin, a freeze) has no such time: the wait is then `answerWaitMs`'s (the invocation
 * times out either way).
 */
function forcedEndWaitMs(deadline: Deadline): number {
  const left = deadline.invocationRemainingMs();
  return left > FORCED_END_RESERVE_MS ? left - FORCED_END_RESERVE_MS : answerWaitMs(deadline);
}

/**
 * Whether a `runOnce` bounded by `deadline` can claim when it starts: its deadline ahead, and a
 * lease to grant (`leaseMsFor`: at least `MIN_LEASE_MS` left in the invocation), the two checks
 * its run makes before each claim. Time only runs down, so a run that starts without it claims
 * nothing at all.
 */
function hasTimeToClaimAtStart(deadline: Deadline, leaseMs: number): boolean {
  return !deadline.expired() && leaseMsFor(leaseMs, deadline.invocationRemainingMs()) > 0;
}

/**
 * Says why a `runOnce` with no time to claim (`hasTimeToClaimAtStart`) returns an empty summary,
 * naming what to change, as a scheduled pass does (`hasTimeToClaim`). A warning, not an error
 * nor a throw: an invocation whose function did other work before `runOnce` may leave it no time
 * now and then, while a timeout at or below `lambda.deadlineMarginMs` says so in every invocation.
 * Packaging checks only QueueBox's own functions' timeouts; a pull worker runs in the
 * application's own function, so only this warning tells.
 */
function warnNoTimeToClaim(logger: PullLogger, source: string, deadline: Deadline, marginMs: number | undefined): void {
  const invocationMs = Math.floor(deadline.invocationRemainingMs());
  if (marginMs !== undefined) {
    logger.warn(
      `the invocation leaves the pull worker's runOnce no time to claim: ${invocationMs} ms left at its start, lambda.deadlineMarginMs ${marginMs}; raise the function's timeout above the margin + the time its handlers need (and what the function does before runOnce), or lower lambda.deadlineMarginMs (nothing is claimed)`,
      { source, invocationRemainingMs: invocationMs, deadlineMarginMs: marginMs },
    );
    return;
  }
  const deadlineMs = Math.floor(deadline.remainingMs());
  logger.warn(
    `the deadline given to the pull worker's runOnce leaves it no time to claim: ${invocationMs} ms left in the invocation at its start, ${deadlineMs} ms of them before the deadline; raise the function's timeout, or give runOnce a later deadline (a smaller margin in createDeadline); a claim needs the deadline ahead and ${MIN_LEASE_MS} ms left in the invocation (nothing is claimed)`,
    { source, invocationRemainingMs: invocationMs, deadlineRemainingMs: deadlineMs },
  );
}

/** Creates a pull worker; nothing runs until `start()` or `runOnce()`. */
export function createPullWorker<Tx = pg.PoolClient>(options: PullWorkerOptions<Tx>): PullWorker {
  const settings = resolveSettings(options);
  let current: { run: PullRun<Tx>; done: Promise<PullRunSummary>; shutdownTimeoutMs: number } | undefined;

  const begin = (policyFor: (shutdownTimeoutMs: () => number) => PullRunPolicy): Promise<PullRunSummary> => {
    if (current) throw new UsageError('this pull worker is already running');
    const state = { shutdownTimeoutMs: settings.shutdownTimeoutMs } as { run: PullRun<Tx>; done: Promise<PullRunSummary>; shutdownTimeoutMs: number };
    const policy = policyFor(() => state.shutdownTimeoutMs);
    state.run = new PullRun(settings, policy);
    const flush = settings.ownMetrics ? () => settings.metrics?.flush() : () => {};
    // A bounded pass writes its metrics when it ends; a long-running loop also every minute.
    const flushing = policy.exitWhenIdle ? undefined : setInterval(flush, PULL_METRICS_FLUSH_MS).unref();
    state.done = state.run.run().finally(() => {
      clearInterval(flushing);
      flush();
      if (current === state) current = undefined;
    });
    current = state;
    return state.done;
  };

  const worker: PullWorker = {
    async start() {
      type Outcome = { failed: false } | { failed: true; error: unknown };
      let answered: (outcome: Outcome) => void = () => {};
      const firstClaim = new Promise<Outcome>((resolve) => (answered = resolve));
      const done = begin((drainMs) => ({
        leaseMs: () => settings.leaseMs,
        mayStart: () => true,
        msUntilEnd: () => undefined,
        exitWhenIdle: false,
        drainTimeoutMs: drainMs,
        answerWaitMs: () => undefined,
        onClaimAnswered: (...failure) => answered(failure.length > 0 ? { failed: true, error: failure[0] } : { failed: false }),
      }));
      done.catch((error: unknown) => settings.logger.error('pull worker loop failed', { source: settings.source, error: redactError(error) }));
      // Resolves at the first claim's answer, or when the loop ends before one (stopped at once).
      const outcome = await Promise.race([firstClaim, done.then((): Outcome => ({ failed: false }), (error: unknown): Outcome => ({ failed: true, error }))]);
      if (outcome.failed) {
        await worker.stop({ timeoutMs: 0 });
        throw outcome.error;
      }
    },
    // Async, so a misuse (already running, a bad context) is a rejected promise, as the type says.
    async runOnce(options = {}) {
      if (typeof options !== 'object' || options === null) throw new UsageError(`runOnce takes { context } or { deadline }, got ${described(options)}`);
      if (options.context !== undefined && options.deadline !== undefined) {
        throw new UsageError('runOnce takes { context } or { deadline }, not both: the deadline would win and the context be ignored');
      }
      if (options.context !== undefined && typeof (options.context as Partial<RemainingTime> | null)?.getRemainingTimeInMillis !== 'function') {
        throw new UsageError(`runOnce context must be the Lambda context (its getRemainingTimeInMillis() bounds the run), got ${described(options.context)}`);
      }
      const deadline = options.deadline ?? (options.context ? createDeadline(options.context, settings.deadlineMarginMs) : undefined);
      // Inside an invocation every statement of the run — renewals, the business transactions'
      // completions — is bounded by the time left in it; a claim by the deadline (its lease still
      // by the invocation's end), so a claim stuck behind a lock leaves the margin to the handlers.
      const start = () => begin((drainMs) => ({
        leaseMs: () => leaseMsFor(settings.leaseMs, deadline?.invocationRemainingMs()),
        renewalLeaseMs: () => renewalLeaseMsFor(settings.leaseMs, deadline?.invocationRemainingMs()),
        mayStart: () => deadline === undefined || !deadline.expired(),
        msUntilEnd: () => deadline?.remainingMs(),
        exitWhenIdle: true,
        // Running handlers may use the margin, but are given up on early enough that the forced
        // end of their transactions, and the return, fit in the invocation.
        drainTimeoutMs: () => Math.min(drainMs(), deadline === undefined ? Infinity : Math.max(0, deadline.invocationRemainingMs() - GIVE_UP_BEFORE_END_MS)),
        // Also bounds the wait for the ending of the transactions of handlers given up on.
        answerWaitMs: () => (deadline === undefined ? undefined : answerWaitMs(deadline)),
        forcedEndWaitMs: () => (deadline === undefined ? undefined : forcedEndWaitMs(deadline)),
        ...(deadline === undefined ? {} : { boundClaim: <T>(claim: () => Promise<T>) => withStatementBudget(() => deadline.remainingMs(), claim, () => deadline.invocationRemainingMs()) }),
      }));
      if (deadline === undefined) return start();
      // Read before the run starts: a run that starts without time to claim ends at once, empty.
      const timeToClaim = hasTimeToClaimAtStart(deadline, settings.leaseMs);
      const done = withStatementBudget(() => deadline.invocationRemainingMs(), start);
      // After `begin`, which refuses a worker already running without this warning.
      if (!timeToClaim) warnNoTimeToClaim(settings.logger, settings.source, deadline, options.deadline === undefined ? settings.deadlineMarginMs : undefined);
      return done;
    },
    async stop({ timeoutMs } = {}) {
      const state = current;
      if (!state) return undefined;
      if (timeoutMs !== undefined) state.shutdownTimeoutMs = timerMs('stop timeoutMs', timeoutMs);
      state.run.requestStop();
      return state.done;
    },
  };
  return worker;
}
