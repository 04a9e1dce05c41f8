/**
 * `queuebox local` (`npm start`): QueueBox on a laptop, through the real Lambda handlers.
 *
 * Starts an embedded PostgreSQL unless the configuration names a database (`DATABASE_URL`,
 * `QUEUEBOX_DATABASE_URL`, or `database.url` / `database.urlEnv` in the config file; a
 * `database.urlEnv` whose variable is unset stops the run naming the key), an in-process SQS emulator (fauxqs) with a FIFO
 * and a standard demo queue and a local EventBridge endpoint with a demo bus, migrates, then invokes each scheduled function of `LOCAL_FUNCTIONS`
 * (the outbox poller and the inbox relay) on its `serverless.yml` schedule with a real-shaped,
 * counting-down context — overlapping invocations included, as in Lambda — while a demo
 * application enqueues orders and a demo payment provider sends a signed webhook per order through
 * the real HTTP inbox handler (`local-demo-webhooks.ts`; duplicates and a forgery included). The
 * relay forwards the stored webhooks to the outbox, and the poller delivers them to the FIFO queue.
 * A progress line per second shows outbox rows per state, messages/s, claims lost, webhook answers,
 * inbox rows per state and messages in the emulator.
 *
 * With `messages`, the whole demo batch (orders and webhooks) is written before the first
 * invocations, so the relay's first run finds every webhook instead of leaving them to its next
 * scheduled run a minute later. A continuous stream runs alongside the schedules; its webhooks are
 * relayed on the relay's schedule, as deployed.
 *
 * Stopping (Ctrl-C, SIGTERM, `signal`, or `exitWhenDrained` once the fed messages are all
 * finished: no outbox row pending or processing, and — with the demo inbox — no inbox row pending
 * or processing either) stops the feed and the schedules — from then on no invocation starts, not
 * even a scale-out pass a running one asks for (its slot is freed), nor a first one when the stop
 * comes during start-up — and brings each running invocation's end forward to
 * `now + deadline margin + MIN_CLAIM_WINDOW_MS − 1 ms`: like a Lambda near its timeout, the pass
 * claims nothing more, finishes what it holds and returns. Then the emulator and the embedded
 * database stop and `runLocal` resolves. The embedded database runs in a process group of its own
 * (`embedded-database.ts`), so a Ctrl-C in the terminal reaches this process only: the final
 * counts are read from a database that is still up.
 *
 * `speed` compresses time for demos: schedule periods and timeouts are divided by it (the
 * timeout never below margin + 5 s, the period never below 1 s). It is refused outside
 * `LOCAL_SPEED_RANGE`: a smaller factor stretched a period past the 32-bit delay of Node's timers,
 * which Node clamps to 1 ms (the functions were then invoked every millisecond).
 *
 * Without the demo (`demo: false`, the default when a config file is given: `configPath` or
 * `QUEUEBOX_CONFIG`) the run is for your own work: the scheduled functions run against the
 * database and the destinations and sources of your configuration, and nothing else — no emulator,
 * no demo queues, bus, table, orders or webhooks, no stand-in AWS credentials. The demo is refused
 * with a configuration that names destinations or routes (its fake orders would go to them); its
 * own destinations are the emulator's, and their clients sign with stand-in credentials, never
 * the environment's. `exitWhenDrained`
 * then stops once the outbox holds no row pending or processing (and the inbox none either, when
 * the configuration has push sources and no pull source: pull rows wait for your workers) — the
 * backlog found, plus what your application writes meanwhile. With the demo, `exitWhenDrained`
 * needs `messages` (a continuous stream never drains) and is refused without it.
 *
 * Every row that becomes dead during the run is printed with its error (`local-dead-rows.ts`);
 * the summary's `newlyDead` counts them.
 *
 * Scale-out (`outbox.scaleOut.maxConcurrentPasses`, `inbox.relay.scaleOut.maxConcurrentPasses`
 * above 1) works as deployed, without AWS: the asynchronous invoke a pass sends to start another
 * pass of its function starts that invocation in this process instead (`localInvoker`), with the
 * start event and a context of its own, alongside the scheduled ones; the start-up lines say so,
 * and the summary's `scaleOutPasses` counts the passes started.
 */
