/**
 * A scheduled handler returns before its invocation ends, with the counts the alarms watch
 * already written, whatever blocks it at the end of its pass (docs/claims-and-leases.md,
 * "Statements end with the invocation"). Each case runs a real handler with a Lambda context that
 * counts down (5 s, `lambda.deadlineMarginMs` 2 s: the deadline 3 s in) while another session
 * holds a lock on the table a statement of the pass needs: the maintenance table under the
 * heartbeat's stamp, the inbox table under the relay's backlog read or its claims, the outbox table
 * under the poller's backlog read or its claims, the inbox table under a pull worker's claims. A
 * claim cancelled at the deadline took nothing: the pass ends there with its summary, not an error.
 *
 * Only the finishing writes and renewals may use the margin; the claims, the backlog reads, the
 * heartbeat's stamp and the scale-out statements are bounded by the deadline (the steps after the
 * pass by a short slice past it), and the pass's counts are written before those steps. Before,
 * the stamp and the backlog reads waited to the invocation's end (Lambda: "Task timed out"), and
 * the dead, reclaimed and forwarded counts, written after them, were lost with the invocation.
 *
 * Every EMF line is recorded with the invocation's time left when it was written: a line written
 * with none left is one CloudWatch never gets.
 */
import assert from 'node:assert/strict';
import { after, afterEach, before, beforeEach, describe, it } from 'node:test';
import pg from 'pg';
import { createInboxRelay } from '../../functions/inbox-relay.ts';
import { createOutboxPoller } from '../../functions/outbox-poller.ts';
import { handler as reclaimHandler } from '../../functions/reclaim.ts';
import type { Driver } from '../../lib/db/driver.ts';
import { createPullWorker } from '../../lib/index.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { METRICS } from '../../lib/observability/metric-names.ts';
import { setContainer } from '../../lib/runtime/container.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { emfValue } from '../helpers/emf.ts';
import { fakeLambdaContext } from '../helpers/lambda-context.ts';
import { insertOutboxRows } from '../helpers/outbox-pass-fixture.ts';
import { RecordingDestination } from '../helpers/recording-destination.ts';
import { insertPullRows, memoryLogger } from '../pull/pull-fixtures.ts';

const TIMEOUT_MS = 5000;
const MARGIN_MS = 2000;

