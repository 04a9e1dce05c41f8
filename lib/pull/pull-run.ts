/**
 * One run of a pull worker's loop: claim a batch, keep every claimed row's lease alive, start up to
 * `concurrency` handlers, claim again when the batch is used up; on the way out release the rows
 * no handler started (no attempt spent) and wait for running handlers up to a drain timeout.
 *
 * `start()` and `runOnce()` are the same loop with a different `PullRunPolicy`.
 */
import { claimKey } from '../claims/claim-key.ts';
import { LeaseKeeper, type LostReason } from '../claims/lease-keeper.ts';
import type { Driver } from '../db/driver.ts';
import { InvocationEndedError } from '../db/statement-budget.ts';
import { FencedLockTimeoutError } from '../errors.ts';
import type { QueueBoxMetrics } from '../observability/metrics.ts';
import { sleep } from '../runtime/deadline.ts';
import { handlePullMessage, type HandleContext, type HandleResult, type PullHandler, type PullLogger, type PullRetryPolicy } from './handle-pull-message.ts';
import type { PullClient, PullMessage } from './pull-client.ts';
import type { TransactionRunner } from './transaction-runner.ts';

/** Counts of one run (`runOnce`) or of a worker's whole life (`stop`). */
export interface PullRunSummary {
  claimed: number;
  completed: number;
  retried: number;
  dead: number;
  /** Claimed rows no handler started, returned to `pending` without spending an attempt. */
  released: number;
  /** Rows whose claim was lost (fenced write changed no row, or renewal failed). */
  claimsLost: number;
  /** Rows left to their lease because a shutdown stopped waiting for their handler. */
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
  /** How long to wait for statements already sent (a renewal) once the run ends; undefined: until they end. */
  answerWaitMs(): number | undefined;
  /** Told of each claim's answer: called with the error when the claim statement failed, without one when it answered. */
  onClaimAnswered?(...failure: [] | [error: unknown]): void;
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
  readonly #queue: PullMessage[] = [];
  /** Lost-claim signals per claim (`claimKey`: id and token); a row claimed again gets its own. */
  readonly #signals = new Map<string, AbortSignal>();
  /** Why a claim was lost at renewal (`claimKey`), until its row leaves the run. */
  readonly #lostAtRenewal = new Map<string, LostReason>();
  readonly #active = new Set<Promise<void>>();
  /** Resolves when a stop is requested (one listener for the whole run). */
  readonly #stopped: Promise<void>;

