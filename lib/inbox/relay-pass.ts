/**
 * One pass of the push relay, shaped for a scheduled Lambda: reclaim (throttled in the
 * database), then claim → forward until the deadline nears; a claim that finds nothing waits
 * `inbox.relay.pollIntervalMs` and claims again, so a webhook stored mid-invocation is relayed
 * within about that long, not at the next schedule. `mode: 'drain'` returns at the first empty
 * claim instead.
 *
 * Each claimed row is forwarded in one transaction (`driver.inboxForward`): the outbox row
 * (topic from the template, key = aggregate id, headers of spec §5) and the fenced mark
 * `processed`. A forward that lost its claim was rolled back: it is logged and counted in
 * `queuebox_claims_lost_total{component="inbox"}`, and the row is left to its new owner. A failing
 * forward is retried with backoff (fenced) until `inbox.relay.maxAttempts`, then `dead`. Leases are
 * sized to the invocation and renewed every third. Pull rows are never claimed.
 */
import type { QueueBoxConfig } from '../config/schema.ts';
import { backoffDelayMs, OUTBOX_BACKOFF_CAP_MS } from '../claims/backoff.ts';
import { LeaseKeeper } from '../claims/lease-keeper.ts';
import { leaseMsFor, MIN_LEASE_MS, reclaimThrottleMs } from '../claims/lease.ts';
import { redactError } from '../claims/redact.ts';
import type { ClaimRef, Driver, InboxRow, OutboxMessageInput } from '../db/driver.ts';
import { ValidationError } from '../errors.ts';
import type { Logger } from '../observability/logger.ts';
import type { QueueBoxMetrics } from '../observability/metrics.ts';
import { validateOutboxMessage } from '../outbox/validate-message.ts';
import type { Deadline } from '../runtime/deadline.ts';
import { sleep } from '../runtime/deadline.ts';
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
}

/** What one pass did; counts of rows. */
export interface RelaySummary {
  claimed: number;
  forwarded: number;
  retried: number;
  dead: number;
  claimsLost: number;
  reclaimed: number;
  durationMs: number;
}

/** Header names the relay sets on every outbox row; row headers with these names (any case) are replaced. */
const RELAY_HEADERS = ['x-inbox-id', 'x-source', 'x-idempotency-key', 'x-correlation-id'];

/** The outbox message of a row, or why it has none; `template` is already chosen for the source. */
export function relayMessage(row: InboxRow, template: string): { message: OutboxMessageInput } | { error: string } {
  const rendered = renderTopic(template, { source: row.source, eventType: row.eventType });
  if ('error' in rendered) return rendered;
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(row.headers ?? {})) {
    if (!RELAY_HEADERS.includes(name.toLowerCase())) headers[name] = value;
  }
  headers['x-inbox-id'] = row.id;
  headers['x-source'] = row.source;
  headers['x-idempotency-key'] = row.idempotencyKey;
  if (row.correlationId !== null && row.correlationId !== '') headers['X-Correlation-Id'] = row.correlationId;
  try {
    return { message: validateOutboxMessage({ topic: rendered.topic, key: row.aggregateId, payload: row.payload, headers }) };
  } catch (error) {
    if (error instanceof ValidationError) return { error: `cannot be forwarded to the outbox: ${error.message}` };
    throw error;
  }
}

