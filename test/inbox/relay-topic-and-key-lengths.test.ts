/**
 * Topic and key lengths from receipt to the outbox: the receivers accept only messages whose
 * rendered topic and outbox key fit the outbox's 255-character columns, and the relay counts
 * them as those columns do (PostgreSQL: code points, an emoji is one; SQL Server: UTF-16 code
 * units, an emoji is two). So a message answered 202 is one the relay forwards, and one it could
 * never forward is refused at receipt (HTTP 400 `invalid_field`; SQS: stored dead with the reason).
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import type { SQSRecord } from 'aws-lambda';
import { handler as httpHandler } from '../../functions/inbox-http.ts';
import { handler as sqsHandler } from '../../functions/inbox-sqs.ts';
import { parseConfig } from '../../lib/config/load-config.ts';
import { ValidationError } from '../../lib/errors.ts';
import { InboxRejectionError } from '../../lib/inbox/inbox-rejection.ts';
import { checkRelayable } from '../../lib/inbox/relay-fit.ts';
import { runRelayPass } from '../../lib/inbox/relay-pass.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import { validateOutboxMessage } from '../../lib/outbox/validate-message.ts';
import { setContainer } from '../../lib/runtime/container.ts';
import { createDeadline } from '../../lib/runtime/deadline.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { fakeLambdaContext } from '../helpers/lambda-context.ts';
import { apiGatewayV2Event } from '../helpers/api-gateway-event.ts';

const env = { SHOP_TOKEN: 'shop-token-00000001' };
const ctx = () => fakeLambdaContext({ timeoutMs: 10_000 });
const logger = createLogger({ serviceName: 'test', logLevel: 'SILENT' });

function sqsRecord(messageId: string, body: string, queue: string): SQSRecord {
  return {
    messageId,
    receiptHandle: `rh-${messageId}`,
    body,
    attributes: { ApproximateReceiveCount: '1', SentTimestamp: '0', SenderId: 's', ApproximateFirstReceiveTimestamp: '0' },
    messageAttributes: {},
    md5OfBody: '',
    eventSource: 'aws:sqs',
    eventSourceARN: `arn:aws:sqs:eu-west-1:000000000000:${queue}`,
    awsRegion: 'eu-west-1',
  };
}

for (const outboxKey of ['aggregate', 'source-and-aggregate'] as const) {
  describe(`topic and key lengths from receipt to the outbox (outboxKey: ${outboxKey})`, () => {
    let db: TestDatabase;
    before(async () => {
      db = await createTestDatabase({
        inbox: {
          relay: { outboxKey },
          sources: {
            shop: { type: 'http', path: '/shop', auth: { type: 'bearer', tokenEnv: 'SHOP_TOKEN' }, eventTypePath: '$.type', aggregateIdPath: '$.order' },
            bare: { type: 'http', path: '/bare', auth: { type: 'bearer', tokenEnv: 'SHOP_TOKEN' }, eventTypePath: '$.type', topicTemplate: '{{ eventType }}' },
            later: { type: 'http', path: '/later', auth: { type: 'bearer', tokenEnv: 'SHOP_TOKEN' }, eventTypePath: '$.type', consumption: 'pull' },
            feed: { type: 'sqs', idempotencyKeyPath: '$.id', eventTypePath: '$.type' },
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

    const send = async (key: string, body: unknown, path = '/inbox/shop') => {
      const answer = await httpHandler(apiGatewayV2Event(path, JSON.stringify(body), { authorization: `Bearer ${env.SHOP_TOKEN}`, 'x-idempotency-key': key }), ctx());
      return { status: answer.statusCode, error: (JSON.parse(answer.body ?? '{}') as { error?: string }).error };
    };
    const pass = () =>
      runRelayPass({
        config: db.config,
        driver: db.driver,
        logger,
        metrics: new QueueBoxMetrics({ namespace: 'QueueBox', serviceName: 'test', write: () => {} }),
        deadline: createDeadline(fakeLambdaContext({ timeoutMs: 20_000 }), db.config.lambda.deadlineMarginMs),
        mode: 'drain',
      });
    const inboxRows = () => db.query<{ idempotency_key: string; state: string; last_error: string | null }>(`SELECT idempotency_key, state, last_error FROM "${db.schema}".inbox ORDER BY sequence`);
    const outboxRows = () => db.query<{ topic: string; key: string | null }>(`SELECT topic, key FROM "${db.schema}".outbox ORDER BY sequence`);

    if (outboxKey === 'aggregate') {
      it('an aggregate id of 130 emoji (130 characters) is accepted and forwarded with that key', async () => {
        const order = '📦'.repeat(130);
        assert.equal((await send('k-emoji-agg', { type: 'created', order })).status, 202);
        await pass();
        assert.deepEqual((await inboxRows()).map((r) => [r.state, r.last_error]), [['processed', null]]);
        assert.deepEqual((await outboxRows()).map((r) => r.key), [order]);
      });
    }

    it('an event type of 130 emoji (130 characters) is accepted and forwarded as topic shop.<event type>', async () => {
      const type = '🔔'.repeat(130);
      assert.equal((await send('k-emoji-type', { type, order: 'o-1' })).status, 202);
      await pass();
      assert.deepEqual((await inboxRows()).map((r) => [r.state, r.last_error]), [['processed', null]]);
      assert.deepEqual((await outboxRows()).map((r) => r.topic), [`shop.${type}`]);
    });

    it('an event type whose topic is exactly 255 characters is accepted and forwarded', async () => {
      const type = 'e'.repeat(250);
      assert.equal((await send('k-fits', { type, order: 'o-2' })).status, 202);
      await pass();
      assert.deepEqual((await inboxRows()).map((r) => [r.state, r.last_error]), [['processed', null]]);
      assert.deepEqual((await outboxRows()).map((r) => r.topic.length), [255]);
    });

    it('HTTP: an event type whose topic would exceed 255 characters is refused with 400 invalid_field naming the topic; nothing is stored', async () => {
      const answer = await send('k-long-type', { type: 'e'.repeat(255), order: 'o-3' });
      assert.equal(answer.status, 400);
      assert.match(answer.error ?? '', /event type is too long for its topic: "\{\{ source \}\}\.\{\{ eventType \}\}" renders a topic of 260 characters, and a topic is at most 255/);
      assert.deepEqual(await inboxRows(), []);
    });

    it('a source\'s own template counts: {{ eventType }} alone takes an event type of 255 characters', async () => {
      assert.equal((await send('k-bare', { type: 'e'.repeat(255) }, '/inbox/bare')).status, 202);
      await pass();
      assert.deepEqual((await outboxRows()).map((r) => r.topic.length), [255]);
    });

    it('a pull source is never relayed: its event type is not checked against a topic', async () => {
      assert.equal((await send('k-pull', { type: 'e'.repeat(255) }, '/inbox/later')).status, 202);
    });

    it('SQS: an event type whose topic would exceed 255 characters is stored dead with the reason; the batch is unaffected', async () => {
      const result = await sqsHandler({ Records: [sqsRecord('m-1', JSON.stringify({ id: 'long', type: 'e'.repeat(255) }), 'feed'), sqsRecord('m-2', JSON.stringify({ id: 'short', type: 'created' }), 'feed')] }, ctx());
      assert.deepEqual(result.batchItemFailures, []);
      const rows = await inboxRows();
      assert.deepEqual(rows.map((r) => [r.idempotency_key, r.state]), [['rejected:m-1', 'dead'], ['short', 'pending']]);
      assert.match(rows[0]!.last_error ?? '', /renders a topic of 260 characters, and a topic is at most 255/);
    });
  });
}

describe('outbox topic and key lengths as each database counts them', () => {
  const emoji = '🔔'.repeat(130);

  it('validateOutboxMessage: 130 emoji fit PostgreSQL\'s varchar(255) and not SQL Server\'s NVARCHAR(255) (260 UTF-16 code units)', () => {
    assert.equal(validateOutboxMessage({ topic: emoji, key: emoji, payload: {} }).topic, emoji);
    assert.equal(validateOutboxMessage({ topic: emoji, key: emoji, payload: {} }, 'postgres').key, emoji);
    assert.throws(() => validateOutboxMessage({ topic: emoji, payload: {} }, 'sqlserver'), (e: unknown) => e instanceof ValidationError && e.field === 'message.topic' && /at most 255 UTF-16 code units .* \(got 260\)/.test(e.message));
    assert.throws(() => validateOutboxMessage({ topic: 't', key: emoji, payload: {} }, 'sqlserver'), (e: unknown) => e instanceof ValidationError && e.field === 'message.key' && /\(got 260\)/.test(e.message));
    assert.throws(() => validateOutboxMessage({ topic: 'e'.repeat(256), payload: {} }), (e: unknown) => e instanceof ValidationError && /at most 255 characters \(got 256\)/.test(e.message));
  });

  it('checkRelayable: the rendered topic and the aggregate key count in the dialect\'s unit', () => {
    const config = parseConfig({ inbox: { relay: { outboxKey: 'aggregate' }, sources: { s: { type: 'http', path: '/s', auth: { type: 'none' } } } } });
    const source = config.inbox.sources['s']!;
    const fields = (eventType: string, aggregateId: string | null) => ({ idempotencyKey: 'k', eventType, aggregateId, correlationId: null, delayMs: 0 });
    checkRelayable('s', source, config.inbox, fields('🔔'.repeat(126), '📦'.repeat(127)), 'sqlserver');
    checkRelayable('s', source, config.inbox, fields('🔔'.repeat(253), '📦'.repeat(255)), 'postgres');
    assert.throws(() => checkRelayable('s', source, config.inbox, fields('🔔'.repeat(127), null), 'sqlserver'), (e: unknown) => e instanceof InboxRejectionError && e.reason === 'invalid_field' && /topic of 256 UTF-16 code units/.test(e.message));
    assert.throws(() => checkRelayable('s', source, config.inbox, fields('🔔'.repeat(254), null), 'postgres'), (e: unknown) => e instanceof InboxRejectionError && /topic of 256 characters/.test(e.message));
    assert.throws(() => checkRelayable('s', source, config.inbox, fields('x', '📦'.repeat(128)), 'sqlserver'), (e: unknown) => e instanceof InboxRejectionError && /outbox key: the key would be 256 UTF-16 code units/.test(e.message));
  });
});
