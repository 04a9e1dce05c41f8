/**
 * One run of a pull worker's loop: claim as many rows as handler slots are free (at most `batch`),
 * start a handler on each at once, keep their leases alive while they run, claim again when a
 * slot frees; on the way out release the rows no handler started (a stop that came while a claim
 * was under way; no attempt spent) and wait for running handlers up to a drain timeout.
 *
 * No claimed row waits in the worker for a slot: a row held that way kept its lease only as long
 * as the renewals kept up, and a lease that ended before its handler ran was charged an attempt
 * by the next claim (with a large `batch` and a short lease, rows were dead-lettered that no
 * handler ever ran on).
 *
 * A handler given up on (the drain timed out, or `handlerTimeoutMs`) may still hold a business
 * transaction open. The run's transaction runner ends it (the default PostgreSQL runner terminates
 * its connection) and reports the promise of that ending (`onForcedEnd`); the run returns only once
 * those ended, up to `answerWaitMs` (`FORCED_END_WAIT_MS` when that is unbounded), so that no
 * transaction, and none of its row locks, outlives a Lambda invocation frozen after it returned.
 *
 * `start()` and `runOnce()` are the same loop with a different `PullRunPolicy`.
 */
import { claimKey } from '../claims/claim-key.ts';
import { LeaseKeeper, type RenewAnswer } from '../claims/lease-keeper.ts';
import { redactError } from '../claims/redact.ts';
import type { ClaimRef, Driver } from '../db/driver.ts';
import { endedAtDeadline } from '../db/statement-budget.ts';
import type { QueueBoxMetrics } from '../observability/metrics.ts';
import { sleep } from '../runtime/deadline.ts';
import { handlePullMessage, type HandleContext, type HandleResult, type PullHandler, type PullLogger, type PullRetryPolicy } from './handle-pull-message.ts';
import type { PullClient, PullMessage } from './pull-client.ts';
import type { TransactionRunner } from './transaction-runner.ts';

/**
 * How long a run without an answer bound (`start()`'s, at `stop()`) waits for the transactions of
 * handlers it gave up on to be ended (ms): a runner that cannot reach its database (a partition)
 * does not hold the stop forever.
 */
export const FORCED_END_WAIT_MS = 5000;

/** Counts of one run (`runOnce`) or of a worker's whole life (`stop`). */
export interface PullRunSummary {
  claimed: number;
  completed: number;
  retried: number;
  dead: number;
  /** Claimed rows no handler started (a stop came while their claim was under way), returned to `pending` without spending an attempt. */
  released: number;
  /**
   * Claims lost: a fenced write changed no row, or a renewal changed no row or failed. One lost at
   * a renewal counts here when the loss is known, whether or not its handler has returned (one
   * still running when the run returns, or given up on later, is not also `abandoned`); so does
   * one the renewal under way when the run ends finds lost, if it answers before the run returns.
   */
  claimsLost: number;
  /**
   * Rows left to their lease because a shutdown stopped waiting for their handler (still running
   * when the run returned), or their handler ran past `handlerTimeoutMs`; a claim lost before
   * counts in `claimsLost` instead. A handler given up on at `handlerTimeoutMs` whose completion,
   * retry or dead-letter lands all the same (its write was already under way, or its transaction
   * runner does not end the transaction) counts as that settle instead, when it lands before the
   * run returns (after: in the metric only). Each claim counts once: `claimed = completed +
   * retried + dead + released + claimsLost + abandoned`.
   */
  abandoned: number;
  durationMs: number;
}

/** What differs between a long-running worker and a bounded pass. */
export interface PullRunPolicy {
  /** Lease to claim with now, in ms; 0 stops claiming (and renewing, without `renewalLeaseMs`). */
  leaseMs(): number;
  /** Lease to renew with now, in ms (`renewalLeaseMsFor`); 0 stops renewing. Absent: `leaseMs`. */
  renewalLeaseMs?(): number;
  /** False once the run must not claim or start handlers any more (deadline). */
  mayStart(): boolean;
  /** Milliseconds until `mayStart` turns false (undefined: never on its own). */
  msUntilEnd(): number | undefined;
  /** True: return when nothing is claimable and nothing runs. False: sleep `pollMs` and poll. */
  exitWhenIdle: boolean;
  /** How long to wait for running handlers once the loop ends. */
  drainTimeoutMs(): number;
  /**
   * How long to wait for statements already sent (a renewal) once the run ends, and for the ending
   * of transactions of handlers given up on; undefined: renewals until they end, endings up to
   * `FORCED_END_WAIT_MS`.
   */
  answerWaitMs(): number | undefined;
  /**
   * How long to wait for the ending of transactions of handlers given up on, when it differs from
   * `answerWaitMs` (a bounded run keeps time back to return).
   */
  forcedEndWaitMs?(): number | undefined;
  /** Told of each claim's answer: called with the error when the claim statement failed, without one when it answered. */
  onClaimAnswered?(...failure: [] | [error: unknown]): void;
  /**
   * Runs a claim statement within the run's bound for claims (`runOnce`: its deadline, while the
   * completions may use the margin, up to the invocation's end); absent: the claim keeps the
   * budget it is sent in.
   */
  boundClaim?<T>(claim: () => Promise<T>): Promise<T>;
}