/** Runs one relay pass and returns its summary; never runs past `deadline`. */
export async function runRelayPass(options: RelayPassOptions): Promise<RelaySummary> {
  const { config, driver, logger, metrics, deadline, signal } = options;
  const relay = config.inbox.relay;
  const started = Date.now();
  checkTopicTemplate(config.inbox.topicTemplate, 'inbox.topicTemplate');
  for (const [name, source] of Object.entries(config.inbox.sources)) {
    if (source.topicTemplate !== undefined) checkTopicTemplate(source.topicTemplate, `inbox.sources.${name}.topicTemplate`);
  }
  const summary: RelaySummary = { claimed: 0, forwarded: 0, retried: 0, dead: 0, claimsLost: 0, reclaimed: 0, durationMs: 0 };
  const lost = new Set<string>();
  const loseClaim = (id: string, during: string) => {
    if (lost.has(id)) return;
    lost.add(id);
    summary.claimsLost++;
    metrics.count('claimsLost', 1, { component: 'inbox' });
    logger.error('inbox relay lost its claim; the row is left to its new owner', { id, during });
  };
  const canStart = () => !signal?.aborted && deadline.remainingMs() >= MIN_LEASE_MS;

  const reclaim = await driver.inboxReclaimExpired({ throttleMs: reclaimThrottleMs(relay.claimTimeoutMs) });
  summary.reclaimed = reclaim.reclaimed;

  while (canStart()) {
    const leaseMs = leaseMsFor(relay.claimTimeoutMs, deadline.invocationRemainingMs());
    if (leaseMs === 0) break;
    const rows = await driver.inboxClaimPushMany({ limit: relay.batchSize, leaseMs });
    if (rows.length === 0) {
      if (options.mode === 'drain') break;
      await sleep(Math.min(relay.pollIntervalMs, Math.max(0, deadline.remainingMs() - MIN_LEASE_MS)), signal);
      continue;
    }
    summary.claimed += rows.length;
    const keeper = new LeaseKeeper({
      leaseMs,
      nextLeaseMs: () => leaseMsFor(relay.claimTimeoutMs, deadline.invocationRemainingMs()),
      renew: (claims, ms) => driver.inboxRenewMany({ claims, leaseMs: ms }),
      onLost: (claim) => loseClaim(claim.id, 'renewal'),
    });
    const queue = [...rows];
    const worker = async () => {
      // Rows already claimed are forwarded while the invocation lasts (a shutdown or a shortened
      // deadline stops new claims, not the work this pass holds); `waitBounded` bounds the wait.
      for (let row = queue.shift(); row !== undefined && deadline.remainingMs() > 0; row = queue.shift()) await relayRow(row, keeper);
    };
    const finished = await waitBounded(Promise.all(Array.from({ length: Math.min(relay.concurrency, rows.length) }, worker)));
    keeper.stop();
    if (!finished) break;
  }
  try {
    const stats = await driver.inboxStats({ pendingOnly: true });
    metrics.gauge('inboxOldestPendingAge', stats.oldestPendingAgeSeconds);
  } catch (error) {
    logger.warn('inbox stats failed', { error: error as Error });
  }
  summary.durationMs = Date.now() - started;
  return summary;

  async function relayRow(row: InboxRow, keeper: LeaseKeeper): Promise<void> {
    const claim: ClaimRef = { id: row.id, token: row.claimToken };
    const claimSignal = keeper.track(claim);
    try {
      const template = config.inbox.sources[row.source]?.topicTemplate ?? config.inbox.topicTemplate;
      const built = relayMessage(row, template);
      if ('error' in built) return await markDead(claim, built.error);
      if (claimSignal.aborted) return;
      if (await driver.inboxForward({ ...claim, outbox: built.message }, { maxAttempts: config.outbox.maxAttempts })) {
        summary.forwarded++;
        metrics.count('inboxMessages', 1, { status: 'forwarded' });
      } else {
        loseClaim(row.id, 'forward');
      }
    } catch (error) {
      if (claimSignal.aborted) return;
      await settleFailure(row, claim, error);
    } finally {
      keeper.release(row.id);
    }
  }

  async function settleFailure(row: InboxRow, claim: ClaimRef, error: unknown): Promise<void> {
    const reason = redactError(error);
    if (row.attempt + 1 >= relay.maxAttempts) return markDead(claim, `forward failed ${row.attempt + 1} times; last error: ${reason}`);
    const delayMs = backoffDelayMs(row.attempt, { baseMs: relay.retryBaseDelayMs, capMs: OUTBOX_BACKOFF_CAP_MS, jitter: 0.25 }, options.random);
    try {
      const changed = await driver.inboxRetryMany({ items: [{ ...claim, delayMs, error: reason }] });
      if (changed.length === 0) return loseClaim(row.id, 'retry');
      summary.retried++;
      logger.warn('inbox forward failed; retrying', { id: row.id, attempt: row.attempt, delayMs, error: reason });
    } catch (retryError) {
      logger.error('inbox retry write failed; the row is reclaimed after its lease', { id: row.id, error: retryError as Error });
    }
  }

  async function markDead(claim: ClaimRef, reason: string): Promise<void> {
    const error = redactError(reason);
    try {
      const changed = await driver.inboxMarkDeadMany({ items: [{ ...claim, error }] });
      if (changed.length === 0) return loseClaim(claim.id, 'dead');
      summary.dead++;
      logger.error('inbox row is dead', { id: claim.id, error });
    } catch (deadError) {
      logger.error('inbox dead write failed; the row is reclaimed after its lease', { id: claim.id, error: deadError as Error });
    }
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