import { loadConfig } from '../config/load-config.ts';
import type { QueueBoxConfig } from '../config/schema.ts';
import { createDriver, resolveDatabaseUrl } from '../db/create-driver.ts';
import type { Driver } from '../db/driver.ts';
import { createInvocationScope, type InvocationScope } from './invocation-scope.ts';
import { removeLocalRunFile, writeLocalRunFile } from '../console/local-run-file.ts';
import { createLogger } from '../observability/logger.ts';
import { MIN_CLAIM_WINDOW_MS } from '../claims/lease.ts';
import { setContainer } from '../runtime/container.ts';
import { sleep } from '../runtime/deadline.ts';
import { startEmbeddedDatabase, type EmbeddedDatabase } from './embedded-database.ts';
import { createInvocationContext } from '../runtime/invocation-context.ts';
import { DEMO_CREDENTIALS, DEMO_PAYMENTS_DEFAULT_SECRET, DEMO_PAYMENTS_SECRET_ENV, demoSource, localConfig, refuseDemoWithOwnDestinations } from './local-config.ts';
import { DemoFeed } from './local-demo-feed.ts';
import { DemoWebhooks, type WebhookTally } from './local-demo-webhooks.ts';
import { DEFAULT_SCHEDULE, LOCAL_FUNCTIONS, readSchedules, type Schedule, type ScheduledHandler } from './local-schedules.ts';
import { startLocalSqsEmulator, type LocalSqsEmulator } from './local-sqs-emulator.ts';
import { refuseExistingRows } from './local-existing-rows.ts';
import { DeadRowWatch } from './local-dead-rows.ts';
import { UsageError } from '../errors.ts';
import { SCALE_OUT_EVENT_KEY, scaleOutTicket } from '../runtime/scale-out.ts';
import type { ScaleOutWorker } from '../db/driver.ts';
import type { InvokeAsync } from '../runtime/self-invoke.ts';

const redactUrl = (url: string) => url.replace(/:[^:@/]*@/, ':***@');

/**
 * How long after its first stop signal a run keeps its signal handlers: the terminal's and npm's
 * copies of one Ctrl-C arrive apart by milliseconds, by more on a loaded machine.
 */
export const DUPLICATE_SIGNAL_GRACE_MS = 1_000;

/** The `speed` factors a run takes (`--speed`): 1000 times slower to 1000 times faster. */
export const LOCAL_SPEED_RANGE = { min: 0.001, max: 1000 } as const;

/** The longest delay Node's timers take (2^31 − 1 ms, about 24.8 days); a longer one becomes 1 ms. */
const MAX_TIMER_DELAY_MS = 2 ** 31 - 1;

/** Printed once at start: the demo's refused and duplicate webhooks are deliberate. */
export const DEMO_REFUSALS_NOTE =
  'demo webhooks on purpose: every 4th is delivered twice (answered 200 duplicate, stored once) and every 10th order also draws a forgery ' +
  'signed with a wrong secret, which the inbox refuses (401, logged as "inbox request refused", nothing stored)';

export interface LocalRunOptions {
  /**
   * Run the demo (emulator, demo queues and bus, demo orders and webhooks). Default: true, unless
   * a config file is given (`configPath` or `QUEUEBOX_CONFIG`): then only your functions run. Refused
   * with a configuration that names destinations or routes: the demo publishes to the emulator only.
   */
  demo?: boolean;
  /** Enqueue exactly this many demo messages, then stop feeding; default: a continuous stream. Demo only. */
  messages?: number;
  /**
   * Stop once every fed message is finished (`sent` or `dead`); with the demo it needs `messages`.
   * Without the demo: once the backlog is drained (no outbox row pending or processing).
   */
  exitWhenDrained?: boolean;
  /** Config file (else `QUEUEBOX_CONFIG`, else embedded defaults). */
  configPath?: string;
  /** Run against a database whose QueueBox tables already hold rows (refused otherwise). */
  useExisting?: boolean;
  /** Schema for QueueBox's tables (tests isolate runs with it). */
  schema?: string;
  /** Time compression factor, within `LOCAL_SPEED_RANGE`; default 1. */
  speed?: number;
  /** Demo messages per second of the continuous stream; default 4. */
  feedPerSecond?: number;
  /** Stops the run when it aborts (in addition to SIGINT/SIGTERM). */
  signal?: AbortSignal;
  /** Progress output; default standard output. */
  out?: (line: string) => void;
  /** Environment; default `process.env`. */
  env?: Record<string, string | undefined>;
  /** An SQS emulator to deliver to instead of starting one; the caller stops it (tests read the queues after the run). */
  emulator?: LocalSqsEmulator;
}