describe('scheduled handlers return before the invocation ends, their counts written, when a lock blocks the end of the pass', () => {
  let db: TestDatabase;
  let locker: pg.Client | undefined;
  /** Every EMF line the handler wrote, with the invocation's time left when it was written. */
  let written: Array<{ line: string; remainingMs: number }>;
  let context: ReturnType<typeof fakeLambdaContext>;

  before(async () => {
    db = await createTestDatabase({
      lambda: { deadlineMarginMs: MARGIN_MS },
      destinations: { main: { type: 'sqs', queueUrl: 'http://localhost:1/000000000000/main' } },
      outbox: { routes: [{ topicPattern: 'orders.**', destination: 'main' }], claimTimeoutMs: 60_000, maxAttempts: 2, pollIntervalMs: 20 },
      inbox: { relay: { claimTimeoutMs: 60_000, pollIntervalMs: 20 }, sources: { shop: { type: 'http', path: '/shop', auth: { type: 'none' } }, jobs: { type: 'http', path: '/jobs', auth: { type: 'none' }, consumption: 'pull' } } },
    });
  });
  after(async () => {
    setContainer(undefined);
    await db.drop();
  });
  beforeEach(async () => {
    written = [];
    context = fakeLambdaContext({ timeoutMs: TIMEOUT_MS });
    // Each case starts with no gate row (reclaim throttle, backlog gauge gate, heartbeats).
    await db.query(`DELETE FROM "${db.schema}".${db.config.tables.maintenance}`);
    await db.query(`DELETE FROM "${db.schema}".outbox`);
    await db.query(`DELETE FROM "${db.schema}".${db.config.tables.inbox}`);
  });
  afterEach(async () => {
    await locker?.query('ROLLBACK').catch(() => {});
    await locker?.end().catch(() => {});
    locker = undefined;
  });

  /** Another session takes `LOCK TABLE … ACCESS EXCLUSIVE` on `table` and keeps it until the case ends. */
  async function lockTable(table: string): Promise<void> {
    locker = new pg.Client({ connectionString: db.url });
    locker.on('error', () => {});
    await locker.connect();
    await locker.query('BEGIN');
    await locker.query(`LOCK TABLE "${db.schema}"."${table}" IN ACCESS EXCLUSIVE MODE`);
  }

  /**
   * The container of the handler: a driver of its own (its backlog gauge is due) whose `method`
   * first has `table` locked by another session, so that statement and any after it on that table
   * wait on the lock.
   */
  function useDriver(hook?: { method: keyof Driver; table: string }): Driver {
    const base = db.newDriver();
    const driver: Driver = hook === undefined
      ? base
      : Object.create(base, {
          [hook.method]: {
            value: async (...args: unknown[]) => {
              if (locker === undefined) await lockTable(hook.table);
              return (base[hook.method] as (...a: unknown[]) => Promise<unknown>)(...args);
            },
          },
        });
    setContainer({
      config: db.config,
      driver,
      logger: createLogger({ serviceName: 'queuebox', logLevel: 'SILENT' }),
      env: {},
      writeMetrics: (line) => written.push({ line, remainingMs: context.getRemainingTimeInMillis() }),
    });
    return driver;
  }

  /** Runs the handler; returns its outcome and the invocation's time left the moment it settled. */
  async function settle<T>(run: Promise<T>): Promise<{ result?: T; error?: unknown; remainingMs: number }> {
    return run.then(
      (result) => ({ result, remainingMs: context.getRemainingTimeInMillis() }),
      (error: unknown) => ({ error, remainingMs: context.getRemainingTimeInMillis() }),
    );
  }

  /** The sum of a metric over the lines written while the invocation still had time. */
  const inTime = (name: string, dimensions: Record<string, string> = {}) =>
    emfValue(
      written.filter((w) => w.remainingMs > 0).map((w) => w.line),
      name,
      dimensions,
    );
  const late = () => written.filter((w) => w.remainingMs === 0).map((w) => w.line);

  it('reclaim: the heartbeat stamp behind a lock on the maintenance table; the reclaimed and dead counts are written before it', { timeout: 60_000 }, async () => {
    const ids = await insertOutboxRows(db, Array.from({ length: 6 }, (_, i) => ({ topic: 'orders.paid', key: `k${i}`, payload: { i } })));
    // Expired leases; half of them at their last attempt (those go dead).
    await db.query(
      `UPDATE "${db.schema}".outbox SET state = 'processing', claim_token = gen_random_uuid(), key_first = true,
              attempt = CASE WHEN id = ANY($1::uuid[]) THEN max_attempts - 1 ELSE 0 END,
              claimed_at = clock_timestamp() - interval '2 minutes', lease_expires_at = clock_timestamp() - interval '1 minute'`,
      [ids.slice(0, 3)],
    );
    useDriver({ method: 'passRecordFinished', table: db.config.tables.maintenance });
    const { result, error, remainingMs } = await settle(reclaimHandler({ source: 'aws.events' }, context));
    assert.equal(error, undefined);
    assert.deepEqual([result?.outbox, result?.outboxDead], [3, 3]);
    assert.equal(inTime(METRICS.outboxReclaimed.name), 3, 'the reclaimed count is written before the invocation ends');
    assert.equal(inTime(METRICS.outboxMessages.name, { status: 'dead' }), 3, 'the dead count is written before the invocation ends');
    assert.equal(inTime(METRICS.passesFinished.name, { function: 'reclaim' }), 1, 'the heartbeat metric is written, though its stamp waited');
    assert.deepEqual(late(), []);
    assert.ok(remainingMs > 0, `the handler settled with ${remainingMs} ms of the invocation left`);
  });

  it('inbox relay: the backlog read behind a lock on the inbox table; the dead and forwarded counts are written before it', { timeout: 60_000 }, async () => {
    // A row with no event type cannot get a topic (`{source}.{eventType}`): dead at once.
    for (let i = 0; i < 9; i++) {
      await db.driver.inboxInsert({ source: 'shop', idempotencyKey: `k${i}`, aggregateId: `A${i}`, eventType: i % 3 === 0 ? null : 'created', payload: { i }, consumption: 'push' });
    }
    useDriver({ method: 'inboxStats', table: db.config.tables.inbox });
    const { result, error, remainingMs } = await settle(createInboxRelay({ invoke: async () => {} })({ source: 'aws.events' }, context));
    assert.equal(error, undefined);
    assert.deepEqual([result?.forwarded, result?.dead], [6, 3]);
    assert.equal(inTime(METRICS.inboxMessages.name, { status: 'dead' }), 3);
    assert.equal(inTime(METRICS.inboxFailedMessages.name, { source: 'shop', status: 'dead' }), 3);
    assert.equal(inTime(METRICS.inboxMessages.name, { status: 'forwarded' }), 6);
    assert.equal(inTime(METRICS.passesFinished.name, { function: 'inboxRelay' }), 1);
    assert.deepEqual(late(), []);
    assert.ok(remainingMs > 0, `the handler settled with ${remainingMs} ms of the invocation left`);
  });

  it('inbox relay: the heartbeat stamp behind a lock on the maintenance table ends at the deadline, not at the invocation\'s end', { timeout: 60_000 }, async () => {
    for (let i = 0; i < 6; i++) {
      await db.driver.inboxInsert({ source: 'shop', idempotencyKey: `k${i}`, aggregateId: `A${i}`, eventType: 'created', payload: { i }, consumption: 'push' });
    }
    useDriver({ method: 'passRecordFinished', table: db.config.tables.maintenance });
    const { result, error, remainingMs } = await settle(createInboxRelay({ invoke: async () => {} })({ source: 'aws.events' }, context));
    assert.equal(error, undefined);
    assert.equal(result?.forwarded, 6);
    assert.equal(inTime(METRICS.inboxMessages.name, { status: 'forwarded' }), 6);
    assert.equal(inTime(METRICS.passesFinished.name, { function: 'inboxRelay' }), 1);
    assert.deepEqual(late(), []);
    // The pass ends a second before its deadline (the least lease); the stamp may take it, no more:
    // the margin (2 s) is left, less what a loaded machine takes to schedule the handler's return.
    assert.ok(remainingMs > MARGIN_MS / 2, `the handler settled with ${remainingMs} ms of the invocation left`);
  });

  it('outbox poller: the backlog read behind a lock on the outbox table; the sent and dead counts are written before it', { timeout: 60_000 }, async () => {
    // `billing.*` matches no route: dead at once.
    await insertOutboxRows(db, [
      { topic: 'orders.paid', key: 'a', payload: { n: 1 } },
      { topic: 'orders.paid', key: 'b', payload: { n: 2 } },
      { topic: 'billing.created', key: 'c', payload: { n: 3 } },
    ]);
    useDriver({ method: 'outboxStats', table: 'outbox' });
    const poller = createOutboxPoller({ buildDestinations: () => new Map([['main', new RecordingDestination()]]), invoke: async () => {} });
    const { result, error, remainingMs } = await settle(poller({ source: 'aws.events' }, context));
    assert.equal(error, undefined);
    assert.deepEqual([result?.sent, result?.dead], [2, 1]);
    assert.equal(inTime(METRICS.outboxMessages.name, { status: 'sent' }), 2);
    assert.equal(inTime(METRICS.outboxMessages.name, { status: 'dead' }), 1);
    assert.equal(inTime(METRICS.passesFinished.name, { function: 'outboxPoller' }), 1);
    assert.deepEqual(late(), []);
    assert.ok(remainingMs > 0, `the handler settled with ${remainingMs} ms of the invocation left`);
  });

  it('outbox poller: a claim behind a lock on the outbox table is cancelled at the deadline; the pass ends there with its summary, before the invocation ends', { timeout: 60_000 }, async () => {
    const [id] = await insertOutboxRows(db, [{ topic: 'orders.paid', key: 'a', payload: { n: 1 } }]);
    // The reclaim beside the claim waits on the lock too, and is cancelled at the deadline with it.
    await lockTable('outbox');
    useDriver();
    const destination = new RecordingDestination();
    const poller = createOutboxPoller({ buildDestinations: () => new Map([['main', destination]]), invoke: async () => {} });
    const { result, error, remainingMs } = await settle(poller({ source: 'aws.events' }, context));
    // Cancelled at the deadline that bounds it, the claim took nothing: the pass reached its
    // deadline, which is no failure (before, the handler failed: a retry and the Errors alarm).
    assert.equal(error, undefined);
    assert.equal(result!.stoppedBecause, 'deadline');
    assert.deepEqual([result!.claimed, result!.sent, result!.reclaimRan], [0, 0, false]);
    assert.equal(inTime(METRICS.passesFinished.name, { function: 'outboxPoller' }), 1, 'the heartbeat metric is written');
    assert.deepEqual(late(), []);
    assert.ok(remainingMs > 0, `the handler settled with ${remainingMs} ms of the invocation left`);
    await locker!.query('ROLLBACK');
    const [row] = await db.query<{ state: string; attempt: number; claimed_at: Date | null }>(`SELECT state, attempt, claimed_at FROM "${db.schema}".outbox WHERE id = $1`, [id]);
    assert.deepEqual([row!.state, row!.attempt, row!.claimed_at], ['pending', 0, null], 'the row is untouched');
    // The next invocation claims it and sends it.
    context = fakeLambdaContext({ timeoutMs: TIMEOUT_MS });
    const next = await poller({ source: 'aws.events' }, context);
    assert.deepEqual([next.claimed, next.sent], [1, 1]);
  });

  it('inbox relay: a claim behind a lock on the inbox table is cancelled at the deadline; the pass ends there with its summary, before the invocation ends', { timeout: 60_000 }, async () => {
    const { id } = await db.driver.inboxInsert({ source: 'shop', idempotencyKey: 'k1', aggregateId: 'A1', eventType: 'created', payload: { n: 1 }, consumption: 'push' });
    // Locked once the reclaim has run: the claim is what waits.
    useDriver({ method: 'inboxClaimPushMany', table: db.config.tables.inbox });
    const relay = createInboxRelay({ invoke: async () => {} });
    const { result, error, remainingMs } = await settle(relay({ source: 'aws.events' }, context));
    assert.equal(error, undefined);
    assert.deepEqual([result!.claimed, result!.forwarded], [0, 0]);
    assert.equal(inTime(METRICS.passesFinished.name, { function: 'inboxRelay' }), 1, 'the heartbeat metric is written');
    assert.deepEqual(late(), []);
    assert.ok(remainingMs > 0, `the handler settled with ${remainingMs} ms of the invocation left`);
    await locker!.query('ROLLBACK');
    const [row] = await db.query<{ state: string; attempt: number }>(`SELECT state, attempt FROM "${db.schema}".${db.config.tables.inbox} WHERE id = $1`, [id]);
    assert.deepEqual([row!.state, row!.attempt], ['pending', 0], 'the row is untouched');
    // The next invocation claims it and forwards it.
    context = fakeLambdaContext({ timeoutMs: TIMEOUT_MS });
    const next = await relay({ source: 'aws.events' }, context);
    assert.deepEqual([next.claimed, next.forwarded], [1, 1]);
  });

  it('pull runOnce: a claim behind a lock on the inbox table is cancelled at the deadline; the run ends there with its summary, before the invocation ends', { timeout: 60_000 }, async () => {
    await insertPullRows(db, 'jobs', [{ key: 'm1' }]);
    await lockTable(db.config.tables.inbox);
    const driver = useDriver();
    const worker = createPullWorker({ driver, config: db.config, source: 'jobs', leaseMs: 30_000, batch: 1, concurrency: 1, logger: memoryLogger(), metrics: false, handler: async () => {} });
    const { result, error, remainingMs } = await settle(worker.runOnce({ context }));
    // Cancelled at the deadline that bounds it, the claim took nothing: the run ends with its summary.
    assert.equal(error, undefined);
    assert.equal(result!.claimed, 0);
    assert.ok(remainingMs > 0, `runOnce settled with ${remainingMs} ms of the invocation left`);
  });
});
