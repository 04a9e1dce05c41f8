/**
 * Scale-out by backlog: a scheduled pass (outbox poller, inbox relay) that sees more due rows than
 * it can drain before its deadline starts more passes of its own function, each an asynchronous
 * invoke (`InvocationType: 'Event'`) that runs one `drain` pass and ends when the backlog is gone.
 *
 * - **When.** Once per scheduled pass, `checkDelayMs` after it started (a tenth of its time, at
 *   most `MAX_CHECK_DELAY_MS`; again after as long while it has finished nothing, until half its
 *   time is gone): its rate so far (rows finished — sent, retried or dead; forwarded for the
 *   relay — ÷ time) times the time left is what it can still drain (`capacity`). Finished, not
 *   claimed: a claim grown to `outbox.maxBatchSize`, or two batches in flight, put rows in hand
 *   long before they are drained, and counting them would promise more than the pass can do; the due rows are counted up to what `maxConcurrentPasses`
 *   passes can drain (`countDue`, through the pending index). Passes wanted in all:
 *   `min(maxConcurrentPasses, ⌈due ÷ capacity⌉)`; a pass that finished nothing wants none.
 * - **How many at once.** Each started pass holds a slot (`driver.scaleOutAcquire`): one row of
 *   the maintenance table per slot `1 … maxConcurrentPasses − 1`, with a lease on the database
 *   clock. The start event carries the slot and its token; the started pass takes the slot over
 *   for its own time (`scaleOutStart`) and frees it when it returns (`scaleOutRelease`). Slots
 *   are taken in the database, so overlapping scheduled passes together never hold more than
 *   `maxConcurrentPasses − 1` of them, and a slot whose pass died frees itself when its lease
 *   ends. A start event delivered twice, or so late that its slot's lease has passed
 *   (`START_WINDOW_MS`: a throttled asynchronous event waits in Lambda's queue), finds its token
 *   gone and runs no pass.
 * - **No chain.** A started pass carries `generation: 1` and never starts passes itself
 *   (`MAX_GENERATION`); the next schedule decides again. A started pass that finds the backlog
 *   drained returns at once.
 * - **Nothing outlives the handler.** The check and its invokes are awaited when the pass ends,
 *   after its in-flight work; an invoke is bounded by the pass's deadline (the invocation's time
 *   left less `lambda.deadlineMarginMs`), so one that hangs leaves the margin for the rest. An invoke that fails frees its slot, is
 *   logged and counted (`queuebox_scale_out_passes_total{outcome="failed"}`), and never fails
 *   the pass; so does a failed check. The check's statements run in the pass's budget (its
 *   deadline); the release of a failed invoke's slot, which may come at the deadline, in the
 *   pass's closing window (`closingBudgetMs`), as a started pass's own release does in its
 *   handler.
 */
import { redactError } from '../claims/redact.ts';
import type { Driver, ScaleOutSlot, ScaleOutWorker } from '../db/driver.ts';
import { UsageError } from '../errors.ts';
import type { QueueBoxMetrics } from '../observability/metrics.ts';
import type { PassLogger } from '../outbox/pass-context.ts';
import { withStatementBudget } from '../db/statement-budget.ts';
import { closingBudgetMs, type Deadline } from './deadline.ts';
import type { InvokeAsync } from './self-invoke.ts';

/** The key of a start event: `{ "queueboxScaleOut": { worker, generation, slot, token } }`. */
export const SCALE_OUT_EVENT_KEY = 'queueboxScaleOut';
/** How long a start event may wait in Lambda's queue before its slot frees itself (ms). */
export const START_WINDOW_MS = 60_000;
/** The latest point of a scheduled pass at which it checks its backlog (ms after it started). */
export const MAX_CHECK_DELAY_MS = 5_000;
/** Share of a scheduled pass's time after which it checks its backlog (at most `MAX_CHECK_DELAY_MS`). */
export const CHECK_FRACTION = 0.1;
/** Passes of this generation or later start none: only a scheduled pass (generation 0) does. */
export const MAX_GENERATION = 1;