  constructor(settings: PullRunSettings<Tx>, policy: PullRunPolicy) {
    this.#stopped = new Promise((resolve) => this.#stop.signal.addEventListener('abort', () => resolve(), { once: true }));
    this.#s = settings;
    this.#policy = policy;
    this.#keeper = new LeaseKeeper({
      leaseMs: settings.leaseMs,
      nextLeaseMs: () => (policy.renewalLeaseMs ? policy.renewalLeaseMs() : policy.leaseMs()),
      // Pull renewal is one fenced statement per row; a failed statement loses its own row's claim only.
      renew: async (claims, leaseMs) => {
        const renewed: string[] = [];
        const failed = new Map<string, unknown>();
        await Promise.all(
          claims.map(async (c) => {
            try {
              if (await settings.driver.pullRenew({ ...c, leaseMs })) renewed.push(c.id);
            } catch (error) {
              failed.set(c.id, error);
            }
          }),
        );
        return { renewed, failed };
      },
      // Counted here once; a row waiting for a slot whose claim is lost is not counted again when it leaves (#release).
      onLost: (claim, reason, error) => {
        this.#lostAtRenewal.set(claimKey(claim), reason);
        settings.metrics?.count('claimsLost', 1, { component: 'pull' });
        settings.logger.warn('pull claim lost at renewal; its handler is aborted', { messageId: claim.id, reason, error: error === undefined ? undefined : String(error) });
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
    // A renewal under way ends before the run returns (a Lambda container is frozen as soon as
    // the handler returns; a renewal cut from its answer would be lost with it).
    const closing = this.#keeper.close();
    const answerMs = this.#policy.answerWaitMs();
    const timer = new AbortController();
    await (answerMs === undefined ? closing : Promise.race([closing, sleep(answerMs, timer.signal)]));
    timer.abort();
    this.summary.durationMs = Date.now() - started;
    if (failure) throw failure.error;
    // What this run did when it returned: handlers still running (a shutdown stopped waiting
    // for them) are abandoned, and their later end does not change the summary handed out.
    return { ...this.summary, abandoned: this.summary.abandoned + this.#active.size };
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
        const rows = await this.#claim(batch, leaseMs);
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
      rows = await this.#s.client.claim(this.#s.source, { batch, leaseMs });
      this.#policy.onClaimAnswered?.();
    } catch (error) {
      this.#policy.onClaimAnswered?.(error);
      // Not sent because the invocation ended (a freeze past its end): nothing claimed, the run ends.
      if (error instanceof InvocationEndedError) return [];
      if (this.#policy.exitWhenIdle) throw error;
      this.#s.logger.error('pull claim failed; polling again', { source: this.#s.source, error: String(error) });
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
    // Lost at renewal before its handler started: no handler runs. #release counts it once and,
    // when the renewal failed (rather than changed no row), hands the row back.
    if (this.#signals.get(claimKey(message.claim))?.aborted === true) {
      const task = this.#release(message).finally(() => this.#active.delete(task));
      this.#active.add(task);
      return;
    }
    const context: HandleContext<Tx> = {
      client: this.#s.client,
      handler: this.#s.handler,
      transactions: this.#s.transactions,
      retry: this.#s.retry,
      keeper: this.#keeper,
      leaseSignal: this.#signals.get(claimKey(message.claim))!,
      forceSignal: this.#force.signal,
      logger: this.#s.logger,
    };
    const task = handlePullMessage(context, message)
      .then(
        (result) => this.#count(result),
        (error: unknown) => {
          // A settle statement failed (database error): the row keeps its claim until the lease ends.
          this.#s.logger.error('pull message could not be settled; it is retried after its lease', { messageId: message.id, error: String(error) });
        },
      )
      .finally(() => {
        this.#signals.delete(claimKey(message.claim));
        this.#lostAtRenewal.delete(claimKey(message.claim));
        this.#active.delete(task);
      });
    this.#active.add(task);
  }

  #count(result: HandleResult): void {
    const key = ({ completed: 'completed', retried: 'retried', dead: 'dead', lost: 'claimsLost', abandoned: 'abandoned' } as const)[result];
    this.summary[key] += 1;
    if (key === 'completed' || key === 'retried' || key === 'dead') this.#s.metrics?.count('pullMessages', 1, { status: key });
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

  /** A claimed row no handler started back to `pending`, fenced (a lost claim changes nothing). */
  async #release(message: PullMessage): Promise<void> {
    const key = claimKey(message.claim);
    const lost = this.#lostAtRenewal.get(key);
    this.#keeper.release(message.claim);
    this.#signals.delete(key);
    this.#lostAtRenewal.delete(key);
    try {
      if (lost === undefined) {
        const outcome = await this.#s.client.release(message.claim);
        if (outcome.ok) {
          this.summary.released += 1;
          this.#s.metrics?.count('pullMessages', 1, { status: 'released' });
        } else this.summary.claimsLost += 1;
        return;
      }
      // Lost at renewal, and counted there in the metric: one lost claim, whatever follows.
      this.summary.claimsLost += 1;
      // A renewal that changed no row proved the row is another claim's: nothing to hand back.
      if (lost === 'fenced') return;
      // A renewal that failed proves nothing, and a row left to its lease is charged an attempt by
      // the next claim although no handler ran. The fenced release hands it back if it is still
      // ours and changes nothing if not; sent through the driver, it is not counted again.
      await this.#s.driver.pullRelease(message.claim);
    } catch (error) {
      // A release that waited on the row's lock until the lease ended changed nothing.
      if (lost !== undefined && error instanceof FencedLockTimeoutError) return;
      this.#s.logger.error('pull release failed; the row is reclaimable after its lease', { messageId: message.id, error: String(error) });
    }
  }

  /** Waits for running handlers up to the drain timeout, then aborts them (nothing more is written). */
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
