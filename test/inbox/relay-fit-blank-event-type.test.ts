/**
 * docs/inbox.md: "the relay can forward every message answered 202 to the outbox". An event type of
 * only whitespace is a non-empty string, so it is extracted; on a `{{ eventType }}` template the
 * relay's `renderTopic` trims it to an empty topic and would mark the row dead. The receivers
 * render the topic the same way at receipt: HTTP refuses the message (400 `invalid_field`, nothing
 * stored) and SQS stores it `dead` with the reason, instead of pending to die at the relay.
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import type { SQSRecord } from 'aws-lambda';
import { handler as httpHandler } from '../../functions/inbox-http.ts';
import { handler as sqsHandler } from '../../functions/inbox-sqs.ts';
import { runRelayPass } from '../../lib/inbox/relay-pass.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import { setContainer } from '../../lib/runtime/container.ts';
import { createDeadline } from '../../lib/runtime/deadline.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { fakeLambdaContext } from '../helpers/lambda-context.ts';
import { apiGatewayV2Event } from '../helpers/api-gateway-event.ts';

const env = { SHOP_TOKEN: 'shop-token-00000001' };
const logger = createLogger({ serviceName: 'test', logLevel: 'SILENT' });
const ctx = () => fakeLambdaContext({ timeoutMs: 10_000 });

function sqsRecord(messageId: string, body: string, queue: string): SQSRecord {
  return {
    messageId, receiptHandle: `rh-${messageId}`, body,
    attributes: { ApproximateReceiveCount: '1', SentTimestamp: '0', SenderId: 's', ApproximateFirstReceiveTimestamp: '0' },
    messageAttributes: {}, md5OfBody: '', eventSource: 'aws:sqs', eventSourceARN: `arn:aws:sqs:eu-west-1:000000000000:${queue}`, awsRegion: 'eu-west-1',
  };
}

describe('an event type of only whitespace on a {{ eventType }} template', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({
      inbox: {
        sources: {
          bare: { type: 'http', path: '/bare', auth: { type: 'bearer', tokenEnv: 'SHOP_TOKEN' }, eventTypePath: '$.type', topicTemplate: '{{ eventType }}' },
          feed: { type: 'sqs', idempotencyKeyPath: '$.id', eventTypePath: '$.type', topicTemplate: '{{ eventType }}' },
        },
      },
    });
  });
  beforeEach(async () => {
    setContainer({ config: db.config, driver: db.driver, logger, env, writeMetrics: () => {} });
    await db.query(`TRUNCATE "${db.schema}".inbox, "${db.schema}".outbox, "${db.schema}".queuebox_maintenance`);
  });
  after(async () => {
    setContainer(undefined);
    await db.drop();
  });
  const pass = () =>
    runRelayPass({
      config: db.config, driver: db.driver, logger,
      metrics: new QueueBoxMetrics({ namespace: 'QueueBox', serviceName: 'test', write: () => {} }),
      deadline: createDeadline(fakeLambdaContext({ timeoutMs: 20_000 }), db.config.lambda.deadlineMarginMs),
      mode: 'drain',
    });
  const rows = () => db.query<{ state: string; last_error: string | null }>(`SELECT state, last_error FROM "${db.schema}".inbox ORDER BY sequence`);

  it('HTTP: refused at receipt with 400 invalid_field and the reason; nothing is stored', async () => {
    const body = JSON.stringify({ type: '   ' });
    const answer = await httpHandler(apiGatewayV2Event('/inbox/bare', body, { authorization: `Bearer ${env.SHOP_TOKEN}`, 'x-idempotency-key': 'blank-1' }), ctx());
    assert.equal(answer.statusCode, 400, answer.body);
    assert.match((JSON.parse(answer.body ?? '') as { error: string }).error, /^event type gives no topic: topic template "\{\{ eventType \}\}" rendered an empty topic for source bare$/);
    assert.deepEqual(await rows(), []);
  });

  it('HTTP: a message whose event type renders a topic is answered 202 and forwarded', async () => {
    const body = JSON.stringify({ type: ' created ' });
    const answer = await httpHandler(apiGatewayV2Event('/inbox/bare', body, { authorization: `Bearer ${env.SHOP_TOKEN}`, 'x-idempotency-key': 'typed-1' }), ctx());
    assert.equal(answer.statusCode, 202, answer.body);
    await pass();
    assert.deepEqual((await rows()).map((r) => r.state), ['processed']);
    assert.deepEqual(await db.query(`SELECT topic FROM "${db.schema}".outbox`), [{ topic: 'created' }]);
  });

  it('SQS: the record is stored dead at receipt with the reason, not pending to die at the relay', async () => {
    const result = await sqsHandler({ Records: [sqsRecord('m-1', JSON.stringify({ id: 'blank-2', type: '\t \n' }), 'feed')] }, ctx());
    assert.deepEqual(result.batchItemFailures, []);
    const stored = await rows();
    assert.deepEqual(stored.map((r) => r.state), ['dead'], 'a record the relay cannot forward is stored dead at receipt');
    assert.match(stored[0]!.last_error ?? '', /event type gives no topic: .*rendered an empty topic for source feed/);
    await pass();
    assert.deepEqual(await db.query(`SELECT id FROM "${db.schema}".outbox`), []);
  });
});