/** The highest slot a start event may name: `maxConcurrentPasses` is at most 64, its slots 1 … 63. */
const MAX_SLOT = 63;
/** Most due rows one check counts. */
export const MAX_BACKLOG_COUNT = 1_000_000;

/** The largest slot token (microseconds since 1970): the largest 64-bit integer, as the databases read it (`bigint`, `BIGINT`). */
const MAX_TOKEN = 2n ** 63n - 1n;

/** What a start event carries. */
export interface ScaleOutTicket {
  worker: ScaleOutWorker;
  generation: number;
  slot: ScaleOutSlot;
}

/**
 * The start event's ticket, or `undefined` for any other event (a schedule, an invoke by hand).
 * A start event of the wrong shape or for another worker is refused naming the key.
 */
export function scaleOutTicket(event: unknown, worker: ScaleOutWorker): ScaleOutTicket | undefined {
  if (typeof event !== 'object' || event === null || !(SCALE_OUT_EVENT_KEY in event)) return undefined;
  const raw = (event as Record<string, unknown>)[SCALE_OUT_EVENT_KEY] as Record<string, unknown> | null;
  const key = (field: string) => `event.${SCALE_OUT_EVENT_KEY}.${field}`;
  if (typeof raw !== 'object' || raw === null) throw new UsageError(`event.${SCALE_OUT_EVENT_KEY} must be an object`);
  if (raw.worker !== worker) throw new UsageError(`${key('worker')} must be ${JSON.stringify(worker)} for this function, not ${JSON.stringify(raw.worker)}`);
  // A started pass carries generation 1 (`MAX_GENERATION`) and a slot below `maxConcurrentPasses` (at most 64).
  if (!Number.isInteger(raw.generation) || (raw.generation as number) < 1 || (raw.generation as number) > MAX_GENERATION) throw new UsageError(`${key('generation')} must be an integer from 1 to ${MAX_GENERATION}`);
  if (!Number.isInteger(raw.slot) || (raw.slot as number) < 1 || (raw.slot as number) > MAX_SLOT) throw new UsageError(`${key('slot')} must be an integer from 1 to ${MAX_SLOT}`);
  // The database reads the token as a 64-bit integer: 19 digits may be past the largest one.
  if (typeof raw.token !== 'string' || !/^\d{1,19}$/.test(raw.token) || BigInt(raw.token) > MAX_TOKEN) throw new UsageError(`${key('token')} must be the slot's token (digits, at most ${MAX_TOKEN})`);
  return { worker, generation: raw.generation as number, slot: { slot: raw.slot as number, token: raw.token } };
}

/** Called by a pass at its start and end (`OutboxPassOptions.scaleOut`, `RelayPassOptions.scaleOut`). */
export interface ScaleOutHook {
  /**
   * The pass started; `finished()` reads the rows it has finished so far (sent, retried or dead;
   * the relay: forwarded, retried or dead); `lastClaimFull()`, whether its latest claim sent with
   * nothing of its own in flight took as many rows as it asked for (true before its first claim).
   */
  passStarted(finished: () => number, lastClaimFull?: () => boolean): void;
  /** The pass stopped claiming: ends the check, and awaits it and its invokes if under way. */
  passEnded(): Promise<void>;
}

/** What scale-out did in one invocation (in the handler's summary). */
export interface ScaleOutReport {
  /** `scheduled`: may start passes; `started`: a pass another started; `duplicate`: a start event whose slot was gone (no pass ran). */
  role: 'scheduled' | 'started' | 'duplicate';
  generation: number;
  /**
   * The check's estimate (scheduled passes that checked): due rows counted, rows this pass could
   * still drain, passes wanted in all. `due` is absent when the pass's latest claim came back short
   * of its limit: it took every row that could move then, so no pass is wanted (`wanted` 1).
   */
  due?: number;
  capacity?: number;
  wanted?: number;
  /** Passes started (invoke accepted) and invokes that failed. */
  started: number;
  failed: number;
}

