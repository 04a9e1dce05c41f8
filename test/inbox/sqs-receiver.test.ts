import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import type { SQSEvent, SQSRecord } from 'aws-lambda';
import type { Driver } from '../../lib/db/driver.ts';
import { PostgresDriver } from '../../lib/db/postgres/postgres-driver.ts';
import { createSqsReceiver } from '../../lib/inbox/sqs-receiver.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import { freePort } from '../../lib/local/embedded-database.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';

const ARN = 'arn:aws:sqs:eu-west-1:000000000000';

function record(messageId: string, body: string, queue = 'orders-queue', attributes: Record<string, string> = {}): SQSRecord {
  return {
    messageId,
    receiptHandle: `rh-${messageId}`,
    body,
    attributes: { ApproximateReceiveCount: '1', SentTimestamp: '0', SenderId: 's', ApproximateFirstReceiveTimestamp: '0' },
    messageAttributes: Object.fromEntries(Object.entries(attributes).map(([k, v]) => [k, { stringValue: v, dataType: 'String' }])),
    md5OfBody: '',
    eventSource: 'aws:sqs',
    eventSourceARN: `${ARN}:${queue}`,
    awsRegion: 'eu-west-1',
  };
}

describe('SQS inbox receiver', () => {
  let db: TestDatabase;
  let metrics: QueueBoxMetrics;
  const logger = createLogger({ serviceName: 'test', logLevel: 'SILENT' });
  before(async () => {
    db = await createTestDatabase({
      inbox: {
        sources: {
          orders: { type: 'sqs', queueName: 'orders-queue', idempotencyKeyPath: '$.orderEventId', aggregateIdPath: '$.orderId', eventTypePath: '$.kind' },
          'billing-events': { type: 'sqs' },
          ledger: { type: 'sqs', queueName: 'ledger.fifo' },
        },
      },
    });
  });
  after(async () => db.drop());
  beforeEach(async () => {
    await db.query(`TRUNCATE "${db.schema}".inbox`);
    metrics = new QueueBoxMetrics({ namespace: 'QueueBox', serviceName: 'test', write: () => {} });
  });
  const rows = () => db.query(`SELECT source, idempotency_key, aggregate_id, event_type, correlation_id, state, last_error, payload FROM "${db.schema}".inbox ORDER BY sequence`);

  it('choose the source by queue name and the key from the attribute, else the JSONPath, else the MessageId', async () => {
    const receive = createSqsReceiver({ config: db.config, driver: db.driver, logger });
    const event: SQSEvent = {
      Records: [
        record('m-1', JSON.stringify({ orderEventId: 'oe-1', orderId: 'o-1', kind: 'paid' }), 'orders-queue', { 'X-Idempotency-Key': 'attr-1', 'x-correlation-id': 'c-1' }),
        record('m-2', JSON.stringify({ orderEventId: 'oe-2', orderId: 'o-1', kind: 'shipped' })),
        record('m-3', JSON.stringify({ amount: 5 }), 'billing-events'),
      ],
    };
    assert.deepEqual(await receive(event, metrics), { batchItemFailures: [] });
    const stored = await rows();
    assert.deepEqual(stored.map((r) => [r.source, r.idempotency_key, r.aggregate_id, r.event_type, r.correlation_id, r.state]), [
      ['orders', 'attr-1', 'o-1', 'paid', 'c-1', 'pending'],
      ['orders', 'oe-2', 'o-1', 'shipped', null, 'pending'],
      ['billing-events', 'm-3', null, null, null, 'pending'],
    ]);
    assert.deepEqual(await receive(event, metrics), { batchItemFailures: [] }, 'a redelivered batch is absorbed');
    assert.equal((await rows()).length, 3);
    assert.equal(metrics.value('inboxMessages', { status: 'new' }), 3);
    assert.equal(metrics.value('inboxMessages', { status: 'duplicate' }), 3);
  });

  it('store a body that is not JSON as dead with the reason and the raw body, not as a failure', async () => {
    const receive = createSqsReceiver({ config: db.config, driver: db.driver, logger });
    const answer = await receive({ Records: [record('m-bad', 'not json at all', 'billing-events'), record('m-arr', '[1,2]', 'billing-events')] }, metrics);
    assert.deepEqual(answer, { batchItemFailures: [] });
    const stored = await rows();
    assert.deepEqual(stored.map((r) => [r.idempotency_key, r.state, r.payload]), [['rejected:m-bad', 'dead', 'not json at all'], ['rejected:m-arr', 'dead', '[1,2]']]);
    assert.match(String(stored[0]!.last_error), /body is not valid JSON/);
    assert.match(String(stored[1]!.last_error), /body must be a JSON object/);
    assert.equal(metrics.value('inboxRejections', { reason: 'invalid_json' }), 2);
    // Counted dead (the inbox dead-messages alarm watches it), not new.
    assert.equal(metrics.value('inboxMessages', { status: 'dead' }), 2);
    assert.equal(metrics.value('inboxMessages', { status: 'new' }), 0);
  });

  it('report only the record whose store failed in batchItemFailures', async () => {
    const failing: Driver = Object.create(db.driver, {
      inboxInsert: { value: async (m: Parameters<Driver['inboxInsert']>[0]) => (m.idempotencyKey === 'm-2' ? Promise.reject(new Error('disk full')) : db.driver.inboxInsert(m)) },
    });
    const receive = createSqsReceiver({ config: db.config, driver: failing, logger });
    const answer = await receive({ Records: ['m-1', 'm-2', 'm-3'].map((id) => record(id, '{}', 'billing-events')) }, metrics);
    assert.deepEqual(answer, { batchItemFailures: [{ itemIdentifier: 'm-2' }] });
    assert.deepEqual((await rows()).map((r) => r.idempotency_key), ['m-1', 'm-3']);
    // The handler returns normally (no Lambda error): the store failure is counted for its alarm.
    assert.equal(metrics.value('inboxStoreFailures', {}), 1);
  });

  it('report the failed record and every later one of a FIFO batch, keeping group order', async () => {
    const failing: Driver = Object.create(db.driver, {
      inboxInsert: { value: async (m: Parameters<Driver['inboxInsert']>[0]) => (m.idempotencyKey === 'f-2' ? Promise.reject(new Error('timeout')) : db.driver.inboxInsert(m)) },
    });
    const receive = createSqsReceiver({ config: db.config, driver: failing, logger });
    const answer = await receive({ Records: ['f-1', 'f-2', 'f-3'].map((id) => record(id, '{}', 'ledger.fifo')) }, metrics);
    assert.deepEqual(answer, { batchItemFailures: [{ itemIdentifier: 'f-2' }, { itemIdentifier: 'f-3' }] });
    assert.deepEqual((await rows()).map((r) => r.idempotency_key), ['f-1']);
  });

  it('report every record when the database is unreachable, and records of an unknown queue', async () => {
    const port = await freePort();
    const unreachable = new PostgresDriver({ config: db.config, url: `postgres://postgres@127.0.0.1:${port}/none` });
    try {
      const receive = createSqsReceiver({ config: db.config, driver: unreachable, logger });
      const answer = await receive({ Records: [record('u-1', '{}', 'billing-events'), record('u-2', 'not json', 'billing-events')] }, metrics);
      assert.deepEqual(answer, { batchItemFailures: [{ itemIdentifier: 'u-1' }, { itemIdentifier: 'u-2' }] });
    } finally {
      await unreachable.close();
    }
    const receive = createSqsReceiver({ config: db.config, driver: db.driver, logger });
    assert.deepEqual(await receive({ Records: [record('q-1', '{}', 'other-queue')] }, metrics), { batchItemFailures: [{ itemIdentifier: 'q-1' }] });
    assert.equal(metrics.value('inboxRejections', { reason: 'unknown_source' }), 1);
    assert.equal(metrics.value('inboxStoreFailures', {}), 3, 'two records the database did not take, one from a queue no source reads');
    assert.deepEqual(await rows(), []);
  });
});
