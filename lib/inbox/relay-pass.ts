/**
 * One pass of the push relay, shaped for a scheduled Lambda: reclaim (throttled in the
 * database), then claim → forward until the deadline nears; a claim that finds nothing waits
 * and claims again — `inbox.relay.pollIntervalMs` after the first empty claim, doubling with each
 * further one up to `inbox.relay.maxPollIntervalMs` (`idlePollDelayMs`), back to the first once a
 * claim finds rows — so an idle pass sends about one claim a second and a webhook stored
 * mid-invocation is relayed within about `maxPollIntervalMs`, not at the next schedule.
 * `mode: 'drain'` returns at the first empty claim instead.
 *
 * A claim asks for `inbox.relay.batchSize` rows, fewer when they are large: it holds about 32 MiB
 * of payload text (`relay-claim-size.ts`), and the payloads stay text — checked on the text,
 * forwarded as the text, parsed only when the text cannot tell (`relayMessage`) — so a pass's
 * memory follows the size of the bodies as stored, not of their parse (many times larger).
 *
 * A claimed batch is forwarded at once (`driver.inboxForwardMany`, one statement; PostgreSQL):
 * for every row whose claim holds, the outbox row (topic from the template, key from source and
 * aggregate id as `inbox.relay.outboxKey` says, `outbox-key.ts`; headers of spec §5) and the
 * fenced mark `processed`. A row whose claim was lost gets neither: it
 * is logged and counted in `queuebox_claims_lost_total{component="inbox"}`, and left to its new
 * owner. A row that cannot become an outbox message is `dead` at once, with the reason. When the
 * batched forward fails, the batch is forwarded row by row (`driver.inboxForward`,
 * `inbox.relay.concurrency` at a time, as always on SQL Server), so one row the outbox refuses
 * cannot hold the others; a
 * failing row forward is retried with backoff (fenced) until `inbox.relay.maxAttempts`, then
 * `dead`. Leases are sized to the invocation and renewed every third. Pull rows are never claimed.
 * Each write that retries or dead-letters rows logs one `inbox forward failed` line per source and
 * error class and counts the rows in `queuebox_inbox_failed_messages_total{source,status}`
 * (`relay-failure-report.ts`).
 *
 * Statements: the reclaim, the claims, the scale-out check's and the backlog read are bounded by
 * the deadline (`lambda.deadlineMarginMs` before the invocation's end; the leases the claims grant
 * still run to the invocation's end); only the finishing writes (forward, retry, dead, release)
 * and the renewals may use the margin, up to the invocation's end (`finishing`). The counts of a
 * write that made rows dead are written at once; every count of the pass is written before the
 * pass's closing steps (the scale-out check's end, the backlog read: `closingBudgetMs`), which may
 * wait on the database. A claim or the reclaim that ends at the deadline — not sent once it has
 * passed, or cancelled there by the database (a lock held across it: PostgreSQL 57014, `mssql`
 * ETIMEOUT) — took nothing (its transaction rolled back; a reclaim on PostgreSQL keeps, and
 * counts, the chunks it committed before: `reclaimExpired`): the pass ends as at any deadline, its
 * summary returned and its counts written, not with an error (`unlessEndedAtDeadline`; the reclaim
 * through `reclaimWithinDeadline`, which also sends it again as a deadlock victim); any other error
 * of a claim or the reclaim fails the pass. A finishing write not sent because the invocation has
 * no time left (`InvocationEndedError`: a pass frozen or held past its end) did not run: its rows
 * stay `processing` for the reclaim, counted in `outOfTime`, with one warning; no other write is
 * tried for them (no row-by-row forward, no retry).
 */