export type ScaleOutDriver = Pick<Driver, 'outboxCountDue' | 'inboxCountDue' | 'scaleOutAcquire' | 'scaleOutStart' | 'scaleOutRelease'>;

export interface ScaleOutOptions {
  worker: ScaleOutWorker;
  driver: ScaleOutDriver;
  /** The setting (`outbox.scaleOut.maxConcurrentPasses`, `inbox.relay.scaleOut.maxConcurrentPasses`); 1: off. */
  maxConcurrentPasses: number;
  /** The function to start passes of: the invocation's own, at the alias or version that invoked it (`selfInvokeTarget`). */
  functionName: string;
  /** The invocation's event: a start event makes this a started pass. */
  event: unknown;
  deadline: Deadline;
  metrics: QueueBoxMetrics;
  logger: PassLogger;
  invoke: InvokeAsync;
  /** When the scheduled pass checks its backlog (ms after it started); default a tenth of its time, at most `MAX_CHECK_DELAY_MS`. */
  checkDelayMs?: number;
}

/** The invocation's part in scale-out: whether to run a pass, in which mode, with which hook. */
export interface ScaleOutInvocation {
  /** False for a start event whose slot was gone: run no pass. */
  runPass: boolean;
  /** `drain` for a started pass (it returns when the backlog is gone), else `deadline`. */
  mode: 'deadline' | 'drain';
  hook: ScaleOutHook;
  report: ScaleOutReport;
  /** After the pass: a started pass frees its slot (a failure is logged; the lease frees it). */
  end(): Promise<void>;
}

const idleHook: ScaleOutHook = { passStarted: () => {}, passEnded: async () => {} };

/**
 * Joins scale-out at the start of an invocation: a start event takes its slot over (or is found a
 * duplicate); any other event is a scheduled pass, which checks its backlog when the setting is
 * above 1.
 */
export async function joinScaleOut(options: ScaleOutOptions): Promise<ScaleOutInvocation> {
  const { driver, worker, logger, metrics, deadline } = options;
  const ticket = scaleOutTicket(options.event, worker);
  if (ticket !== undefined) {
    const report: ScaleOutReport = { role: 'started', generation: ticket.generation, started: 0, failed: 0 };
    const held = await driver.scaleOutStart({ worker, slot: ticket.slot, leaseMs: Math.max(1, deadline.invocationRemainingMs()) });
    if (held === undefined) {
      report.role = 'duplicate';
      metrics.count('scaleOutPasses', 1, { function: worker, outcome: 'duplicate' });
      logger.info('scale-out start event whose slot is gone (delivered twice, or after its lease): no pass runs', { slot: ticket.slot.slot, generation: ticket.generation });
      return { runPass: false, mode: 'drain', hook: idleHook, report, end: async () => {} };
    }
    return {
      runPass: true,
      mode: 'drain',
      hook: idleHook,
      report,
      end: async () => {
        try {
          await driver.scaleOutRelease({ worker, slot: held });
        } catch (error) {
          logger.warn('scale-out slot not freed: it frees itself when its lease ends', { slot: held.slot, error: redactError(error) });
        }
      },
    };
  }
  const report: ScaleOutReport = { role: 'scheduled', generation: 0, started: 0, failed: 0 };
  const hook = options.maxConcurrentPasses > 1 && report.generation < MAX_GENERATION ? backlogCheck(options, report) : idleHook;
  return { runPass: true, mode: 'deadline', hook, report, end: async () => {} };
}

