/**
 * The outbox pass through the real EventBridge destination and the real
 * `@aws-sdk/client-eventbridge` client, over HTTP (AWS JSON 1.1, `AWSEvents.PutEvents`), to the
 * local EventBridge endpoint of `lib/local/`. Per-entry answers become sent / retry / dead rows;
 * whole-request throttling and 5xx are retried by the SDK and then by the row; the envelope
 * carries the row id for consumers to deduplicate on.
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import { createDestinations, type ClientOverrides } from '../../lib/destinations/create-destinations.ts';
import { startLocalEventBridge, type LocalEventBridge } from '../../lib/local/local-eventbridge.ts';
import { runOutboxPass } from '../../lib/outbox/outbox-pass.ts';
import { createRouter } from '../../lib/outbox/routes.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { emfValue } from '../helpers/emf.ts';
import { insertOutboxRows, inspectRows, passFixture } from '../helpers/outbox-pass-fixture.ts';

const credentials = { accessKeyId: 'test', secretAccessKey: 'test' };

describe('outbox pass through the real EventBridge client to a local PutEvents endpoint', () => {
  let bus: LocalEventBridge;
  let db: TestDatabase;
  before(async () => {
    bus = await startLocalEventBridge({ buses: ['orders-bus'] });
    db = await createTestDatabase({
      destinations: {
        events: { type: 'eventbridge', eventBusName: 'orders-bus', source: 'shop.orders', endpoint: bus.endpoint, region: 'us-east-1' },
        nowhere: { type: 'eventbridge', eventBusName: 'arn:aws:events:us-east-1:000000000000:event-bus/missing', source: 'shop.orders', endpoint: bus.endpoint, region: 'us-east-1' },
      },
      outbox: { routes: [{ topicPattern: 'lost.**', destination: 'nowhere' }, { topicPattern: '**', destination: 'events' }], pollIntervalMs: 10, retryBaseDelayMs: 1000 },
    });
  });
  after(async () => {
    await db.drop();
    await bus.stop();
  });
  beforeEach(async () => {
    bus.failEntries(undefined);
    await db.query(`DELETE FROM "${db.schema}".outbox`);
  });

  /** One drained pass with the SDK client built as the poller builds it. */
  async function pass(overrides: ClientOverrides = {}) {
    const destinations = createDestinations(db.config, { clientOverrides: { credentials, ...overrides } });
    const fixture = passFixture(db, { destinations: [] });
    const summary = await runOutboxPass({ ...fixture, destinations, router: createRouter(db.config.outbox.routes, Object.fromEntries(destinations)) });
    fixture.metrics.flush();
    return { summary, answers: (outcome: string) => emfValue(fixture.lines, 'queuebox_outbox_destination_messages_total', { destination: 'events', outcome }) };
  }

  it('delivers 23 rows in PutEvents calls of at most 10, each event carrying the envelope with the row id', async () => {
    const requestsBefore = bus.requests;
    const ids = await insertOutboxRows(
      db,
      Array.from({ length: 23 }, (_, i) => ({ topic: 'orders.created', key: `o-${i % 5}`, payload: { n: i }, headers: { 'X-Correlation-Id': `c-${i}`, tenant: 'acme' } })),
    );
    const { summary, answers } = await pass();
    assert.equal(summary.sent, 23);
    assert.ok(bus.requests - requestsBefore >= 3, `at least 3 PutEvents requests for 23 entries, got ${bus.requests - requestsBefore}`);
    assert.deepEqual((await inspectRows(db, ids)).map((r) => r.state), Array(23).fill('sent'));
    const events = bus.events('orders-bus');
    const byId = new Map(events.map((e) => [(e.detail.metadata as { messageId: string }).messageId, e]));
    assert.deepEqual([...byId.keys()].sort(), [...ids].sort(), 'one event per row, identified by the row id');
    const first = byId.get(ids[0]!)!;
    assert.equal(first.source, 'shop.orders');
    assert.equal(first.detailType, 'orders.created');
    assert.deepEqual(first.detail, {
      metadata: { version: 1, messageId: ids[0], topic: 'orders.created', key: 'o-0', attempt: 0, correlationId: 'c-0', headers: { 'X-Correlation-Id': 'c-0', tenant: 'acme' } },
      data: { n: 0 },
    });
    assert.equal(answers('sent'), 23);
  });

  it('maps per-entry failures: InternalFailure and ThrottlingException retry, InvalidArgument is dead at once, an unknown bus spends attempts', async () => {
    const ids = await insertOutboxRows(db, [
      { topic: 'orders.created', payload: { answer: 'ok' } },
      { topic: 'orders.created', payload: { answer: 'InternalFailure' } },
      { topic: 'orders.created', payload: { answer: 'ThrottlingException' } },
      { topic: 'orders.created', payload: { answer: 'InvalidArgument' } },
      { topic: 'lost.order', payload: { answer: 'ok' } },
    ]);
    bus.failEntries((entry) => {
      const answer = (JSON.parse(entry.Detail!) as { data: { answer: string } }).data.answer;
      return answer === 'ok' ? undefined : { ErrorCode: answer, ErrorMessage: `${answer} for this entry` };
    });
    const { summary, answers } = await pass();
    const rows = await inspectRows(db, ids);
    assert.deepEqual(
      rows.map((r) => [r.state, r.attempt]),
      [['sent', 0], ['pending', 1], ['pending', 1], ['dead', 0], ['pending', 1]],
    );
    assert.match(rows[1]!.last_error!, /InternalFailure: InternalFailure for this entry/);
    assert.match(rows[2]!.last_error!, /ThrottlingException/);
    assert.match(rows[3]!.last_error!, /InvalidArgument/);
    assert.match(rows[4]!.last_error!, /ResourceNotFoundException: Event bus missing does not exist/);
    assert.ok(rows[1]!.retryDelayMs >= 999 && rows[1]!.retryDelayMs <= 1251, `backoff ~1 s, got ${rows[1]!.retryDelayMs}`);
    assert.deepEqual([summary.sent, summary.retried, summary.dead], [1, 3, 1]);
    assert.equal(answers('retryable'), 2);
    assert.equal(answers('permanent'), 1);

    // The retried rows go again with the same message id and the next attempt number.
    bus.failEntries(undefined);
    await db.query(`UPDATE "${db.schema}".outbox SET scheduled_at = clock_timestamp() WHERE state = 'pending'`);
    await pass();
    assert.deepEqual((await inspectRows(db, ids)).map((r) => r.state), ['sent', 'sent', 'sent', 'dead', 'pending']);
    const redelivered = bus.events('orders-bus').filter((e) => (e.detail.metadata as { messageId: string }).messageId === ids[1]);
    assert.deepEqual(redelivered.map((e) => (e.detail.metadata as { attempt: number }).attempt), [1]);
  });

  it('a throttled or failing request is retried by the SDK; when the SDK gives up, every row of the call is retried', async () => {
    const [a] = await insertOutboxRows(db, [{ topic: 'orders.created', payload: { n: 1 } }]);
    bus.failRequests(1, 'throttle');
    const sdkRetry = await pass({ maxAttempts: 3 });
    assert.equal(sdkRetry.summary.sent, 1, 'the SDK retried the throttled request');
    assert.equal((await inspectRows(db, [a!]))[0]!.state, 'sent');

    const ids = await insertOutboxRows(db, [
      { topic: 'orders.created', payload: { n: 2 } },
      { topic: 'orders.created', payload: { n: 3 } },
    ]);
    bus.failRequests(1, 'throttle');
    const throttled = await pass({ maxAttempts: 1 });
    assert.deepEqual([throttled.summary.sent, throttled.summary.retried], [0, 2]);
    const rows = await inspectRows(db, ids);
    assert.deepEqual(rows.map((r) => [r.state, r.attempt]), [['pending', 1], ['pending', 1]]);
    assert.match(rows[0]!.last_error!, /ThrottlingException/);

    await db.query(`UPDATE "${db.schema}".outbox SET scheduled_at = clock_timestamp() WHERE state = 'pending'`);
    bus.failRequests(1, 'internal');
    const failed = await pass({ maxAttempts: 1 });
    assert.deepEqual([failed.summary.sent, failed.summary.retried], [0, 2]);
    const after5xx = await inspectRows(db, ids);
    assert.deepEqual(after5xx.map((r) => [r.state, r.attempt]), [['pending', 2], ['pending', 2]]);
    assert.match(after5xx[0]!.last_error!, /InternalException|500/);
  });
});