/** What a local run did. */
export interface LocalRunSummary {
  fed: number;
  counts: Record<string, number>;
  emulator: Record<string, number>;
  /** Answers to the demo webhooks (all 0 without the demo inbox). */
  webhooks: WebhookTally;
  /** Inbox rows per state. */
  inbox: Record<string, number>;
  invocations: number;
  /** Of `invocations`, the passes that scale-out started (each ran in this process). */
  scaleOutPasses: number;
  claimsLost: number;
  stoppedBecause: 'drained' | 'signal';
  /** Whether the demo ran. */
  demo: boolean;
  /** Outbox and inbox rows that became dead during the run (each was printed with its error). */
  newlyDead: number;
}

/** Whether a run with these options is the demo: as asked, else unless a config file is given. */
export function isDemoRun(options: Pick<LocalRunOptions, 'demo' | 'configPath'>, env: Readonly<Record<string, string | undefined>>): boolean {
  return options.demo ?? !(options.configPath !== undefined || (env.QUEUEBOX_CONFIG ?? '') !== '');
}

/** Refuses option combinations that cannot do what they say, before anything starts. */
export function checkLocalRunOptions(options: LocalRunOptions, demo: boolean): void {
  // An empty path (`--config "$CFG"` with CFG unset) is no file to run without: refused by name.
  if (options.configPath === '') throw new UsageError('--config needs a file path');
  const speed = options.speed ?? 1;
  if (!(speed >= LOCAL_SPEED_RANGE.min && speed <= LOCAL_SPEED_RANGE.max)) {
    throw new UsageError(`--speed must be from ${LOCAL_SPEED_RANGE.min} to ${LOCAL_SPEED_RANGE.max} (not ${speed}): it divides the schedule periods and timeouts`);
  }
  if (!demo && options.messages !== undefined) {
    throw new UsageError('--messages feeds demo orders, and this run has no demo (--no-demo, the default with a config file); pass --demo to feed demo orders too');
  }
  if (demo && options.exitWhenDrained && options.messages === undefined) {
    throw new UsageError(
      '--exit-when-drained needs a finite run: the demo feeds a continuous stream that never drains. Pass --messages N with it; ' +
        // Without the demo a database that holds rows is refused unless --use-existing says so:
        // the way out names every flag it takes.
        'or, to drain the backlog of your own database and exit, run queuebox --config <file> local --no-demo --exit-when-drained --use-existing ' +
        '(the file names your database and destinations; --use-existing lets the run publish the rows it finds)',
    );
  }
}