export interface PullRunSettings<Tx> {
  driver: Driver;
  client: PullClient;
  source: string;
  handler: PullHandler<Tx>;
  transactions: TransactionRunner<Tx>;
  retry: PullRetryPolicy;
  leaseMs: number;
  batch: number;
  concurrency: number;
  pollMs: number;
  /** How long a handler may run before the run gives up on it (`PullWorkerOptions.handlerTimeoutMs`); undefined: no limit. */
  handlerTimeoutMs: number | undefined;
  metrics?: QueueBoxMetrics;
  logger: PullLogger;
}

export class PullRun<Tx> {
  readonly summary: PullRunSummary = { claimed: 0, completed: 0, retried: 0, dead: 0, released: 0, claimsLost: 0, abandoned: 0, durationMs: 0 };
  readonly #s: PullRunSettings<Tx>;
  readonly #policy: PullRunPolicy;
  readonly #keeper: LeaseKeeper;
  readonly #stop = new AbortController();
  readonly #force = new AbortController();
  /** Rows of the last claim not started yet: empty again right after the claim, unless a stop came while it was under way. */
  readonly #queue: PullMessage[] = [];
  /** Lost-claim signals per claim (`claimKey`: id and token); a row claimed again gets its own. */
  readonly #signals = new Map<string, AbortSignal>();
  /** One per handler slot taken: settles when the handler's message is settled, or when its handler timed out. */
  readonly #active = new Set<Promise<void>>();
  /** The handlers holding a slot, per claim (`claimKey`), each with whether its claim is in the summary yet. */
  readonly #running = new Map<string, HandlerRun>();
  /** The `handlerTimeoutMs` timers of running handlers; those left when the run returns are cleared. */
  readonly #handlerTimers = new Set<NodeJS.Timeout>();
  /** Resolves when a stop is requested (one listener for the whole run). */
  readonly #stopped: Promise<void>;
  /** The transaction runner handed to handlers: the settings' one, told where to report a forced ending. */
  readonly #transactions: TransactionRunner<Tx>;
  /** Forced endings of handlers' transactions (`onForcedEnd`) still under way; each leaves the set when it settles. */
  readonly #endings = new Set<Promise<void>>();
  /** Set once `run` returned (or threw): what it returned is final, later outcomes count in the metrics only. */
  #returned = false;