import type { QueueBoxConfig } from '../config/schema.ts';
import { backoffDelayMs, idlePollDelayMs, OUTBOX_BACKOFF_CAP_MS } from '../claims/backoff.ts';
import { claimKey } from '../claims/claim-key.ts';
import { otherRelayOutboxKey, relayOutboxKey, type RelayOutboxKeyMode } from './outbox-key.ts';
import { LeaseKeeper } from '../claims/lease-keeper.ts';
import { leaseMsFor, MIN_LEASE_MS, reclaimThrottleMs, renewalLeaseMsFor } from '../claims/lease.ts';
import { redactedError, redactError } from '../claims/redact.ts';
import type { ColumnDialect } from '../db/column-length.ts';
import { withLazyPayload } from '../db/lazy-payload.ts';
import { unstorableJsonText, unstorableText } from '../db/storable-text.ts';
import type { ClaimRef, Driver, InboxForwardItem, InboxRow, OutboxMessageInput } from '../db/driver.ts';
import { answerReclaimCut, InvocationEndedError, reclaimWithinDeadline, unlessEndedAtDeadline, withStatementBudget } from '../db/statement-budget.ts';
import { FencedLockTimeoutError, ValidationError } from '../errors.ts';
import { BACKLOG_GAUGE_INTERVAL_MS, backlogGaugeDue, backlogGaugeRead } from '../observability/backlog-gauge-gate.ts';
import { errorClassOf } from '../observability/failure-log.ts';
import type { Logger } from '../observability/logger.ts';
import { flushSoonOf, type QueueBoxMetrics } from '../observability/metrics.ts';
import { validateOutboxMessage } from '../outbox/validate-message.ts';
import type { Deadline } from '../runtime/deadline.ts';
import { answerWaitMs, closingBudgetMs, sleep } from '../runtime/deadline.ts';
import type { ScaleOutHook } from '../runtime/scale-out.ts';
import { reportRelayFailures, type RelayFailure } from './relay-failure-report.ts';
import { relayClaimed, relayClaimLimit } from './relay-claim-size.ts';
import { checkTopicTemplate, renderTopic } from './topic-template.ts';

export interface RelayPassOptions {
  config: QueueBoxConfig;
  driver: Driver;
  logger: Logger;
  metrics: QueueBoxMetrics;
  deadline: Deadline;
  /** Aborts the pass (shutdown): no new claims; in-flight rows get up to `shutdownTimeoutMs`. */
  signal?: AbortSignal;
  /** Randomness of the retry jitter (tests). */
  random?: () => number;
  /** `deadline` (scheduled pass, default): claim until the deadline. `drain`: return once a claim finds nothing. */
  mode?: 'deadline' | 'drain';
  /** Scale-out by backlog (`lib/runtime/scale-out.ts`): told when the pass starts and when it stops claiming. */
  scaleOut?: ScaleOutHook;
}

/** What one pass did; counts of rows. */
export interface RelaySummary {
  claimed: number;
  forwarded: number;
  retried: number;
  dead: number;
  claimsLost: number;
  /**
   * Claimed rows never forwarded, put back to `pending` with no attempt spent: those the pass
   * reached only after its deadline, or had not started when it stopped waiting for a batch.
   */
  released: number;
  reclaimed: number;
  /** Claimed rows whose write did not land before the pass returned; they stay `processing` until reclaimed. */
  abandoned: number;
  /**
   * Rows of `abandoned` whose finishing write (forward, retry, dead, release) was not sent because
   * the invocation had no time left (a pass frozen or held past its end): it did not run, so nothing
   * of it is half-done. Set by every pass; absent only when none ran.
   */
  outOfTime?: number;
  durationMs: number;
}

/** Header names the relay sets on every outbox row; row headers with these names (any case) are replaced. */
const RELAY_HEADERS = ['x-inbox-id', 'x-source', 'x-idempotency-key', 'x-correlation-id'];

/**
 * The outbox message of a row, or why it has none (class `TopicTemplate`: the topic does not
 * render; `ValidationError`: the outbox refuses the message); `template` is already chosen for the
 * source; lengths count as `dialect`'s columns do.
 */
