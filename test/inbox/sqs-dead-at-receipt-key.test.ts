/**
 * An SQS record rejected at receipt is stored `dead` under `rejected:<MessageId>`, not under its
 * `x-idempotency-key` attribute (kept in the row's `headers` for operators). Before, the dead row
 * held the attribute's key: a corrected message sent later under the same key was acknowledged as
 * a duplicate of the broken one and its body stored nowhere (over HTTP a refused request stores
 * nothing, so the corrected one is stored). An SQS redelivery of the rejected record (same
 * MessageId) is still a duplicate.
 *
 * And the dead row's reason is stored with NUL characters replaced, as its body is: JSON.parse's
 * reason quotes the body, so a non-JSON body holding a raw NUL made PostgreSQL refuse the row and
 * the record failed on every delivery (on a FIFO queue with every later record of its batch).
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import type { SQSRecord } from 'aws-lambda';
import { handler as sqsHandler } from '../../functions/inbox-sqs.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { setContainer } from '../../lib/runtime/container.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { fakeLambdaContext } from '../helpers/lambda-context.ts';
import { sqsRecord } from '../helpers/sqs-record.ts';

/** An SQS record with message attributes. */
function record(messageId: string, body: string, queue: string, attributes: Record<string, string> = {}): SQSRecord {
  const r = sqsRecord(messageId, body, queue);
  r.messageAttributes = Object.fromEntries(Object.entries(attributes).map(([k, v]) => [k, { stringValue: v, dataType: 'String', stringListValues: [], binaryListValues: [] }]));
  return r;
}

describe('SQS receiver: a record stored dead at receipt', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({
      inbox: {
        sources: {
          orders: { type: 'sqs', eventTypePath: '$.kind', topicTemplate: 'orders.{{ eventType }}' },
          ledger: { type: 'sqs', queueName: 'ledger.fifo', topicTemplate: 'ledger' },
        },
      },
    });
    setContainer({ config: db.config, driver: db.driver, logger: createLogger({ serviceName: 'test', logLevel: 'SILENT' }), env: {}, writeMetrics: () => {} });
  });
  after(async () => {
    setContainer(undefined);
    await db.drop();
  });
  beforeEach(async () => db.query(`TRUNCATE "${db.schema}".inbox`));

  const receive = (...records: SQSRecord[]) => sqsHandler({ Records: records }, fakeLambdaContext({ timeoutMs: 10_000 }));
  const rows = (source: string) =>
    db.query<{ idempotency_key: string; state: string; payload: unknown; headers: Record<string, string>; last_error: string | null }>(
      `SELECT idempotency_key, state, payload, headers, last_error FROM "${db.schema}".inbox WHERE source = $1 ORDER BY sequence`,
      [source],
    );

  it('is keyed by its MessageId: a corrected message sent later with the same x-idempotency-key is stored; a redelivery of the rejected one is a duplicate', async () => {
    const key = { 'x-idempotency-key': 'order-42-created' };
    assert.deepEqual(await receive(record('mid-1', '{"kind":"created","orderId":"42"', 'orders', key)), { batchItemFailures: [] });
    assert.deepEqual(await receive(record('mid-1', '{"kind":"created","orderId":"42"', 'orders', key)), { batchItemFailures: [] }, 'SQS redelivers the rejected record');
    assert.deepEqual(await receive(record('mid-2', '{"kind":"created","orderId":"42"}', 'orders', key)), { batchItemFailures: [] });
    const stored = await rows('orders');
    assert.deepEqual(
      stored.map((r) => [r.idempotency_key, r.state, r.payload, r.headers]),
      [
        ['rejected:mid-1', 'dead', '{"kind":"created","orderId":"42"', { 'x-idempotency-key': 'order-42-created' }],
        ['order-42-created', 'pending', { kind: 'created', orderId: '42' }, {}],
      ],
      'one dead row for the rejected record (its key kept in headers), and the corrected message stored under the business key',
    );
    assert.match(stored[0]!.last_error ?? '', /^body is not valid JSON: /);
  });

  it('a rejected record whose x-idempotency-key is already stored for a valid row is stored dead too, not acknowledged as a duplicate', async () => {
    const key = { 'x-idempotency-key': 'order-7-paid' };
    await receive(record('mid-1', '{"kind":"paid","orderId":"7"}', 'orders', key));
    assert.deepEqual(await receive(record('mid-2', '[1, 2]', 'orders', key)), { batchItemFailures: [] });
    assert.deepEqual(
      (await rows('orders')).map((r) => [r.idempotency_key, r.state]),
      [['order-7-paid', 'pending'], ['rejected:mid-2', 'dead']],
    );
  });

  it('a body that is not JSON and holds a raw NUL is stored dead with the reason (NUL replaced), on a standard and on a FIFO queue; the rest of the batch is stored', async () => {
    assert.deepEqual(await receive(record('a', 'x\u0000', 'orders'), record('b', '{"kind":"ok"}', 'orders')), { batchItemFailures: [] });
    assert.deepEqual(await receive(record('f1', 'x\u0000', 'ledger.fifo'), record('f2', '{"n":1}', 'ledger.fifo')), { batchItemFailures: [] });
    for (const [source, dead, good] of [['orders', 'a', 'b'], ['ledger', 'f1', 'f2']] as const) {
      const stored = await rows(source);
      assert.deepEqual(stored.map((r) => [r.idempotency_key, r.state]), [[`rejected:${dead}`, 'dead'], [good, 'pending']]);
      assert.equal(stored[0]!.payload, 'x\uFFFD');
      assert.match(stored[0]!.last_error ?? '', /^body is not valid JSON: .*x\uFFFD.*\(NUL characters and lone surrogates were replaced by U\+FFFD to store the body\)$/s);
      assert.ok(!(stored[0]!.last_error ?? '').includes('\u0000'));
    }
  });
});