/** The hook of a scheduled pass: one backlog check, and the invokes it decides on. */
function backlogCheck(options: ScaleOutOptions, report: ScaleOutReport): ScaleOutHook {
  const { deadline, logger } = options;
  let timer: NodeJS.Timeout | undefined;
  let checking: Promise<void> | undefined;
  let ended = false;
  return {
    passStarted(finished, lastClaimFull = () => true) {
      const started = performance.now();
      const budgetMs = deadline.remainingMs();
      const delayMs = options.checkDelayMs ?? Math.min(MAX_CHECK_DELAY_MS, budgetMs * CHECK_FRACTION);
      const fire = () => {
        timer = undefined;
        if (ended) return;
        const elapsedMs = performance.now() - started;
        // No row finished yet (a slow first claim or call): look again, until half the pass's time is gone.
        if (finished() === 0 && elapsedMs + delayMs < budgetMs / 2) {
          timer = setTimeout(fire, delayMs);
          return;
        }
        checking = check(options, report, finished(), elapsedMs, lastClaimFull()).catch((error: unknown) => {
          logger.warn('scale-out check failed: no pass started', { error: redactError(error) });
        });
      };
      timer = setTimeout(fire, delayMs);
    },
    async passEnded() {
      ended = true;
      if (timer !== undefined) clearTimeout(timer);
      await checking;
    },
  };
}

async function check(options: ScaleOutOptions, report: ScaleOutReport, finished: number, elapsedMs: number, lastClaimFull: boolean): Promise<void> {
  const { driver, worker, deadline, logger, metrics } = options;
  const max = options.maxConcurrentPasses;
  // A pass that finished nothing has no backlog to share.
  if (finished === 0 || elapsedMs <= 0) return;
  const capacity = Math.floor((finished / elapsedMs) * deadline.remainingMs());
  if (capacity < 1) return;
  // A claim that came back short took every row that could move: the due rows past it wait behind
  // their key's or aggregate's row in flight or retry, and a started pass would claim nothing. The
  // count below cannot tell (it counts every due row), so it is not read.
  if (!lastClaimFull) {
    Object.assign(report, { capacity, wanted: 1 });
    logger.info('scale-out check: the last claim took every row that could move, no pass started', { capacity });
    return;
  }
  // Enough to tell whether max passes are wanted: beyond capacity × (max − 1) the answer is max.
  const limit = Math.min(MAX_BACKLOG_COUNT, capacity * (max - 1) + 1);
  const due = worker === 'outboxPoller' ? await driver.outboxCountDue({ limit }) : await driver.inboxCountDue({ limit });
  const wanted = Math.min(max, Math.ceil(due / capacity));
  Object.assign(report, { due, capacity, wanted });
  if (wanted <= 1) return;
  const slots = await driver.scaleOutAcquire({ worker, slots: max - 1, want: wanted - 1, leaseMs: START_WINDOW_MS });
  await Promise.all(
    slots.map(async (slot) => {
      const event = { [SCALE_OUT_EVENT_KEY]: { worker, generation: report.generation + 1, slot: slot.slot, token: slot.token } };
      try {
        // Bounded by the pass's deadline, not the invocation's end: an endpoint that stops
        // answering leaves the margin for the slot's release and the pass's own shutdown.
        await options.invoke(options.functionName, event, Math.max(1, deadline.remainingMs()));
        report.started++;
        metrics.count('scaleOutPasses', 1, { function: worker, outcome: 'started' });
      } catch (error) {
        report.failed++;
        metrics.count('scaleOutPasses', 1, { function: worker, outcome: 'failed' });
        logger.error('scale-out invoke failed: the pass goes on without it', { function: options.functionName, slot: slot.slot, error: redactError(error) });
        // An invoke that hung gave up at the deadline: the release is a closing step (`closingBudgetMs`).
        await withStatementBudget(closingBudgetMs(deadline, { shared: false }), () => driver.scaleOutRelease({ worker, slot })).catch((releaseError: unknown) => {
          logger.warn('scale-out slot not freed: it frees itself when its lease ends', { slot: slot.slot, error: redactError(releaseError) });
        });
      }
    }),
  );
  logger.info('scale-out check', { due, capacity, wanted, started: report.started, failed: report.failed });
}