export function relayMessage(
  row: InboxRow,
  template: string,
  keyMode: RelayOutboxKeyMode = 'source-and-aggregate',
  dialect: ColumnDialect = 'postgres',
): { message: OutboxMessageInput } | { error: string; errorClass: string } {
  const rendered = renderTopic(template, { source: row.source, eventType: row.eventType });
  if ('error' in rendered) return { error: rendered.error, errorClass: 'TopicTemplate' };
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(row.headers ?? {})) {
    if (!RELAY_HEADERS.includes(name.toLowerCase())) headers[name] = value;
  }
  headers['x-inbox-id'] = row.id;
  headers['x-source'] = row.source;
  headers['x-idempotency-key'] = row.idempotencyKey;
  if (row.correlationId !== null && row.correlationId !== '') headers['X-Correlation-Id'] = row.correlationId;
  try {
    // The stored text is what the outbox row gets, so no digit is lost, and the sender's trace
    // context goes with it. The payload is checked on its text when the text shows it passes (a
    // JSON object, nothing unstorable): parsed, a body can take many times its text's memory. Any
    // other payload is parsed here, for this check alone, so its error is the one the object gets.
    const payload = payloadTextPasses(row.payloadText) ? {} : (JSON.parse(row.payloadText) as unknown);
    const message = validateOutboxMessage({ topic: rendered.topic, key: relayOutboxKey(row.source, row.aggregateId, keyMode), payload, headers }, dialect);
    // `payload` is the parse of the text, on first read (`withLazyPayload`); the forward reads only the text.
    return { message: withLazyPayload({ topic: message.topic, key: message.key, payloadText: row.payloadText, headers: message.headers, trace: row.trace ?? null }) };
  } catch (error) {
    if (error instanceof ValidationError) return { error: `cannot be forwarded to the outbox: ${error.message}`, errorClass: error.name };
    throw error;
  }
}

