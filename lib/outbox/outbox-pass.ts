/**
 * One scheduled pass of the outbox poller (spec §3–4; seed: claims and leases).
 *
 * 1. Reclaim: expired `processing` rows back to `pending`, at most once per `claimTimeoutMs / 5`
 *    across all invocations (the gate lives in the database); beside the first claim, not before it.
 * 2. Loop: claim a batch (one statement; lease = min(claimTimeoutMs, time left in the
 *    invocation); `outbox.batchSize` rows, growing to `outbox.maxBatchSize` while claims come back
 *    full (to half of it while claims of `maxBatchSize` take every row that can move:
 *    `learnCeiling`) and shrinking while they come back less than half full (`nextClaimSize`), fewer when
 *    the rows are large (`claimLimitFor`) or when a grown claim could not be published before the
 *    deadline (`rowsPublishableBefore`); all in `claim-size.ts`), deliver it, settle it; the next claim is issued while earlier batches publish
 *    once the oldest of them has been out for as long as a claim takes (`pipelineHoldMs`: a batch
 *    whose destination answered at once is in its sent mark by then, and is waited for instead)
 *    (at most `MAX_BATCHES_IN_FLIGHT`; paused for a few claims after such a pipelined claim found
 *    nothing — a paused claim waits for a batch at most `maxPollIntervalMs` — and never shrinking
 *    the size: `afterClaim`), and all of them share `outbox.concurrency` call slots.
 *    In-flight claims are renewed every third of the lease, fenced; a lost renewal aborts the
 *    row's publish and the row is never settled by this pass.
 * 3. Stop claiming — and starting a key's next round in a batch of several rows of a key — when
 *    the time left before the deadline is below the claim window
 *    (`max(MIN_CLAIM_WINDOW_MS, 2 × the slowest destination call of this pass)`), when the lease
 *    would be shorter than `MIN_LEASE_MS`, when `signal` aborts, or — in `drain` mode — as soon
 *    as a claim that started with nothing in flight finds nothing. An idle claim in `deadline` mode waits
 *    and claims again until the deadline: `pollIntervalMs` after the first empty claim, doubling
 *    with each further one up to `maxPollIntervalMs` (`idlePollDelayMs`), back to `pollIntervalMs`
 *    once a claim finds rows; a batch that finishes meanwhile ends the wait. An idle invocation thus
 *    sends about one claim a second, and a row committed while it waits is claimed within about
 *    `maxPollIntervalMs` (docs/performance.md, idle cost).
 * 4. Wait for in-flight work up to `shutdownTimeoutMs`, never past the deadline. Work still in
 *    flight then is abandoned: its rows stay `processing` and the reclaim recovers them once
 *    their lease (which never outlives the invocation) expires. The renewal under way and every
 *    settle already sent are awaited to their end (each one statement, one round trip) while the
 *    invocation lasts (`answerWaitMs`), so the pass leaves no statement running and `abandoned`
 *    counts only rows whose settle did not land.
 *    The pass's counts (sent, retried, dead, reclaimed, lost) are then written (`metrics.flush()`)
 *    before any later step, which may wait on the database; a settle that made rows dead writes
 *    its counts at once, as a lost claim does.
 * 5. Gauges: pending count and oldest pending age from `outboxStats({ pendingOnly: true })`, which
 *    reads the pending rows only (the table's finished rows are not counted at every pass), at
 *    most once per `BACKLOG_GAUGE_INTERVAL_MS` in all: a driver that read them (or found them read)
 *    within it does not ask (`backlog-gauge-gate.ts`), and the read opens a gate row in the
 *    database first (`onceEveryMs`), so passes side by side count the backlog once, not each. The
 *    read is a closing step (`closingBudgetMs`): bounded by the deadline, or a short slice past it.
 *
 * Statements: the claims, the reclaim, the scale-out check's and the backlog read are bounded by
 * the deadline (`lambda.deadlineMarginMs` before the invocation's end); only the finishing writes
 * (settles: sent, retry, dead, release) and the renewals may use the margin, up to the
 * invocation's end. A lease still runs to the invocation's end (`withStatementBudget`'s lease bound).
 * A claim or the reclaim that ends at the deadline — not sent once it has passed, or cancelled
 * there by the database (a lock held across it: PostgreSQL 57014, `mssql` ETIMEOUT) — took
 * nothing (its transaction rolled back; a reclaim on PostgreSQL keeps, and counts, the chunks it
 * committed before: `reclaimExpired`): the pass ends as at any deadline (`stoppedBecause:
 * 'deadline'`, its summary returned, its counts written), not with an error (`unlessEndedAtDeadline`;
 * the reclaim through `reclaimWithinDeadline`, which also sends it again as a deadlock victim).
 * Any other error of a claim or the reclaim fails the pass. A finishing write not sent because
 * the invocation has no time left (a pass frozen or held past its end, `settleInTime` in
 * `deliver-batch.ts`) did not run either: its rows stay `processing` for the reclaim, counted in
 * `abandoned` and `outOfTime`, with a warning naming those the destination accepted (delivered
 * again after their lease); the pass ends with its summary. A finishing write sent and failed
 * fails the pass.
 */