export async function runLocal(options: LocalRunOptions = {}): Promise<LocalRunSummary> {
  const env = options.env ?? process.env;
  const out = options.out ?? ((line: string) => process.stdout.write(`${line}\n`));
  const speed = options.speed ?? 1;
  const demo = isDemoRun(options, env);
  checkLocalRunOptions(options, demo);
  const stop = new AbortController();
  const onAbort = () => stop.abort();
  let firstSignalAt: number | undefined;
  const onSignal = () => {
    firstSignalAt ??= Date.now();
    stop.abort();
  };
  // `on`, not `once`: under `npm start` a Ctrl-C reaches this process twice (from the terminal
  // and forwarded by npm); with `once`, the second SIGINT met no handler and killed the run
  // before its summary. Repeats are harmless (the stop is already under way).
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  options.signal?.addEventListener('abort', onAbort, { once: true });

  let embedded: EmbeddedDatabase | undefined;
  let emulator: LocalSqsEmulator | undefined;
  let driver: Driver | undefined;
  let feed: DemoFeed | undefined;
  // Overlapping invocations share this process, as concurrent invocations share a Lambda
  // environment: each runs in its own invocation scope, so log lines keep their own request id.
  const invocations = await createInvocationScope();
  try {
    const base = loadConfig({ ...(options.configPath !== undefined ? { path: options.configPath } : {}), env });
    // Before anything starts: the demo's fake orders never go to destinations of yours.
    if (demo) refuseDemoWithOwnDestinations(base);
    // Embedded only when the configuration names no database at all; a database.urlEnv whose
    // variable is unset is a configuration error (as for every other command), not a fallback.
    let url: string;
    if (base.database.url === undefined && base.database.urlEnv === undefined) {
      out('starting embedded PostgreSQL…');
      embedded = await startEmbeddedDatabase();
      url = embedded.url;
    } else {
      url = resolveDatabaseUrl(base, env);
    }
    if (!demo && Object.keys(base.destinations).length === 0) {
      throw new UsageError('this run has no demo (--no-demo, the default with a config file), and the configuration names no destinations for the outbox poller: add `destinations` and `outbox.routes`, or pass --demo');
    }
    // The demo's destination clients sign with stand-in credentials (`DEMO_CREDENTIALS`, given to
    // the poller when its handler is built), never the environment's; without the demo your own
    // destinations get your credentials or none.
    if (demo) emulator = options.emulator ?? (await startLocalSqsEmulator());
    const { config, demoInbox } = localConfig(base, url, emulator, options.schema);
    if (demoInbox && !env[DEMO_PAYMENTS_SECRET_ENV]) env[DEMO_PAYMENTS_SECRET_ENV] = DEMO_PAYMENTS_DEFAULT_SECRET;
    driver = await createDriver(config, env);
    await driver.migrate();
    if (embedded === undefined && options.useExisting !== true) await refuseExistingRows(driver, `database ${redactUrl(url)} (schema ${config.database.schema ?? 'public'})`, demo);
    // `queuebox console` finds the embedded database through this file.
    if (embedded) writeLocalRunFile({ url, schema: config.database.schema ?? 'public', marker: embedded.marker });
    const logger = createLogger({ serviceName: config.observability.serviceName, logLevel: config.observability.logLevel });
    driver.useLogger?.(logger);
    setContainer({ config, driver, logger, env, writeMetrics: () => {} });
    if (demo && config.database.type === 'postgres') {
      feed = new DemoFeed({ url, schema: config.database.schema ?? 'public', outboxTable: config.tables.outbox, maxAttempts: config.outbox.maxAttempts });
      await feed.prepare();
    }
    const source = demoSource(config);
    const webhookPath = `${config.inbox.basePath}${source?.path ?? ''}`;
    const webhooks =
      feed !== undefined && demoInbox && source !== undefined ? new DemoWebhooks({ path: webhookPath, source, secret: env[DEMO_PAYMENTS_SECRET_ENV]!, out, scope: invocations.scope }) : undefined;
    const database = embedded ? 'embedded PostgreSQL' : redactUrl(url);
    const routes = config.outbox.routes.map((r) => `${r.topicPattern} → ${r.destination}`).join(', ');
    if (emulator) {
      out(`QueueBox local: database ${database}, SQS emulator ${emulator.endpoint}`);
      out(`demo queues: ${Object.keys(emulator.counts()).join(', ')} · routes: ${routes}`);
    } else {
      out(`QueueBox local (no demo): database ${database}; your destinations ${Object.keys(config.destinations).join(', ')} · routes: ${routes}`);
      const sources = Object.entries(config.inbox.sources);
      if (sources.length > 0) out(`inbox sources: ${sources.map(([name, s]) => `${name} (${s.type}, ${s.consumption})`).join(', ')}`);
    }
    if (webhooks) {
      out(`demo webhooks: POST ${webhookPath} (hmac secret from ${DEMO_PAYMENTS_SECRET_ENV}) → inbox → inboxRelay → outbox → orders`);
      out(DEMO_REFUSALS_NOTE);
    }
    return await runScheduler({ options, config, driver, emulator, feed, webhooks, out, speed, stop: stop.signal, scope: invocations.scope });
  } finally {
    invocations.restore();
    setContainer(undefined);
    await feed?.close().catch(() => {});
    await driver?.close().catch(() => {});
    if (emulator !== options.emulator) await emulator?.stop().catch(() => {});
    if (embedded) removeLocalRunFile();
    await embedded?.stop().catch(() => {});
    // A stop that finishes within moments of its signal waits out the rest of the grace with the
    // handlers still in place: the other copy of the Ctrl-C may still be on its way, and Node.js
    // restores the default action while it exits, so a copy landing then would end the finished
    // run with a signal status instead of its exit code.
    if (firstSignalAt !== undefined) await sleep(firstSignalAt + DUPLICATE_SIGNAL_GRACE_MS - Date.now());
    // Only now: a repeated Ctrl-C that lands while the run cleans up must still find a handler,
    // or Node's default action would kill the process before the database is stopped.
    process.removeListener('SIGINT', onSignal);
    process.removeListener('SIGTERM', onSignal);
    options.signal?.removeEventListener('abort', onAbort);
  }
}

