import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createOutboxPoller } from '../../functions/outbox-poller.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { setContainer } from '../../lib/runtime/container.ts';
import { createInvocationContext } from '../../lib/runtime/invocation-context.ts';
import { runOutboxPass } from '../../lib/outbox/outbox-pass.ts';
import type { OutboxPassDriver } from '../../lib/outbox/pass-context.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { insertOutboxRows, passFixture } from '../helpers/outbox-pass-fixture.ts';
import { RecordingDestination } from '../helpers/recording-destination.ts';
import { createCountedDatabase, type CountedDatabase } from '../helpers/transaction-count.ts';
import { waitUntil } from '../helpers/wait.ts';

/** The most transactions an idle 10 s invocation may send (about one a second, and its first steps). */
const IDLE_10S_BUDGET = 20;

describe('an idle outbox poller invocation', () => {
  let db: CountedDatabase;
  before(async () => {
    // The default configuration (poll interval, deadline margin), as deployed.
    db = await createCountedDatabase({
      destinations: { main: { type: 'sqs', queueUrl: 'http://localhost:1/000000000000/main' } },
      outbox: { routes: [{ topicPattern: '**', destination: 'main' }] },
    });
  });
  after(async () => {
    setContainer(undefined);
    await db?.drop();
  });

  it(`polls an empty outbox until its deadline with at most ${IDLE_10S_BUDGET} transactions in a 10 s invocation`, { timeout: 60_000 }, async (t) => {
    const destination = new RecordingDestination();
    const handler = createOutboxPoller({ buildDestinations: () => new Map([['main', destination]]) });
    // An invocation of its own for each run (`transactionsWithin` may run it again).
    let context = createInvocationContext({ timeoutMs: 10_000 });
    const { result: summary, transactions, counts } = await db.transactionsWithin(IDLE_10S_BUDGET, async (driver) => {
      context = createInvocationContext({ timeoutMs: 10_000 });
      setContainer({ config: db.config, driver, logger: createLogger({ serviceName: 'queuebox', logLevel: 'SILENT' }), env: {}, writeMetrics: () => {} });
      return handler({ source: 'aws.events' }, context);
    });
    assert.equal(summary.claimed, 0);
    assert.equal(summary.stoppedBecause, 'deadline');
    // It kept polling until the claim window before its deadline (margin 5 s, window 1 s) ...
    const left = context.getRemainingTimeInMillis();
    assert.ok(left > 0 && left <= db.config.lambda.deadlineMarginMs + 1000 + 500, `returned with ${left} ms of the invocation left`);
    // ... and did so cheaply. At least the reclaim, a claim and the backlog gauge read were counted.
    t.diagnostic(`${counts.join(', ')} transactions`);
    assert.ok(transactions >= 3, `counted ${transactions} transactions: the count misses the pass's own`);
    assert.ok(transactions <= IDLE_10S_BUDGET, `an idle 10 s invocation sent ${transactions} transactions`);
  });
});

describe('an outbox poller invocation after an idle spell', () => {
  let db: TestDatabase;
  before(async () => {
    // The default idle polling: 100 ms doubling to 1 s.
    db = await createTestDatabase({
      destinations: { main: { type: 'sqs', queueUrl: 'http://localhost:1/000000000000/main' } },
      outbox: { routes: [{ topicPattern: '**', destination: 'main' }] },
    });
  });
  after(async () => db?.drop());

  it('waits about a second between idle claims, and still publishes a row committed then, in the same invocation', { timeout: 60_000 }, async () => {
    const claims: number[] = [];
    const driver: OutboxPassDriver = { ...db.driver, outboxClaimMany: (p) => (claims.push(performance.now()), db.driver.outboxClaimMany(p)) };
    const destination = new RecordingDestination();
    const running = runOutboxPass(passFixture(db, { destinations: [destination], driver, timeoutMs: 10_000, marginMs: 1000, mode: 'deadline' }));
    // Claims at about 0, 0.1, 0.3, 0.7, 1.5 and 2.5 s: the wait has reached its cap.
    await waitUntil('six idle claims', () => claims.length >= 6);
    const [id] = await insertOutboxRows(db, [{ topic: 'orders.paid', payload: { late: true } }]);
    const summary = await running;
    assert.deepEqual(destination.deliveries.map((d) => d.id), [id], 'published by the invocation that was idle when it was committed');
    assert.equal(summary.sent, 1);
    const gaps = claims.slice(1, 6).map((at, i) => at - claims[i]!);
    // Each idle wait is at least the one before it, doubling to the 1 s cap (timers never fire early).
    assert.ok(gaps[3]! >= 750 && gaps[4]! >= 950, `idle claim gaps ${gaps.map(Math.round).join(', ')} ms`);
  });
});
