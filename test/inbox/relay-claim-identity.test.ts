import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import type { Driver, InboxForwardItem, InboxMessageInput } from '../../lib/db/driver.ts';
import { runRelayPass, type RelaySummary } from '../../lib/inbox/relay-pass.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import { createDeadline, sleep } from '../../lib/runtime/deadline.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { fakeLambdaContext } from '../helpers/lambda-context.ts';
import { RecordingLogger } from '../helpers/recording-logger.ts';
import { waitUntil } from '../helpers/wait.ts';

/**
 * The relay renews only the rows it still holds: a row already forwarded, retried or marked dead
 * is not reported lost by a later renewal, and a row that comes back to the same pass (after its
 * retry) is forwarded by it.
 */
describe('inbox relay: a claim is its token', () => {
  let db: TestDatabase;
  let inbox: string;
  before(async () => {
    db = await createTestDatabase({
      inbox: {
        relay: { batchSize: 10, concurrency: 4, claimTimeoutMs: 1200, pollIntervalMs: 10, maxAttempts: 5, retryBaseDelayMs: 1 },
        sources: { shop: { type: 'http', path: '/shop', auth: { type: 'none' } } },
      },
    });
    inbox = `"${db.schema}".inbox`;
  });
  after(async () => db.drop());
  beforeEach(async () => {
    await db.query(`TRUNCATE ${inbox}, "${db.schema}".outbox, "${db.schema}".queuebox_maintenance`);
  });

  const store = (key: string, extra: Partial<InboxMessageInput> = {}) =>
    db.driver.inboxInsert({ source: 'shop', idempotencyKey: key, aggregateId: key, eventType: 'created', payload: { key }, consumption: 'push', ...extra });

  const run = (driver: Driver, signal: AbortSignal, metrics: QueueBoxMetrics, logger: RecordingLogger): Promise<RelaySummary> =>
    runRelayPass({
      config: db.config,
      driver,
      logger: logger as never,
      metrics,
      deadline: createDeadline(fakeLambdaContext({ timeoutMs: 30_000 }), 0),
      signal,
      random: () => 0,
    });

  it('reports no loss for rows it already retried or marked dead, and forwards a retried row when it claims it again', async () => {
    const { id: retried } = await store('retry-once');
    await store('no-type', { eventType: null }); // dead at once: its topic cannot be rendered
    // Ten more rows, forwarded four at a time, 150 ms each: the batch outlasts a renewal period
    // (400 ms), so renewals run after some of its rows were finished.
    for (let i = 0; i < 10; i++) await store(`slow-${i}`);
    const base = db.newDriver();
    let failedOnce = false;
    // Row by row (as on SQL Server): the first forward of `retry-once` fails, each `slow-*` forward takes 150 ms.
    const driver = Object.create(base, {
      inboxForwardMany: { value: undefined },
      inboxForward: {
        value: async (item: InboxForwardItem, defaults: { maxAttempts: number }) => {
          const key = (item.outbox.headers ?? {})['x-idempotency-key'];
          if (key === 'retry-once' && !failedOnce) {
            failedOnce = true;
            throw new Error('outbox refused the row (injected)');
          }
          if (key?.startsWith('slow-') === true) await sleep(150);
          return base.inboxForward(item, defaults);
        },
      },
    }) as Driver;
    const metrics = new QueueBoxMetrics({ namespace: 'QueueBoxTest', serviceName: 'test', write: () => {} });
    const logger = new RecordingLogger();
    const stop = new AbortController();
    const pass = run(driver, stop.signal, metrics, logger);
    await waitUntil('every row is finished', async () => (await db.query(`SELECT 1 FROM ${inbox} WHERE state NOT IN ('processed', 'dead')`)).length === 0, 8000).finally(() => stop.abort());
    const summary = await pass;
    const [row] = await db.query<{ state: string; attempt: number }>(`SELECT state, attempt FROM ${inbox} WHERE id = $1`, [retried]);
    assert.deepEqual([row!.state, row!.attempt], ['processed', 1], 'the retried row came back to the pass and was forwarded');
    assert.deepEqual([summary.forwarded, summary.retried, summary.dead, summary.claimsLost, summary.abandoned], [11, 1, 1, 0, 0]);
    assert.equal(metrics.value('claimsLost', { component: 'inbox' }), 0);
    assert.deepEqual(logger.at('error').filter((l) => /lost/.test(l.message)), [], 'no false loss was logged');
  });
});