import { claimKey } from '../claims/claim-key.ts';
import { LeaseKeeper } from '../claims/lease-keeper.ts';
import { idlePollDelayMs } from '../claims/backoff.ts';
import { leaseMsFor, MIN_CLAIM_WINDOW_MS, reclaimThrottleMs, renewalLeaseMsFor } from '../claims/lease.ts';
import { redactedError, redactError } from '../claims/redact.ts';
import type { QueueBoxConfig } from '../config/schema.ts';
import type { Destinations } from '../destinations/create-destinations.ts';
import { answerReclaimCut, reclaimWithinDeadline, unlessEndedAtDeadline, withStatementBudget } from '../db/statement-budget.ts';
import type { OutboxRow } from '../db/driver.ts';
import { QueueBoxError } from '../errors.ts';
import { BACKLOG_GAUGE_INTERVAL_MS, backlogGaugeDue, backlogGaugeRead } from '../observability/backlog-gauge-gate.ts';
import { flushSoonOf, type QueueBoxMetrics } from '../observability/metrics.ts';
import { answerWaitMs, closingBudgetMs, type Deadline } from '../runtime/deadline.ts';
import type { ScaleOutHook } from '../runtime/scale-out.ts';
import { CallLimiter } from './call-limiter.ts';
import { afterClaim, claimLimitFor, claimLimitRung, claimMemoryOf, claimTimed, mayPipeline, pipelineHoldMs, rowsPerCallOf, rowsPublishableBefore } from './claim-size.ts';
import { deliverBatch } from './deliver-batch.ts';
import { OpenCalls } from './open-calls.ts';
import type { OutboxPassDriver, PassContext, PassLogger, PassTally } from './pass-context.ts';
import type { Router } from './routes.ts';
import { signalSettled, waitAny } from './wait-any.ts';

/** Claimed batches being published at once (the next claim overlaps the current publish). */
export const MAX_BATCHES_IN_FLIGHT = 2;
export type StopReason = 'deadline' | 'drained' | 'stopped' | 'error';

/** What a pass did; counts are rows unless named otherwise. */
export interface OutboxPassSummary extends PassTally {
  /** False when the shared throttle skipped the reclaim step (another invocation ran it recently). */
  reclaimRan: boolean;
  /**
   * Claimed rows whose settle did not land before the pass returned (neither settled nor lost);
   * they stay `processing` until reclaimed. A settle already sent is awaited, not abandoned.
   */
  abandoned: number;
  /**
   * Rows of `abandoned` whose finishing write (sent, retry, dead, release) was not sent because
   * the invocation had no time left (a pass frozen or held past its end): it did not run, so the
   * pass ends with its summary, not an error. Set by every pass; absent only when none ran.
   */
  outOfTime?: number;
  durationMs: number;
  stoppedBecause: StopReason;
}