/** The start of a JSON object's text: JSON whitespace, then `{`. */
const JSON_OBJECT_START = /^[ \t\n\r]*\{/;

/**
 * Whether `validateOutboxMessage` passes the payload of the stored JSON text `text`, told without
 * parsing it: a JSON object (its first character past whitespace is `{`) with no NUL and no lone
 * surrogate, raw or as an escape (`unstorableText`, `unstorableJsonText`). It may say false of a
 * payload that passes (an escaped surrogate pair counts as unstorable here), never true of one
 * that fails: a NUL or a lone surrogate in the parsed value is a `\u` escape in the text, or a
 * raw surrogate. A payload it says false of is checked on its parse.
 */
export function payloadTextPasses(text: string): boolean {
  return JSON_OBJECT_START.test(text) && unstorableText(text) === undefined && unstorableJsonText(text) === undefined;
}

const claimOf = (row: InboxRow): ClaimRef => ({ id: row.id, token: row.claimToken });

/**
 * What the driver forwards for `row`: its claim, its outbox message, and the key of its aggregate
 * under the other `inbox.relay.outboxKey` form, which the row takes instead while an open outbox
 * row relayed from its source still has it — so a change of the setting (the upgrade to scoped
 * keys included) never lets a row of an aggregate overtake an earlier one under the old key.
 */
export function forwardItemOf(row: InboxRow, message: OutboxMessageInput, keyMode: RelayOutboxKeyMode): InboxForwardItem {
  const other = otherRelayOutboxKey(row.source, row.aggregateId, keyMode);
  return { ...claimOf(row), outbox: message, ...(other === null || other === message.key ? {} : { keyWhileOpen: { key: other, source: row.source } }) };
}
const ignoreLoss = () => {};

/** A row to mark `dead`: its claim, why, and what the failure line says of it. */
interface DeadWrite {
  claim: ClaimRef;
  reason: string;
  row: InboxRow;
  errorClass: string;
  topic?: string;
}

/** A claimed row and the outbox message it becomes. */
interface ForwardItem {
  row: InboxRow;
  message: OutboxMessageInput;
}

/**
 * Payload and headers (as JSON text) one batched forward statement carries at most; a larger
 * batch is forwarded in several statements. A claimed batch of 100 webhooks of a few kB is one
 * statement; 100 bodies of 1 MiB would otherwise be one 100 MB statement, built in memory twice
 * over (JSON, then the array literal) in a Lambda sized for far less.
 */
export const FORWARD_STATEMENT_BYTES = 4 * 1024 * 1024;

/**
 * Splits `items` in order into runs of at most `budget` bytes of JSON (at least one item each);
 * a payload is measured by the byte length of its text (`payloadText` when the message has it).
 */
export function byJsonSize<T extends { message: OutboxMessageInput }>(items: readonly T[], budget: number): T[][] {
  const chunks: T[][] = [];
  let chunk: T[] = [];
  let size = 0;
  for (const item of items) {
    const payloadText = item.message.payloadText ?? JSON.stringify(item.message.payload);
    const itemSize = Buffer.byteLength(payloadText) + Buffer.byteLength(JSON.stringify(item.message.headers ?? {}));
    if (chunk.length > 0 && size + itemSize > budget) {
      chunks.push(chunk);
      chunk = [];
      size = 0;
    }
    chunk.push(item);
    size += itemSize;
  }
  if (chunk.length > 0) chunks.push(chunk);
  return chunks;
}

/**
 * Runs one relay pass and returns its summary; never runs past `deadline`. Every statement of the
 * pass is bounded by its deadline (`withStatementBudget`), and every lease by the invocation's
 * end; the finishing writes and renewals by the invocation's end (the margin is theirs).
 */
export function runRelayPass(options: RelayPassOptions): Promise<RelaySummary> {
  const { deadline } = options;
  return withStatementBudget(() => deadline.remainingMs(), () => relayPass(options), () => deadline.invocationRemainingMs());
}

async function relayPass(options: RelayPassOptions): Promise<RelaySummary> {
  const { config, driver, logger, metrics, deadline, signal } = options;
  const relay = config.inbox.relay;
  const started = Date.now();
  checkTopicTemplate(config.inbox.topicTemplate, 'inbox.topicTemplate');
  for (const [name, source] of Object.entries(config.inbox.sources)) {
    if (source.topicTemplate !== undefined) checkTopicTemplate(source.topicTemplate, `inbox.sources.${name}.topicTemplate`);
  }
  const summary: RelaySummary = { claimed: 0, forwarded: 0, retried: 0, dead: 0, claimsLost: 0, released: 0, reclaimed: 0, abandoned: 0, outOfTime: 0, durationMs: 0 };
  // Rows whose finishing write was not sent: the invocation had no time left (`InvocationEndedError`).
  let outOfTime = 0;
  // Claims (`claimKey`: id and token) lost in this pass; a later claim of the same row is another claim.
  const lost = new Set<string>();
  /** Writes the counts so far right after the step that counted them (once per burst), not only at the end of the pass. */
  // Not the pass's own step: a sink that throws here is logged, not the pass's failure.
  const flushSoon = flushSoonOf(metrics, (error) => logger.error('metrics not written', { error: redactError(error) }));
  /** A renewal: it may use the margin, up to the invocation's end. */
  const toInvocationEnd = <T>(write: () => Promise<T>): Promise<T> => withStatementBudget(() => deadline.invocationRemainingMs(), write);
  /**
   * A finishing write (forward, retry, dead, release) of `rows` rows: it may use the margin, up to
   * the invocation's end. Refused for lack of time (`InvocationEndedError`: not sent, or its
   * transaction rolled back), it did nothing and no other write of those rows can be sent either:
   * they count in `outOfTime`, and the write gives `undefined`.
   */
  const finishing = async <T>(rows: number, write: () => Promise<T>): Promise<T | undefined> => {
    try {
      return await toInvocationEnd(write);
    } catch (error) {
      if (!(error instanceof InvocationEndedError)) throw error;
      outOfTime += rows;
      return undefined;
    }
  };
  const loseClaim = (claim: ClaimRef, during: string) => {
    const key = claimKey(claim);
    if (lost.has(key)) return;
    lost.add(key);
    summary.claimsLost++;
    metrics.count('claimsLost', 1, { component: 'inbox' });
    logger.error('inbox relay lost its claim; the row is left to its new owner', { id: claim.id, during });
    flushSoon();
  };
  const isLost = (claim: ClaimRef) => lost.size > 0 && lost.has(claimKey(claim));
  // Claims (`claimKey`) a finishing write was sent for; the rest of a batch the pass stopped
  // waiting for were never forwarded, and are released rather than charged an attempt.
  const written = new Set<string>();
  const markWritten = (claims: ClaimRef[]) => {
    for (const claim of claims) written.add(claimKey(claim));
  };
  let released = 0;
  // Set when the pass stops waiting for a batch: no further write starts.
  let closed = false;
  let keeper: LeaseKeeper | undefined;
  /** Ends the renewal of `claims` before their finishing write, and waits for a renewal already under way (one lock order). */
  const releaseForWrite = async (claims: ClaimRef[]) => {
    for (const claim of claims) keeper?.release(claim);
    await keeper?.idle();
  };
  const canStart = () => !signal?.aborted && deadline.remainingMs() >= MIN_LEASE_MS;
  // The relay's own forward attempts, and `max_attempts` of the outbox rows it writes.
  const relayMaxAttempts = relay.maxAttempts ?? config.outbox.maxAttempts;
  // The failure report's `source` dimension takes only the names `inbox.sources` configures.
  const report = { logger, metrics, sources: config.inbox.sources };

  // Whether the latest claim took as many rows as it asked for (scale-out starts passes only then).
  let lastClaimFull = true;
  options.scaleOut?.passStarted(
    () => summary.forwarded + summary.retried + summary.dead,
    () => lastClaimFull,
  );
  // Bounded by the pass's deadline, retried as a deadlock victim, and ended quietly at the
  // deadline (`reclaimWithinDeadline`): a reclaim that ended there did not run, and the pass, at
  // its deadline, returns its summary (no claim starts), not an error. A reclaim cut short after
  // some of its chunks committed (`cutBy`) answers with their counts, counted below whatever cut it.
  const reclaim =
    (await reclaimWithinDeadline(() => driver.inboxReclaimExpired({ throttleMs: reclaimThrottleMs(relay.claimTimeoutMs), maxAttempts: relayMaxAttempts }), deadline, (error) =>
      logger.warn('inbox reclaim cancelled at the pass deadline: it returned no row; expired rows wait for a later reclaim', { error: redactError(error) }),
    )) ?? { ran: false, reclaimed: 0, dead: 0 };
  summary.reclaimed = reclaim.reclaimed;
  // A lease that expired during a row's last forward made it dead (the reclaim counted the attempt).
  // The reclaim statement (shared with the outbox, in both dialects) returns counts, not the rows'
  // sources, so these rows are not in `queuebox_inbox_failed_messages_total{source,status}`:
  // they are counted in `queuebox_inbox_messages_total{status="dead"}` only.
  metrics.count('inboxMessages', reclaim.dead, { status: 'dead' });
  if (reclaim.dead > 0) logger.error('inbox rows dead: the lease of their last attempt expired during the forward', { count: reclaim.dead });
  if (reclaim.reclaimed > 0 || reclaim.dead > 0) metrics.flush();
  // Cut short at the deadline: no claim starts, and the pass returns its summary; by another
  // failure: the pass fails.
  answerReclaimCut('inbox', reclaim, deadline, logger);

  // Claims in a row that found nothing: the idle wait grows with them.
  let emptyClaims = 0;
  while (canStart()) {
    const leaseMs = leaseMsFor(relay.claimTimeoutMs, deadline.invocationRemainingMs());
    if (leaseMs === 0) break;
    // Fewer rows than `batchSize` when they are large: a claim holds about 32 MiB of payload text.
    const limit = relayClaimLimit(driver, relay.batchSize, config.inbox.maxBodyBytes);
    // A claim not sent because the deadline passed (a freeze past it), or cancelled at the deadline
    // that bounds it (a lock held across it), claimed nothing (its transaction rolled back): the
    // pass has reached its deadline and ends with its summary, not an error.
    const rows = await unlessEndedAtDeadline(() => driver.inboxClaimPushMany({ limit, leaseMs }), deadline, (error) =>
      logger.warn('inbox claim cancelled at the pass deadline (a lock held across it?): it claimed nothing; the pass ends', { error: redactError(error) }),
    );
    if (rows === undefined) break;
    relayClaimed(driver, rows);
    lastClaimFull = rows.length >= limit;
    if (rows.length === 0) {
      if (options.mode === 'drain') break;
      await sleep(Math.min(idlePollDelayMs(emptyClaims++, relay), Math.max(0, deadline.remainingMs() - MIN_LEASE_MS)), signal);
      continue;
    }
    emptyClaims = 0;
    summary.claimed += rows.length;
    keeper = new LeaseKeeper({
      leaseMs,
      nextLeaseMs: () => renewalLeaseMsFor(relay.claimTimeoutMs, deadline.invocationRemainingMs()),
      renew: (claims, ms) => toInvocationEnd(() => driver.inboxRenewMany({ claims, leaseMs: ms })),
      onLost: (claim) => loseClaim(claim, 'renewal'),
    });
    // Rows already claimed are forwarded while the invocation lasts (a shutdown or a shortened
    // deadline stops new claims, not the work this pass holds); `waitBounded` bounds the wait.
    // Each claim is watched until its own finishing write is sent (`releaseForWrite`), so a
    // renewal carries only rows still held; a lost claim is reported through `onLost` above.
    for (const row of rows) keeper.watch(claimOf(row), ignoreLoss);
    const work = relayBatch(rows);
    const finished = await waitBounded(work);
    if (!finished) closed = true;
    // The rows no write was sent for, final now: no write starts once `closed` is set, and a batch
    // that finished skipped only rows it reached after the pass's deadline. Never forwarded, they
    // are released (back to `pending`, no attempt spent) rather than left to the reclaim, which
    // would charge each an attempt (at `maxAttempts: 1`, dead without a forward).
    const unwritten = rows.map(claimOf).filter((c) => !written.has(claimKey(c)) && !isLost(c));
    // Nothing the pass started may outlive it (a Lambda container is frozen as soon as the
    // handler returns): the renewal under way is awaited, and so are the writes already sent
    // (`closed` starts no other; each is one statement that ends on the server), with no time
    // bound but the invocation's end (`answerWaitMs`), so the summary counts what they did even
    // after a freeze past the deadline.
    // One wait for all, so the pass never waits past the invocation's end twice over.
    // The release after the keeper stopped (a renewal and a release lock rows in different orders).
    const closing = keeper.close();
    const release = closing.then(async () => {
      if (unwritten.length === 0 || driver.inboxReleaseMany === undefined) return;
      const releaseMany = driver.inboxReleaseMany.bind(driver);
      try {
        released += (await finishing(unwritten.length, () => releaseMany({ claims: unwritten })))?.length ?? 0;
      } catch (error) {
        logger.warn('inbox release of rows never forwarded failed; they are reclaimed after their lease', { rows: unwritten.length, error: redactError(error) });
      }
    });
    await waitAnswers(Promise.allSettled([closing, release, work]));
    if (!finished) break;
  }
  // The pass's counts are written now, before the steps below wait on anything (the scale-out
  // check's statements and invokes, the backlog read): a handler cut off after this keeps them.
  metrics.flush();
  await options.scaleOut?.passEnded();
  summary.released = released;
  summary.abandoned = summary.claimed - summary.forwarded - summary.retried - summary.dead - summary.claimsLost - released;
  summary.outOfTime = outOfTime;
  if (outOfTime > 0) logger.warn('inbox relay pass ran out of invocation time before writing rows: their finishing writes were not sent; they stay processing until the reclaim returns them after their lease', { outOfTime });
  // At most once per BACKLOG_GAUGE_INTERVAL_MS per driver, and in all (the database gate): the
  // read counts the pending rows. A closing step: up to the deadline, or a short slice past it.
  if (backlogGaugeDue(driver, 'inbox')) {
    try {
      const stats = await withStatementBudget(closingBudgetMs(deadline), () => driver.inboxStats({ pendingOnly: true, onceEveryMs: BACKLOG_GAUGE_INTERVAL_MS }));
      backlogGaugeRead(driver, 'inbox');
      if (stats.skipped !== true) metrics.gauge('inboxOldestPendingAge', stats.oldestPendingAgeSeconds);
    } catch (error) {
      logger.warn('inbox stats failed; oldest-pending gauge not emitted this pass', { error: redactError(error) });
    }
  }
  summary.durationMs = Date.now() - started;
  return summary;

  /** Forwards one claimed batch: dead rows in one write, the rest in one batched forward. */
  async function relayBatch(rows: InboxRow[]): Promise<void> {
    const dead: DeadWrite[] = [];
    const forward: ForwardItem[] = [];
    for (const row of rows) {
      const template = config.inbox.sources[row.source]?.topicTemplate ?? config.inbox.topicTemplate;
      const built = relayMessage(row, template, relay.outboxKey, driver.dialect);
      if ('error' in built) dead.push({ claim: claimOf(row), reason: built.error, row, errorClass: built.errorClass });
      else forward.push({ row, message: built.message });
    }
    if (dead.length > 0) await markDead(dead);
    const live = forward.filter((f) => !isLost(claimOf(f.row)));
    if (live.length === 0) return;
    const forwardMany = driver.inboxForwardMany?.bind(driver);
    if (forwardMany === undefined) return forwardOneByOne(live);
    // In receive order, one statement per FORWARD_STATEMENT_BYTES of payload and headers.
    for (const chunk of byJsonSize(live, FORWARD_STATEMENT_BYTES)) {
      if (deadline.remainingMs() <= 0 || closed) return;
      await forwardBatched(forwardMany, chunk);
    }
  }

  async function forwardBatched(forwardMany: NonNullable<Driver['inboxForwardMany']>, items: ForwardItem[]): Promise<void> {
    await releaseForWrite(items.map((f) => claimOf(f.row)));
    items = items.filter((f) => !isLost(claimOf(f.row)));
    if (items.length === 0 || closed) return;
    markWritten(items.map((f) => claimOf(f.row)));
    let forwarded: readonly string[] | undefined;
    try {
      forwarded = await finishing(items.length, () =>
        forwardMany(
          items.map((f) => forwardItemOf(f.row, f.message, relay.outboxKey)),
          { maxAttempts: relayMaxAttempts },
        ),
      );
    } catch (error) {
      // A row stayed locked by another transaction until its lease ended: nothing changed, and
      // every claim of the statement is lost.
      if (error instanceof FencedLockTimeoutError) {
        for (const f of items) loseClaim(claimOf(f.row), 'forward');
        return;
      }
      // The statement changed nothing: forward row by row, so one row the outbox refuses cannot
      // hold the others.
      logger.warn('inbox batched forward failed; forwarding its rows one by one', { rows: items.length, error: redactError(error) });
      await forwardOneByOne(items);
      return;
    }
    if (forwarded === undefined) return;
    countForwarded(forwarded.length);
    const changed = new Set(forwarded);
    for (const f of items) if (!changed.has(f.row.id)) loseClaim(claimOf(f.row), 'forward');
  }

  function countForwarded(n: number): void {
    summary.forwarded += n;
    metrics.count('inboxMessages', n, { status: 'forwarded' });
  }

  /** The fallback: each row in its own transaction, `relay.concurrency` at a time. */
  async function forwardOneByOne(items: ForwardItem[]): Promise<void> {
    const queue = [...items];
    const worker = async () => {
      for (let item = queue.shift(); item !== undefined && deadline.remainingMs() > 0 && !closed; item = queue.shift()) await forwardOne(item.row, item.message);
    };
    await Promise.all(Array.from({ length: Math.min(relay.concurrency, items.length) }, worker));
  }

  async function forwardOne(row: InboxRow, message: OutboxMessageInput): Promise<void> {
    const claim = claimOf(row);
    await releaseForWrite([claim]);
    if (isLost(claim) || closed) return;
    markWritten([claim]);
    try {
      const forwarded = await finishing(1, () => driver.inboxForward(forwardItemOf(row, message, relay.outboxKey), { maxAttempts: relayMaxAttempts }));
      if (forwarded === true) countForwarded(1);
      else if (forwarded === false) loseClaim(claim, 'forward');
    } catch (error) {
      if (closed) return;
      await settleFailure(row, message, claim, error);
    }
  }

  async function settleFailure(row: InboxRow, message: OutboxMessageInput, claim: ClaimRef, error: unknown): Promise<void> {
    const reason = redactError(error);
    const errorClass = errorClassOf(error);
    if (row.attempt + 1 >= relayMaxAttempts) return markDead([{ claim, reason: `gave up after ${row.attempt + 1} of ${relayMaxAttempts} attempts: ${reason}`, row, errorClass, topic: message.topic }]);
    const delayMs = backoffDelayMs(row.attempt, { baseMs: relay.retryBaseDelayMs, capMs: OUTBOX_BACKOFF_CAP_MS, jitter: 0.25 }, options.random);
    try {
      const changed = await finishing(1, () => driver.inboxRetryMany({ items: [{ ...claim, delayMs, error: reason }] }));
      if (changed === undefined) return;
      if (changed.length === 0) return loseClaim(claim, 'retry');
      summary.retried++;
      metrics.count('inboxMessages', 1, { status: 'retried' });
      reportRelayFailures(report, 'retried', [{ row, topic: message.topic, errorClass, error: reason }]);
    } catch (retryError) {
      if (retryError instanceof FencedLockTimeoutError) return loseClaim(claim, 'retry');
      logger.error('inbox retry write failed; the row is reclaimed after its lease', { id: row.id, error: redactedError(retryError) });
    }
  }

  /** Marks rows `dead` in one fenced write, each with its (redacted) reason; one failure line per source and error class. */
  async function markDead(items: DeadWrite[]): Promise<void> {
    await releaseForWrite(items.map((i) => i.claim));
    const live = items.filter((i) => !isLost(i.claim)).map((i) => ({ item: i, error: redactError(i.reason) }));
    const writes = live.map(({ item, error }) => ({ ...item.claim, error }));
    if (writes.length === 0 || closed) return;
    markWritten(writes);
    let changed: Set<string>;
    try {
      const dead = await finishing(writes.length, () => driver.inboxMarkDeadMany({ items: writes }));
      if (dead === undefined) return;
      changed = new Set(dead);
    } catch (deadError) {
      if (deadError instanceof FencedLockTimeoutError) return writes.forEach((w) => loseClaim(w, 'dead'));
      logger.error('inbox dead write failed; the rows are reclaimed after their lease', { ids: writes.map((w) => w.id), error: redactedError(deadError) });
      return;
    }
    const failures: RelayFailure[] = [];
    for (const { item, error } of live) {
      if (!changed.has(item.claim.id)) {
        loseClaim(item.claim, 'dead');
        continue;
      }
      failures.push({ row: item.row, errorClass: item.errorClass, error, ...(item.topic !== undefined ? { topic: item.topic } : {}) });
    }
    summary.dead += failures.length;
    metrics.count('inboxMessages', failures.length, { status: 'dead' });
    reportRelayFailures(report, 'dead', failures);
    // The dead-message alarms watch these: written now, not only at the end of the pass.
    if (failures.length > 0) flushSoon();
  }

  /** Waits for statements already sent to end, while the invocation lasts (`answerWaitMs`). */
  async function waitAnswers(pending: Promise<unknown>): Promise<void> {
    const timer = new AbortController();
    await Promise.race([pending.catch(() => {}), sleep(answerWaitMs(deadline), timer.signal)]);
    timer.abort();
  }

  /** Waits for `work` up to the deadline, or up to `shutdownTimeoutMs` after a shutdown; true when it finished. */
  async function waitBounded(work: Promise<unknown>): Promise<boolean> {
    const stop = new AbortController();
    let done = false;
    const tracked = work.then(() => {
      done = true;
    });
    const onAbort = () => void sleep(Math.min(relay.shutdownTimeoutMs, deadline.remainingMs()), stop.signal).then(() => stop.abort());
    if (signal?.aborted) onAbort();
    else signal?.addEventListener('abort', onAbort, { once: true });
    try {
      await Promise.race([tracked, sleep(deadline.remainingMs(), stop.signal)]);
    } finally {
      signal?.removeEventListener('abort', onAbort);
      stop.abort();
    }
    if (!done) logger.warn('inbox relay pass ended with rows in flight; their leases expire with the invocation');
    return done;
  }
}