interface SchedulerInput {
  options: LocalRunOptions;
  config: QueueBoxConfig;
  driver: Driver;
  /** The demo's emulator; undefined without the demo. */
  emulator: LocalSqsEmulator | undefined;
  feed: DemoFeed | undefined;
  webhooks: DemoWebhooks | undefined;
  out: (line: string) => void;
  speed: number;
  stop: AbortSignal;
  scope: InvocationScope;
}

async function runScheduler(input: SchedulerInput): Promise<LocalRunSummary> {
  const { options, config, driver, emulator, feed, webhooks, out, speed, stop, scope } = input;
  const margin = config.lambda.deadlineMarginMs;
  const schedules = readSchedules();
  const running = new Set<Promise<void>>();
  // `begun`: no invocation starts from then on; `at`: the point every running invocation's end is brought forward to.
  const stopAt: { begun?: boolean; at?: number } = {};
  let invocations = 0;
  let scaleOutPasses = 0;
  let claimsLost = 0;
  let stoppedBecause: LocalRunSummary['stoppedBecause'] = 'signal';
  const dead = new DeadRowWatch(driver, config, out);
  await dead.begin();
  // Without the demo, the inbox counts toward "drained" only when the relay is all that works on it.
  const sources = Object.values(config.inbox.sources);
  const inboxDrains = webhooks !== undefined || (emulator === undefined && sources.some((s) => s.consumption === 'push') && !sources.some((s) => s.consumption === 'pull'));

  // Once stopping has begun no invocation starts: the stop point would leave it no time to claim,
  // and its handler would log that as a timeout too short for lambda.deadlineMarginMs.
  const stopping = () => stop.aborted || stopAt.begun === true;
  const invoke = (name: string, handler: ScheduledHandler, schedule: Schedule, event: unknown = SCHEDULED_EVENT) => {
    if (stopping()) return decline(name, event);
    invocations++;
    if (typeof event === 'object' && event !== null && SCALE_OUT_EVENT_KEY in event) scaleOutPasses++;
    const timeoutMs = Math.max(margin + 5000, Math.round(schedule.timeoutMs / speed));
    const started = Date.now();
    // Time left is min(the timeout, the stop point) — stopping brings the invocation's end forward.
    const context = createInvocationContext({ functionName: localFunctionName(name), timeoutMs, now: () => Math.max(Date.now(), started + timeoutMs - ((stopAt.at ?? Infinity) - Date.now())) });
    const work = scope(context, () => handler(event, context))
      .then((result) => {
        const lost = (result as { claimsLost?: unknown } | undefined)?.claimsLost;
        if (typeof lost === 'number') claimsLost += lost;
      })
      .catch((error: unknown) => out(`${name} failed: ${error instanceof Error ? error.message : String(error)}`))
      .finally(() => running.delete(work));
    running.add(work);
  };
  // A scale-out start declined while stopping frees the slot its pass took for it (else the slot
  // would stay taken until its lease ends); the stop waits for that as for a running invocation.
  const decline = (name: string, event: unknown) => {
    let ticket: ReturnType<typeof scaleOutTicket>;
    try {
      ticket = scaleOutTicket(event, name as ScaleOutWorker);
    } catch {
      return;
    }
    if (ticket === undefined) return;
    const release = driver
      .scaleOutRelease({ worker: ticket.worker, slot: ticket.slot })
      .then(
        () => {},
        () => {}, // it frees itself when its lease ends
      )
      .finally(() => running.delete(release));
    running.add(release);
  };

  const feeding = feedDemo(feed, webhooks, options, stop, out);
  if (options.messages !== undefined) {
    out(`writing ${options.messages} demo orders${webhooks ? ' and their payment webhooks' : ''}…`);
    await feeding.finished;
  }
  const timers: NodeJS.Timeout[] = [];
  const loaded = new Map<string, { name: string; handler: ScheduledHandler; schedule: Schedule }>();
  const startPass = localInvoker((functionName, event) => {
    const fn = loaded.get(functionName);
    if (fn === undefined) throw new UsageError(`no local function is named ${functionName}`);
    invoke(fn.name, fn.handler, fn.schedule, event);
  });
  for (const fn of LOCAL_FUNCTIONS) {
    // Stopped while starting up (Ctrl-C, `| head` closing the output): no schedule starts.
    if (stop.aborted) break;
    const handler = await fn.load({ invoke: startPass, ...(emulator !== undefined ? { credentials: DEMO_CREDENTIALS } : {}) });
    const schedule = schedules.get(fn.name) ?? DEFAULT_SCHEDULE;
    loaded.set(localFunctionName(fn.name), { name: fn.name, handler, schedule });
    out(`${fn.name}: ${schedule.expression}, timeout ${schedule.timeoutMs / 1000} s${speed !== 1 ? ` (speed ×${speed})` : ''}`);
    const passes = fn.maxConcurrentPasses(config);
    if (passes > 1) out(`${fn.name}: scale-out up to ${passes} passes at once; the passes it starts run in this process, not through AWS Lambda`);
    invoke(fn.name, handler, schedule);
    // Capped at the timers' limit too: a schedule of weeks (at a low speed) must not become 1 ms.
    timers.push(setInterval(() => invoke(fn.name, handler, schedule), Math.min(MAX_TIMER_DELAY_MS, Math.max(1000, Math.round(schedule.periodMs / speed)))));
  }

  const started = Date.now();
  let lastSent = 0;
  let lastAt = started;
  let counts: Record<string, number> = {};
  let inbox: Record<string, number> = {};
  try {
    while (!stop.aborted) {
      await sleep(1000, stop);
      if (stop.aborted) break; // the final read below reports the counts (or why it cannot)
      // Inbox first: a relay forward commits its outbox row with the inbox mark, so every row
      // counted processed here is already counted by the outbox read that follows.
      inbox = (await driver.inboxStats()).counts;
      counts = (await driver.outboxStats()).counts;
      const now = Date.now();
      const sent = counts.sent ?? 0;
      const rate = ((sent - lastSent) * 1000) / Math.max(1, now - lastAt);
      [lastSent, lastAt] = [sent, now];
      const queues = emulator ? ` | emulator: ${Object.entries(emulator.counts()).map(([q, n]) => `${q} ${n}`).join(', ')}` : '';
      const inboxLine = webhooks
        ? ` | webhooks: received ${webhooks.tally.received} · duplicate ${webhooks.tally.duplicate} · rejected ${webhooks.tally.rejected} | inbox: ${stateLine(inbox)}`
        : '';
      out(
        `[${Math.round((now - started) / 1000)}s] ${feed ? `fed ${feed.fed} · ` : ''}pending ${counts.pending ?? 0} · processing ${counts.processing ?? 0} · sent ${sent} · dead ${counts.dead ?? 0} | ${rate.toFixed(1)} msg/s | claims lost ${claimsLost}${inboxLine}${queues}`,
      );
      await dead.report({ outbox: counts, inbox });
      const inboxBusy = inboxDrains ? (inbox.pending ?? 0) + (inbox.processing ?? 0) : 0;
      if (options.exitWhenDrained && feeding.done && inboxBusy + (counts.pending ?? 0) + (counts.processing ?? 0) === 0) {
        stoppedBecause = 'drained';
        break;
      }
    }
  } finally {
    for (const timer of timers) clearInterval(timer);
    feeding.stop();
    stopAt.begun = true;
    // An invocation started just before reads its time left at its start in its first steps, which
    // wait on no I/O: one turn of the event loop lets it, so it starts with its own time and is
    // then cut short like a Lambda near its timeout, instead of starting with no time to claim.
    await new Promise((resolve) => setImmediate(resolve));
    stopAt.at = Date.now() + margin + MIN_CLAIM_WINDOW_MS - 1;
    out('stopping: no new invocations; waiting for the running ones to finish…');
    // A pass may still ask for a scale-out pass while it ends: declined (no invocation starts now).
    while (running.size > 0) await Promise.all(running);
    await feeding.finished;
  }
  try {
    inbox = (await driver.inboxStats()).counts;
    counts = (await driver.outboxStats()).counts;
    await dead.report({ outbox: counts, inbox });
  } catch (error) {
    // A configured database may have gone away meanwhile (the embedded one stops only after
    // this read): report the last counts read instead of failing the run's summary.
    out(`final counts unavailable (${error instanceof Error ? error.message : String(error)}); showing the last counts read`);
  }
  const summary: LocalRunSummary = {
    fed: feed?.fed ?? 0,
    counts,
    emulator: emulator?.counts() ?? {},
    webhooks: { ...(webhooks?.tally ?? { received: 0, duplicate: 0, rejected: 0, failed: 0 }) },
    inbox,
    invocations,
    scaleOutPasses,
    claimsLost,
    stoppedBecause,
    demo: emulator !== undefined,
    newlyDead: dead.newlyDead,
  };
  out(`stopped (${stoppedBecause}): ${JSON.stringify(summary)}`);
  return summary;
}

