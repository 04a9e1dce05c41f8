/**
 * On an SQS source the key prefix `rejected:` is reserved for records stored dead at receipt
 * (keyed `rejected:<MessageId>`). Before, a valid message could take such a key: keyed (by its body
 * or its `x-idempotency-key` attribute) `rejected:m-2`, it was stored, and when record `m-2` then
 * arrived broken it was acknowledged as a duplicate — no dead row, nothing stored; the other way
 * round, after record `m-3` was stored dead, a valid message keyed `rejected:m-3` was acknowledged
 * as a duplicate of the dead row and dropped. Now a valid-looking record whose key starts with
 * `rejected:` is itself stored dead (under `rejected:<its MessageId>`) with the reason, counted as
 * `reserved_idempotency_key`, so no valid row ever meets a dead row's key.
 * HTTP sources store nothing on refusal and share no rows with SQS sources (a source name is one
 * source of one type): there the prefix is an ordinary key.
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import type { SQSRecord } from 'aws-lambda';
import { createHttpReceiver } from '../../lib/inbox/http-receiver.ts';
import { createSqsReceiver, type SqsReceiver } from '../../lib/inbox/sqs-receiver.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import { apiGatewayV2Event } from '../helpers/api-gateway-event.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { sqsRecord } from '../helpers/sqs-record.ts';

function record(messageId: string, body: string, attributes: Record<string, string> = {}): SQSRecord {
  const r = sqsRecord(messageId, body, 'feed');
  r.messageAttributes = Object.fromEntries(Object.entries(attributes).map(([k, v]) => [k, { stringValue: v, dataType: 'String', stringListValues: [], binaryListValues: [] }]));
  return r;
}

describe('SQS receiver: the key prefix rejected: is reserved for records stored dead at receipt', () => {
  let db: TestDatabase;
  let metrics: QueueBoxMetrics;
  let receive: SqsReceiver;
  const logger = createLogger({ serviceName: 'test', logLevel: 'SILENT' });
  before(async () => {
    db = await createTestDatabase({
      inbox: {
        sources: {
          feed: { type: 'sqs', idempotencyKeyPath: '$.id', eventTypePath: '$.type' },
          hooks: { type: 'http', path: '/hooks', auth: { type: 'none' } },
        },
      },
    });
    receive = createSqsReceiver({ config: db.config, driver: db.driver, logger });
  });
  after(async () => db.drop());
  beforeEach(async () => {
    await db.query(`TRUNCATE "${db.schema}".inbox`);
    metrics = new QueueBoxMetrics({ namespace: 'QueueBox', serviceName: 'test', write: () => {} });
  });
  const rows = (source = 'feed') =>
    db.query<{ idempotency_key: string; state: string; last_error: string | null; headers: Record<string, string> }>(
      `SELECT idempotency_key, state, last_error, headers FROM "${db.schema}".inbox WHERE source = $1 ORDER BY sequence`,
      [source],
    );
  const summary = async () => (await rows()).map((r) => `${r.idempotency_key}:${r.state}`);

  it('a valid message keyed rejected:m-2 by its body is stored dead; record m-2 arriving broken is stored dead too, not taken for a duplicate', async () => {
    assert.deepEqual(await receive({ Records: [record('m-1', '{"id":"rejected:m-2","type":"t"}')] }, metrics), { batchItemFailures: [] });
    assert.deepEqual(await receive({ Records: [record('m-2', '{"id": broken')] }, metrics), { batchItemFailures: [] });
    const stored = await rows();
    assert.deepEqual(stored.map((r) => `${r.idempotency_key}:${r.state}`), ['rejected:m-1:dead', 'rejected:m-2:dead']);
    assert.equal(stored[0]!.last_error, 'idempotency key "rejected:m-2" (from idempotencyKeyPath $.id) starts with "rejected:", which is reserved for the keys of records stored dead at receipt');
    assert.match(stored[1]!.last_error ?? '', /^body is not valid JSON: /);
    assert.equal(metrics.value('inboxRejections', { reason: 'reserved_idempotency_key' }), 1);
    assert.equal(metrics.value('inboxRejections', { reason: 'invalid_json' }), 1);
    assert.equal(metrics.value('inboxMessages', { status: 'duplicate' }), 0);
  });

  it('after record m-3 is stored dead, a valid message keyed rejected:m-3 by its attribute is stored dead under its own MessageId, not dropped as a duplicate; its redelivery is a duplicate', async () => {
    await receive({ Records: [record('m-3', 'not json')] }, metrics);
    const valid = record('m-4', '{"id":"x","type":"t"}', { 'x-idempotency-key': 'rejected:m-3' });
    assert.deepEqual(await receive({ Records: [valid] }, metrics), { batchItemFailures: [] });
    const stored = await rows();
    assert.deepEqual(stored.map((r) => `${r.idempotency_key}:${r.state}`), ['rejected:m-3:dead', 'rejected:m-4:dead']);
    assert.equal(stored[1]!.last_error, 'idempotency key "rejected:m-3" (from the x-idempotency-key message attribute) starts with "rejected:", which is reserved for the keys of records stored dead at receipt');
    assert.deepEqual(stored[1]!.headers, { 'x-idempotency-key': 'rejected:m-3' });
    assert.equal(metrics.value('inboxMessages', { status: 'duplicate' }), 0);
    await receive({ Records: [valid] }, metrics);
    assert.deepEqual(await summary(), ['rejected:m-3:dead', 'rejected:m-4:dead']);
    assert.equal(metrics.value('inboxMessages', { status: 'duplicate' }), 1);
    assert.equal(metrics.value('inboxRejections', { reason: 'reserved_idempotency_key' }), 1, 'a redelivery is not counted again');
  });

  it('only the exact prefix is reserved: keys holding it elsewhere or in another case are stored', async () => {
    const records = [record('m-5', '{"id":"order-rejected:1"}'), record('m-6', '{"id":"Rejected:m-1"}'), record('m-7', '{"id":"x"}', { 'x-idempotency-key': 'rejected' })];
    assert.deepEqual(await receive({ Records: records }, metrics), { batchItemFailures: [] });
    assert.deepEqual(await summary(), ['order-rejected:1:pending', 'Rejected:m-1:pending', 'rejected:pending']);
  });

  it('an HTTP source stores nothing on refusal and shares no rows with an SQS source: a key starting with rejected: is an ordinary key there', async () => {
    const http = createHttpReceiver({ config: db.config, driver: db.driver, logger, env: {} });
    const answer = await http(apiGatewayV2Event('/inbox/hooks', '{"n":1}', { 'x-idempotency-key': 'rejected:m-1' }), metrics);
    assert.equal(answer.statusCode, 202, answer.body);
    assert.deepEqual((await rows('hooks')).map((r) => `${r.idempotency_key}:${r.state}`), ['rejected:m-1:pending']);
  });
});