  constructor(settings: PullRunSettings<Tx>, policy: PullRunPolicy) {
    this.#stopped = new Promise((resolve) => this.#stop.signal.addEventListener('abort', () => resolve(), { once: true }));
    this.#s = settings;
    this.#policy = policy;
    this.#transactions = (work, options) =>
      settings.transactions(work, {
        ...options,
        onForcedEnd: (ended) => {
          this.#trackEnding(ended);
          options?.onForcedEnd?.(ended);
        },
      });
    this.#keeper = new LeaseKeeper({
      leaseMs: settings.leaseMs,
      nextLeaseMs: () => (policy.renewalLeaseMs ? policy.renewalLeaseMs() : policy.leaseMs()),
      renew: (claims, leaseMs) => renewClaims(settings.driver, claims, leaseMs),
      // Counted here, in the metric and in the summary, once: the handler's run, aborted, may end
      // after the run returned (it reacts to its signal when it can), or be given up on later (a
      // forced stop, `handlerTimeoutMs`), and its end then counts nothing more. A claim no handler
      // started yet (queued at a stop; no renewal reaches it before its release) is counted by the
      // release, whose fenced write finds it lost. Also reached from the renewal under way when the
      // run closes the keeper (`close({ reportLost })`): a handler the drain gave up on is still
      // in `#running` until the run returns, so its loss counts in `claimsLost`, not `abandoned`.
      onLost: (claim, reason, error) => {
        settings.metrics?.count('claimsLost', 1, { component: 'pull' });
        const run = this.#running.get(claimKey(claim));
        if (run) this.#count(run, 'lost');
        settings.logger.warn('pull claim lost at renewal; its handler is aborted', { messageId: claim.id, reason, error: error === undefined ? undefined : redactError(error) });
      },
    });
  }

  /** Asks the loop to stop claiming and starting handlers. */
  requestStop(): void {
    this.#stop.abort();
  }

  /** Runs until idle (policy), the policy's end, `requestStop`, or a claim error (rethrown after the drain). */
  async run(): Promise<PullRunSummary> {
    const started = Date.now();
    let failure: { error: unknown } | undefined;
    try {
      await this.#loop();
    } catch (error) {
      failure = { error };
    }
    await this.#releaseQueued();
    await this.#drain();
    // Handlers still running now were given up on by the drain; their timers would keep a
    // process alive and report on a run that has ended.
    for (const timer of this.#handlerTimers) clearTimeout(timer);
    this.#handlerTimers.clear();
    // A renewal under way ends before the run returns (a Lambda container is frozen as soon as
    // the handler returns; a renewal cut from its answer would be lost with it). So do the
    // endings of the transactions of handlers given up on: one still open when the container is
    // frozen would hold its row locks until the container thaws or dies.
    const closing = this.#keeper.close({ reportLost: true });
    const answerMs = this.#policy.answerWaitMs();
    const timer = new AbortController();
    const endingMs = this.#policy.forcedEndWaitMs?.() ?? answerMs ?? FORCED_END_WAIT_MS;
    const ending = this.#endings.size === 0 ? undefined : Promise.race([Promise.all(this.#endings), sleep(endingMs, timer.signal)]);
    const closed = Promise.all([closing, ending]);
    await (answerMs === undefined ? closed : Promise.race([closed, sleep(answerMs, timer.signal)]));
    timer.abort();
    this.summary.durationMs = Date.now() - started;
    // What this run did when it returned: handlers still running (a shutdown stopped waiting for
    // them) are abandoned, but for those whose claim was lost before (counted in `claimsLost`:
    // each claim counts once); their later end changes nothing.
    for (const run of this.#running.values()) this.#count(run, 'abandoned');
    this.#returned = true;
    if (failure) throw failure.error;
    return { ...this.summary };
  }

  #mayContinue(): boolean {
    return !this.#stop.signal.aborted && this.#policy.mayStart();
  }

  async #loop(): Promise<void> {
    const { batch, concurrency, pollMs } = this.#s;
    while (this.#mayContinue()) {
      if (this.#queue.length === 0 && this.#active.size < concurrency) {
        const leaseMs = this.#policy.leaseMs();
        if (leaseMs <= 0) return;
        // No more rows than slots free now (they only free up meanwhile): each row claimed starts
        // its handler right after the claim, none waits for a slot with its lease running.
        const rows = await this.#claim(Math.min(batch, concurrency - this.#active.size), leaseMs);
        if (rows === undefined) continue;
        if (rows.length === 0) {
          // A free slot polls on while handlers run: until `pollMs` passes or one of them ends.
          if (this.#active.size > 0) await this.#waitForSlot(pollMs);
          else if (this.#policy.exitWhenIdle) return;
          else await sleep(pollMs, this.#stop.signal);
          continue;
        }
      }
      while (this.#queue.length > 0 && this.#active.size < concurrency && this.#mayContinue()) this.#startNext();
      if (this.#active.size >= concurrency || (this.#queue.length > 0 && this.#mayContinue())) await this.#waitForSlot();
    }
  }

  /** Claims a batch; `undefined` after a claim error that the policy absorbs (long-running loop). */
  async #claim(batch: number, leaseMs: number): Promise<PullMessage[] | undefined> {
    let rows: PullMessage[];
    try {
      const claim = () => this.#s.client.claim(this.#s.source, { batch, leaseMs });
      rows = await (this.#policy.boundClaim ? this.#policy.boundClaim(claim) : claim());
      this.#policy.onClaimAnswered?.();
    } catch (error) {
      this.#policy.onClaimAnswered?.(error);
      // Not sent because the deadline passed (a freeze past it), or cancelled at the deadline that
      // bounds it: nothing claimed, the run ends.
      if (endedAtDeadline(error, !this.#policy.mayStart())) return [];
      if (this.#policy.exitWhenIdle) throw error;
      this.#s.logger.error('pull claim failed; polling again', { source: this.#s.source, error: redactError(error) });
      await sleep(this.#s.pollMs, this.#stop.signal);
      return undefined;
    }
    this.summary.claimed += rows.length;
    for (const row of rows) {
      this.#signals.set(claimKey(row.claim), this.#keeper.track(row.claim));
      this.#queue.push(row);
    }
    return rows;
  }

  #startNext(): void {
    const message = this.#queue.shift()!;
    const key = claimKey(message.claim);
    const timeoutMs = this.#s.handlerTimeoutMs;
    const timeout = timeoutMs === undefined ? undefined : new AbortController();
    const run: HandlerRun = { messageId: message.id, counted: undefined };
    this.#running.set(key, run);
    const context: HandleContext<Tx> = {
      client: this.#s.client,
      handler: this.#s.handler,
      transactions: this.#transactions,
      retry: this.#s.retry,
      keeper: this.#keeper,
      leaseSignal: this.#signals.get(key)!,
      // A handler past its time is given up on as at a forced stop: its signal fires, its open
      // transaction ends, and nothing more is written for it.
      forceSignal: timeout === undefined ? this.#force.signal : AbortSignal.any([this.#force.signal, timeout.signal]),
      logger: this.#s.logger,
    };
    const handled = handlePullMessage(context, message).then(
      // A claim lost at a renewal, or a handler given up on (timed out, or still running when the
      // run returned), was counted then, not again when the handler ends.
      (result) => this.#count(run, result),
      (error: unknown) => {
        // A settle statement failed (database error): the row keeps its claim until the lease ends.
        this.#s.logger.error('pull message could not be settled; it is retried after its lease', { messageId: message.id, error: redactError(error) });
      },
    );
    let slot = handled;
    if (timeout !== undefined) {
      let timer: NodeJS.Timeout | undefined;
      const givenUp = new Promise<void>((resolve) => {
        timer = setTimeout(() => {
          this.#handlerTimers.delete(timer!);
          // No more renewals: the lease ends, and the next claim of the row charges this run's attempt.
          this.#keeper.release(message.claim);
          timeout.abort(new Error(`pull handler did not finish within handlerTimeoutMs (${timeoutMs} ms)`));
          // Unless its claim was lost before (counted in `claimsLost` then): its row is no longer
          // this run's to leave to a lease (another worker may hold it already).
          const lostBefore = run.counted === 'lost';
          this.#count(run, 'abandoned');
          if (lostBefore) this.#s.logger.warn('pull handler ran past handlerTimeoutMs after its claim was lost (counted in claimsLost); nothing more is written for its row', { messageId: message.id, handlerTimeoutMs: timeoutMs });
          else this.#s.logger.warn('pull handler ran past handlerTimeoutMs; its signal is aborted and its row left to its lease', { messageId: message.id, handlerTimeoutMs: timeoutMs });
          resolve();
        }, timeoutMs);
        this.#handlerTimers.add(timer);
      });
      void handled.finally(() => {
        clearTimeout(timer);
        this.#handlerTimers.delete(timer!);
      });
      // The slot frees when the handler ends or times out, whichever comes first: a handler that
      // never returns does not hold it.
      slot = Promise.race([handled, givenUp]);
    }
    const task = slot.finally(() => {
      this.#signals.delete(key);
      this.#running.delete(key);
      this.#active.delete(task);
    });
    this.#active.add(task);
  }

  /** Keeps a forced ending reported by the runner until it settles (fulfilled or not). */
  #trackEnding(ended: PromiseLike<unknown>): void {
    const settled = Promise.resolve(ended).then(
      () => {},
      () => {},
    );
    this.#endings.add(settled);
    void settled.then(() => this.#endings.delete(settled));
  }

  /**
   * Counts a handler's claim in the summary (and its settle in the metric), the first time only:
   * each claim counts once. One exception: a settle that landed after the run gave up on its
   * handler (`abandoned`: its write was already sent when the run gave up, or its transaction
   * runner does not end the transaction at the signal) is what the database holds. It counts in
   * the metric, and it replaces `abandoned` in the summary unless the run has returned it.
   */
  #count(run: HandlerRun, result: HandleResult): void {
    if (run.counted !== undefined) {
      if (run.counted === 'abandoned' && isSettle(result)) this.#settledAfterAll(run, result);
      return;
    }
    run.counted = result;
    const key = ({ completed: 'completed', retried: 'retried', dead: 'dead', lost: 'claimsLost', abandoned: 'abandoned' } as const)[result];
    this.summary[key] += 1;
    if (isSettle(result)) this.#s.metrics?.count('pullMessages', 1, { status: result });
  }

  /** A handler given up on whose settle landed after all: the metric counts it, and the summary while the run has not returned it. */
  #settledAfterAll(run: HandlerRun, result: 'completed' | 'retried' | 'dead'): void {
    run.counted = result;
    this.#s.metrics?.count('pullMessages', 1, { status: result });
    if (!this.#returned) {
      this.summary.abandoned -= 1;
      this.summary[result] += 1;
    }
    this.#s.logger.warn('pull handler the worker gave up on settled its message after all (its write was already under way, or its transaction was not ended)', {
      messageId: run.messageId,
      status: result,
      inSummary: !this.#returned,
    });
  }

  /** Waits until a handler finishes, a stop is requested, the policy's end arrives, or `maxMs` passes. */
  async #waitForSlot(maxMs?: number): Promise<void> {
    const wake = new AbortController();
    const waits: Array<Promise<unknown>> = [...this.#active, this.#stopped];
    if (maxMs !== undefined) waits.push(sleep(maxMs, wake.signal));
    const untilEnd = this.#policy.msUntilEnd();
    if (untilEnd !== undefined) waits.push(sleep(untilEnd + 1, wake.signal));
    await Promise.race(waits);
    wake.abort();
  }

  /** Rows claimed but never started go back to `pending`, fenced, attempt unchanged. */
  async #releaseQueued(): Promise<void> {
    const queued = this.#queue.splice(0);
    await Promise.all(queued.map((message) => this.#release(message)));
  }

  /**
   * A claimed row no handler started back to `pending`, fenced (a lost claim changes nothing). It
   * was claimed a moment ago, by the claim that was under way when the stop came: no renewal ran
   * for it yet.
   */
  async #release(message: PullMessage): Promise<void> {
    this.#keeper.release(message.claim);
    this.#signals.delete(claimKey(message.claim));
    try {
      const outcome = await this.#s.client.release(message.claim);
      if (outcome.ok) {
        this.summary.released += 1;
        this.#s.metrics?.count('pullMessages', 1, { status: 'released' });
      } else this.summary.claimsLost += 1;
    } catch (error) {
      this.#s.logger.error('pull release failed; the row is reclaimable after its lease', { messageId: message.id, error: redactError(error) });
    }
  }

  /**
   * Waits for running handlers up to the drain timeout, then aborts them (nothing more is
   * written); the runner ends their open transactions, and `run` waits for that.
   */
  async #drain(): Promise<void> {
    if (this.#active.size === 0) return;
    const timer = new AbortController();
    await Promise.race([Promise.allSettled([...this.#active]), sleep(this.#policy.drainTimeoutMs(), timer.signal)]);
    timer.abort();
    if (this.#active.size === 0) return;
    this.#force.abort(new Error('pull worker stopped before the handler finished'));
    this.#s.logger.warn('pull worker stopped with handlers still running; their rows are reclaimable after their leases', { running: this.#active.size });
  }
}

/** A handler holding a slot: `counted` says how its claim is in the summary (lost, given up on, or settled), once it is. */
interface HandlerRun {
  messageId: string;
  counted: HandleResult | undefined;
}

/** An outcome whose fenced write changed the row (the metric `pullMessages` counts these). */
function isSettle(result: HandleResult): result is 'completed' | 'retried' | 'dead' {
  return result === 'completed' || result === 'retried' || result === 'dead';
}

/**
 * Renews the claims due together. Several go in one fenced statement (the driver's many-row
 * renewal of the inbox table; the token fences the row as the pull statement does), so a worker
 * with many handlers running sends one statement a round and takes one pooled connection, not
 * one per row. When that statement fails, each claim is renewed by a statement of its own: a
 * failure that is one row's (a lock wait that reached its lease's end) then loses that row's
 * claim only, and the others' handlers go on.
 */
async function renewClaims(driver: Driver, claims: ClaimRef[], leaseMs: number): Promise<string[] | RenewAnswer> {
  if (claims.length > 1) {
    try {
      return await driver.inboxRenewMany({ claims, leaseMs });
    } catch {
      // Each on its own, below.
    }
  }
  const renewed: string[] = [];
  const failed = new Map<string, unknown>();
  await Promise.all(
    claims.map(async (c) => {
      try {
        if (await driver.pullRenew({ ...c, leaseMs })) renewed.push(c.id);
      } catch (error) {
        failed.set(c.id, error);
      }
    }),
  );
  return { renewed, failed };
}