/** What a scheduled invocation of the runner receives, as from an EventBridge schedule. */
const SCHEDULED_EVENT = { source: 'aws.events', 'detail-type': 'Scheduled Event', detail: {} };

/** The function name a local invocation of `name` carries in its context (scale-out invokes it by that name). */
export function localFunctionName(name: string): string {
  return `queuebox-local-${name}`;
}

/**
 * The `InvokeAsync` of a local run: an asynchronous invoke of a local function starts an
 * invocation of it in this process (`start`, which must not wait for it), and is accepted as
 * Lambda accepts one (HTTP 202): at once, before the invocation runs. The payload goes through
 * JSON as it would over the wire.
 */
export function localInvoker(start: (functionName: string, event: unknown) => void): InvokeAsync {
  return async (functionName, payload) => {
    start(functionName, JSON.parse(JSON.stringify(payload)) as unknown);
  };
}

/** `pending 0 · processing 0 · processed 3 · dead 0`: rows per state. */
function stateLine(counts: Record<string, number>): string {
  return Object.entries(counts)
    .map(([state, n]) => `${state} ${n}`)
    .join(' · ');
}

/** Runs the demo feed — each order, then its webhooks — `messages` times, or as a steady stream until stopped. */
function feedDemo(
  feed: DemoFeed | undefined,
  webhooks: DemoWebhooks | undefined,
  options: LocalRunOptions,
  stop: AbortSignal,
  out: (line: string) => void,
): { done: boolean; stop(): void; finished: Promise<void> } {
  const halt = new AbortController();
  const state = {
    done: feed === undefined,
    stop: () => halt.abort(),
    finished: Promise.resolve(),
  };
  if (!feed) return state;
  const signal = AbortSignal.any([stop, halt.signal]);
  const feedOne = async () => {
    for (const order of await feed.feed(1)) await webhooks?.deliverFor(order);
  };
  state.finished = (async () => {
    if (options.messages !== undefined) {
      for (let n = 0; n < options.messages && !signal.aborted; n++) await feedOne();
    } else {
      const perSecond = options.feedPerSecond ?? 4;
      while (!signal.aborted) {
        await feedOne();
        await sleep(1000 / perSecond, signal);
      }
    }
  })()
    .catch((error: unknown) => out(`demo feed stopped: ${error instanceof Error ? error.message : String(error)}`))
    .finally(() => {
      state.done = true;
    });
  return state;
}