export interface OutboxPassOptions {
  driver: OutboxPassDriver;
  config: Pick<QueueBoxConfig, 'outbox'>;
  destinations: Destinations;
  router: Router;
  deadline: Deadline;
  metrics: QueueBoxMetrics;
  logger: PassLogger;
  /** Stops claiming when it aborts (local runner shutdown); in-flight work is still awaited. */
  signal?: AbortSignal;
  /** `deadline` (scheduled pass, default): claim until the deadline. `drain`: return once a claim finds nothing. */
  mode?: 'deadline' | 'drain';
  /** Jitter source for retry delays (tests); default `Math.random`. */
  random?: () => number;
  /** Scale-out by backlog (`lib/runtime/scale-out.ts`): told when the pass starts and when it stops claiming. */
  scaleOut?: ScaleOutHook;
}

/**
 * A pass that failed (database error); `summary` is what it did before and while stopping. Its
 * message quotes the cause's redacted (`redactedError`): it is logged wherever it goes (the
 * handler's runtime logs a thrown error's message and stack). `cause` is the error itself.
 */
export class OutboxPassError extends QueueBoxError {
  override readonly name = 'OutboxPassError';
  constructor(
    readonly summary: OutboxPassSummary,
    cause: unknown,
  ) {
    super(`outbox pass failed: ${redactedError(cause).message}`, { cause });
  }
}

/**
 * Runs one pass; resolves with its summary, or rejects with `OutboxPassError` after settling what it can.
 * Every statement of the pass is bounded by its deadline (`withStatementBudget`), and every lease
 * by the invocation's end; the settles and renewals by the invocation's end (the margin is theirs).
 */
export function runOutboxPass(options: OutboxPassOptions): Promise<OutboxPassSummary> {
  const { deadline } = options;
  return withStatementBudget(() => deadline.remainingMs(), () => outboxPass(options), () => deadline.invocationRemainingMs());
}

async function outboxPass(options: OutboxPassOptions): Promise<OutboxPassSummary> {
  const started = performance.now();
  const { driver, deadline, logger, metrics } = options;
  const outbox = options.config.outbox;
  const calls = new OpenCalls();
  const tally: PassTally = { claimed: 0, sent: 0, retried: 0, dead: 0, claimsLost: 0, reclaimed: 0, batches: 0, publishCalls: 0, released: 0 };
  const slowest = new Map<string, number>();
  const claimWindowMs = () => Math.max(MIN_CLAIM_WINDOW_MS, 2 * Math.max(0, ...slowest.values()));
  let closed = false;
  let failure: unknown;
  // Rows whose finishing write was not sent for lack of time, and those of them the destination accepted.
  const notSent = { rows: 0, delivered: 0 };
  const countNotSent = (rows: number, delivered: number) => {
    notSent.rows += rows;
    notSent.delivered += delivered;
  };
  const firstLeaseMs = leaseMsFor(outbox.claimTimeoutMs, deadline.invocationRemainingMs());
  const ctx: PassContext = {
    driver,
    destinations: options.destinations,
    router: options.router,
    limiter: new CallLimiter(outbox.concurrency),
    keeper: new LeaseKeeper({
      leaseMs: Math.max(firstLeaseMs, 1),
      nextLeaseMs: () => renewalLeaseMsFor(outbox.claimTimeoutMs, deadline.invocationRemainingMs()),
      // A renewal may use the margin: it keeps the claims of work that is finishing.
      renew: (claims, leaseMs) => withStatementBudget(() => deadline.invocationRemainingMs(), () => driver.outboxRenewMany({ claims, leaseMs })),
      onLost: (claim, reason, error) => {
        ctx.lost.add(claimKey(claim));
        tally.claimsLost++;
        metrics.count('claimsLost', 1, { component: 'outbox' });
        ctx.flushMetrics();
        logger.warn('outbox claim lost at renewal: its publish is aborted and the row is left to its new owner', {
          id: claim.id,
          reason,
          ...(error !== undefined ? { error: redactError(error) } : {}),
        });
      },
    }),
    metrics,
    logger,
    finishingBudgetMs: () => deadline.invocationRemainingMs(),
    retryBaseDelayMs: outbox.retryBaseDelayMs,
    random: options.random ?? Math.random,
    calls,
    closed: () => closed,
    lost: new Set(),
    settling: new Set(),
    unfinished: new Set(),
    // A sink that throws fails the pass, as it does at the pass's other flushes (not the process).
    flushMetrics: flushSoonOf(metrics, (error) => (failure ??= error)),
    tally,
    publishTimed: (type, ms) => slowest.set(type, Math.max(slowest.get(type) ?? 0, ms)),
    callFitsBeforeDeadline: () => deadline.remainingMs() >= claimWindowMs(),
  };
  // Batches being published: an array (at most MAX_BATCHES_IN_FLIGHT), not a Map, for the
  // garbage collector's sake (see OpenCalls).
  const inFlight: Array<{ work: Promise<void>; rows: number; startedAt: number }> = [];
  const inFlightWork = () => inFlight.map((b) => b.work);
  const stopWait = signalSettled(options.signal);
  let reclaimRan = false;
  let stoppedBecause: StopReason = 'deadline';
  // Claims in a row that found nothing: the idle wait grows with them.
  let emptyClaims = 0;
  // The pass waited out a pause's wait for its batches (or an idle wait) and may claim pipelined.
  let pauseWaited = false;
  // The size of the last claim that found rows, kept per driver (a container's next invocation
  // starts from it): large payloads lower the next claim's limit.
  const maxBatchSize = Math.max(outbox.batchSize, outbox.maxBatchSize ?? outbox.batchSize);
  const memory = claimMemoryOf(driver, outbox.batchSize, maxBatchSize);
  const rowsPerCall = rowsPerCallOf(options.destinations.values());

  // Whether the latest claim sent with nothing in flight took as many heads of keys (and keyless
  // rows) as it asked for (scale-out starts passes only then). The heads, not the rows: the limit
  // bounds the heads, and the followers of their keys (`outbox.rowsPerKey`) only fill the room
  // they leave, so a claim of 12 keys' heads and 88 of their followers took every row that could
  // move, and a started pass would claim nothing. A pipelined claim is left out: one that comes
  // back short because this pass holds the keys in flight says nothing of what another pass could claim.
  let lastClaimFull = true;
  options.scaleOut?.passStarted(
    () => tally.sent + tally.retried + tally.dead,
    () => lastClaimFull,
  );

  // The reclaim runs beside the first claim, on its own connection, instead of before it: the
  // claim does not wait for it (a statement on a new connection, about a round trip and its
  // planning). The claim's snapshot sees a row being reclaimed as `processing`, so it skips its key
  // as it would any key in flight; the rows reclaimed are claimed from the next claim on (a claim
  // that found nothing before the reclaim ended does not end a drain while the reclaim returned
  // rows, and an idle wait ends when it does). It is awaited before the pass stops waiting for its
  // work, so it never outlives the pass.
  let reclaimSettled = false;
  // Resolved when the reclaim returned rows or failed: the idle wait after a claim sent before the
  // reclaim ended listens for it (the rows are due now; a failure ends the pass).
  let wakeAfterReclaim!: () => void;
  const reclaimWake = new Promise<void>((resolve) => (wakeAfterReclaim = resolve));
  // Never rejects: whatever fails in it, the statement or what reports its result, is the pass's
  // failure, as anything else that fails in the pass.
  const reclaiming = (async () => {
    try {
      // Bounded by the pass's deadline, retried as a deadlock victim, and ended quietly at the
      // deadline (`reclaimWithinDeadline`): a reclaim that ended there did not run, and the pass
      // ends at its deadline, not with an error. A reclaim cut short after some of its chunks
      // committed (`cutBy`) answers with their counts, counted below whatever cut it.
      const reclaim =
        (await reclaimWithinDeadline(() => driver.outboxReclaimExpired({ throttleMs: reclaimThrottleMs(outbox.claimTimeoutMs) }), deadline, (error) =>
          logger.warn('outbox reclaim cancelled at the pass deadline: it returned no row; expired rows wait for a later reclaim', { error: redactError(error) }),
        )) ?? { ran: false, reclaimed: 0, dead: 0 };
      reclaimRan = reclaim.ran;
      tally.reclaimed = reclaim.reclaimed;
      if (reclaim.reclaimed > 0) wakeAfterReclaim();
      metrics.count('outboxReclaimed', reclaim.reclaimed);
      // A lease that expired during a row's last delivery made it dead (the reclaim counted the attempt).
      metrics.count('outboxMessages', reclaim.dead, { status: 'dead' });
      if (reclaim.dead > 0) logger.error('outbox rows dead: the lease of their last attempt expired during the delivery', { count: reclaim.dead });
      // Emitted now: an invocation killed later in the pass must not take the count with it.
      if (reclaim.reclaimed > 0 || reclaim.dead > 0) metrics.flush();
      // Cut short at the deadline: the pass ends at its deadline; by another failure: it fails.
      answerReclaimCut('outbox', reclaim, deadline, logger);
    } catch (error) {
      failure ??= error;
      wakeAfterReclaim();
    } finally {
      reclaimSettled = true;
    }
  })();

  while (failure === undefined) {
    if (options.signal?.aborted) {
      stoppedBecause = 'stopped';
      break;
    }
    const leaseMs = leaseMsFor(outbox.claimTimeoutMs, deadline.invocationRemainingMs());
    if (leaseMs === 0 || deadline.remainingMs() < claimWindowMs()) {
      stoppedBecause = 'deadline';
      break;
    }
    if (!mayPipeline(memory, inFlight.length, MAX_BATCHES_IN_FLIGHT, pauseWaited)) {
      // Paused (`afterClaim`), not full: wait for a batch at most `maxPollIntervalMs`, then claim
      // anyway — a slow batch must not hold up the due rows of other keys, nor a row committed
      // meanwhile beyond the idle poll's promise (claimed within about `maxPollIntervalMs`).
      const paused = inFlight.length < MAX_BATCHES_IN_FLIGHT;
      const batches = inFlight.length;
      await waitAny(inFlightWork(), paused ? Math.min(deadline.remainingMs(), outbox.maxPollIntervalMs) : deadline.remainingMs(), stopWait.settled);
      if (paused && inFlight.length === batches) pauseWaited = true;
      continue;
    }
    // A batch that left less than a claim's time ago is held for: the next claim overlaps only a
    // batch that waits on its destination (`pipelineHoldMs`). Never longer than
    // `maxPollIntervalMs`: after claims slowed by a lock wait, a row committed meanwhile is still
    // claimed within about that long.
    const holdMs = pipelineHoldMs(
      inFlight.map((b) => b.startedAt),
      Math.min(memory.claimMs, outbox.maxPollIntervalMs),
      performance.now(),
    );
    if (holdMs > 0) {
      await waitAny(inFlightWork(), Math.min(holdMs, deadline.remainingMs()), stopWait.settled);
      continue;
    }
    pauseWaited = false;
    let rows;
    let limit: number;
    // A batch that settles while this claim runs may free key heads the claim's snapshot did not
    // see; only a claim that started with nothing in flight can prove the table drained.
    const inFlightAtClaim = inFlight.length;
    const afterReclaim = reclaimSettled;
    try {
      memory.slowestCallMs = Math.max(memory.slowestCallMs, ...slowest.values());
      const bounded = Math.min(
        claimLimitFor(memory.size, memory.rows > 0 ? memory : undefined),
        rowsPublishableBefore(deadline.remainingMs(), memory.slowestCallMs, outbox.concurrency, outbox.batchSize, inFlight.length, rowsPerCall),
      );
      limit = bounded === memory.size ? bounded : claimLimitRung(bounded, outbox.batchSize, maxBatchSize);
      const claimStarted = performance.now();
      rows = await unlessEndedAtDeadline(() => driver.outboxClaimMany({ limit, leaseMs, rowsPerKey: outbox.rowsPerKey }), deadline, (error) =>
        logger.warn('outbox claim cancelled at the pass deadline (a lock held across it?): it claimed nothing; the pass ends', { error: redactError(error) }),
      );
      // A claim cut off at the deadline says nothing of how long a claim takes.
      if (rows !== undefined) claimTimed(memory, performance.now() - claimStarted);
    } catch (error) {
      failure = error;
      break;
    }
    if (rows === undefined) {
      // Not sent because the deadline passed while it was on its way (a freeze past it), or
      // cancelled at the deadline that bounds it (a lock held across it): nothing was claimed
      // (its transaction rolled back), and the pass has reached its deadline, which is no failure.
      stoppedBecause = 'deadline';
      break;
    }
    let payloadChars = 0;
    let largestRowChars = 0;
    for (const row of rows) {
      payloadChars += row.payloadText.length;
      largestRowChars = Math.max(largestRowChars, row.payloadText.length);
    }
    // Counted once, and only when needed: a claim as long as its limit, or one that says it was exhausted.
    const heads = rows.length >= limit || rows.exhausted === true ? headsOf(rows) : 0;
    if (inFlightAtClaim === 0) lastClaimFull = rows.length >= limit && heads >= limit;
    afterClaim(memory, {
      pipelined: inFlightAtClaim > 0,
      limit,
      rows: rows.length,
      exhausted: rows.exhausted,
      heads: rows.exhausted === true ? heads : undefined,
      base: outbox.batchSize,
      max: maxBatchSize,
      largestRowChars,
    });
    if (rows.length === 0) {
      if (inFlight.length === 0 && options.mode === 'drain') {
        if (inFlightAtClaim > 0) continue;
        // A claim sent before the reclaim ended did not see the rows it returned to `pending`.
        if (!afterReclaim) {
          await reclaiming;
          if (tally.reclaimed > 0) continue;
          if (failure !== undefined) break;
        }
        stoppedBecause = 'drained';
        break;
      }
      const idleMs = Math.min(idlePollDelayMs(emptyClaims++, outbox), Math.max(0, deadline.remainingMs() - claimWindowMs()));
      const batches = inFlight.length;
      // A claim sent before the reclaim ended did not see the rows it returned to `pending`,
      // whether the reclaim ended during the claim or ends during the wait.
      await waitAny(afterReclaim ? inFlightWork() : [...inFlightWork(), reclaimWake], inFlight.length > 0 && options.mode === 'drain' ? deadline.remainingMs() : idleMs, stopWait.settled);
      // The idle wait ran out with the batches still publishing: it stands for the pause's wait.
      if (batches > 0 && inFlight.length === batches) pauseWaited = true;
      continue;
    }
    emptyClaims = 0;
    Object.assign(memory, { rows: rows.length, payloadChars, largestRowChars });
    tally.claimed += rows.length;
    tally.batches++;
    const entry = { work: Promise.resolve(), rows: rows.length, startedAt: performance.now() };
    entry.work = deliverBatch(ctx, rows, countNotSent)
      .catch((error: unknown) => {
        failure ??= error;
      })
      .finally(() => {
        const at = inFlight.indexOf(entry);
        if (at !== -1) inFlight.splice(at, 1);
      });
    inFlight.push(entry);
  }
  // The reclaim, one statement bounded by the deadline, ends before anything else is waited for.
  await reclaiming;
  if (failure !== undefined) stoppedBecause = 'error';
  // The check stops now; its invokes (each bounded by the deadline) are awaited after the
  // in-flight work, which must not wait behind an invoke that hangs.
  const scaleOutEnded = options.scaleOut?.passEnded();

  stopWait.dispose();
  const allDone = Promise.all(inFlightWork()).then(() => undefined);
  await waitAny([allDone], Math.min(outbox.shutdownTimeoutMs, deadline.remainingMs()));
  closed = true;
  // The batches still waiting for a call settle what has answered (their open calls' rows stay
  // processing): taken now, before an aborted call's batch returns and leaves the set.
  const unfinished = [...ctx.unfinished];
  calls.abortAll(new Error('outbox pass stopped waiting for in-flight work'));
  // Nothing the pass started may outlive it (a Lambda container is frozen as soon as the handler
  // returns): the renewal under way and every settle already sent are awaited to their end — each
  // one statement that ends on the server (its lock wait bounded by the lease, its run by
  // `statement_timeout`) — for as long as the invocation lasts (`answerWaitMs`). Their answers
  // decide what the pass reports, so the summary matches what the database did, also after a
  // freeze mid-pass that outlasted the deadline.
  // One wait for both, so the pass never waits past the invocation's end twice over.
  // The answered rows of unfinished batches settle after the keeper has stopped (a renewal and a
  // settle lock rows in different orders).
  const keeperClosed = ctx.keeper.close();
  const answered = keeperClosed.then(() => Promise.allSettled(unfinished.map((settle) => settle())));
  await waitAny([Promise.allSettled([keeperClosed, answered, ...ctx.settling])], answerWaitMs(deadline));
  // The pass's counts are written now, before the steps below wait on anything (the scale-out
  // check's statements and invokes, the backlog read): a handler cut off after this keeps them.
  try {
    metrics.flush();
  } catch (error) {
    failure ??= error;
  }
  await scaleOutEnded;
  // Every claimed row is settled (sent, retried, dead), lost, or neither: abandoned.
  const abandoned = tally.claimed - tally.sent - tally.retried - tally.dead - tally.claimsLost - tally.released;
  if (notSent.rows > 0) {
    logger.warn('outbox pass ran out of invocation time before marking rows: their finishing writes were not sent; they stay processing until the reclaim returns them after their lease, and the rows the destination accepted are delivered again', {
      outOfTime: notSent.rows,
      deliveredNotMarked: notSent.delivered,
    });
  }
  if (abandoned > 0) logger.warn('outbox pass stopped with rows in flight: they stay processing until the reclaim step recovers them', { abandoned });

  for (const [type, ms] of slowest) metrics.gauge('outboxPublishDuration', ms / 1000, { destination_type: type });
  if (backlogGaugeDue(driver, 'outbox')) {
    try {
      // A closing step: up to the deadline, or a short slice past it, never into the margin's end.
      const stats = await withStatementBudget(closingBudgetMs(deadline), () => driver.outboxStats({ pendingOnly: true, onceEveryMs: BACKLOG_GAUGE_INTERVAL_MS }));
      backlogGaugeRead(driver, 'outbox');
      if (stats.skipped !== true) {
        metrics.gauge('outboxPending', stats.counts.pending ?? 0);
        metrics.gauge('outboxOldestPendingAge', stats.oldestPendingAgeSeconds);
      }
    } catch (error) {
      logger.warn('outbox stats failed; pending gauges not emitted this pass', { error: redactError(error) });
    }
  }
  // A failure may have come after the loop (a metrics flush).
  if (failure !== undefined) stoppedBecause = 'error';
  const summary: OutboxPassSummary = { ...tally, reclaimRan, abandoned, outOfTime: notSent.rows, durationMs: Math.round(performance.now() - started), stoppedBecause };
  if (failure !== undefined) throw new OutboxPassError(summary, failure);
  return summary;
}

/** Rows of a claim that are the first of their key in it, or keyless (`learnCeiling`, and whether the claim was full). */
function headsOf(rows: readonly OutboxRow[]): number {
  const keys = new Set<string>();
  let keyless = 0;
  for (const row of rows) {
    if (row.key === null || row.key === '') keyless++;
    else keys.add(row.key);
  }
  return keyless + keys.size;
}
