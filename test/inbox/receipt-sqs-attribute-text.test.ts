/**
 * The fields the relay's outbox row carries as delivery headers — idempotency key
 * (`x-idempotency-key`), event type (in the topic, `X-Topic`), aggregate id (in the key,
 * `X-Message-Key`) and correlation id (`X-Correlation-Id`) — are SQS message attribute values when
 * the row goes to an SQS queue, and SQS refuses characters outside #x9 | #xA | #xD | #x20–#xD7FF |
 * #xE000–#xFFFD | #x10000–#x10FFFF there. A push message with such a character in one of them is
 * refused at receipt (HTTP 400 `invalid_field`; SQS: stored dead with the reason) instead of being
 * answered 202 and then going dead at the destination. The payload is not checked at receipt: its
 * U+FFFE and U+FFFF, which SQS refuses raw in a body, are sent as JSON escapes (the same value).
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import { SQSClient, ReceiveMessageCommand } from '@aws-sdk/client-sqs';
import { startFauxqs, type FauxqsServer } from 'fauxqs';
import { handler as httpHandler } from '../../functions/inbox-http.ts';
import { handler as sqsHandler } from '../../functions/inbox-sqs.ts';
import { handler as relayHandler } from '../../functions/inbox-relay.ts';
import { createOutboxPoller } from '../../functions/outbox-poller.ts';
import { parseConfig } from '../../lib/config/load-config.ts';
import { createDestinations } from '../../lib/destinations/create-destinations.ts';
import { isValidSqsText } from '../../lib/destinations/sqs-message-attributes.ts';
import type { MessageFields } from '../../lib/inbox/extract-fields.ts';
import { InboxRejectionError } from '../../lib/inbox/inbox-rejection.ts';
import { checkRelayable } from '../../lib/inbox/relay-fit.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { setContainer } from '../../lib/runtime/container.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { fakeLambdaContext } from '../helpers/lambda-context.ts';
import { apiGatewayV2Event } from '../helpers/api-gateway-event.ts';
import { sqsRecord } from '../helpers/sqs-record.ts';

const credentials = { accessKeyId: 'test', secretAccessKey: 'test' };
const logger = createLogger({ serviceName: 'test', logLevel: 'SILENT' });
const ctx = () => fakeLambdaContext({ timeoutMs: 10_000 });

/** Characters SQS refuses in an attribute value, with their names in the refusal. */
const REFUSED: Array<[string, string]> = [['\u0001', 'U+0001'], ['\u001b', 'U+001B'], ['\u001f', 'U+001F'], ['\b', 'U+0008'], ['\uFFFE', 'U+FFFE'], ['\uFFFF', 'U+FFFF']];
/** The edges of what SQS accepts. */
const ACCEPTED = ['\t', '\n', '\r', ' ', '\u007f', '\uD7FF', '\uE000', '\uFFFD', '\u{10000}', '\u{10FFFF}', 'é', '😀'];

describe('checkRelayable: fields the relay sends as SQS message attributes', () => {
  const config = parseConfig({ inbox: { sources: { s: { type: 'http', path: '/s', auth: { type: 'none' } }, p: { type: 'http', path: '/p', auth: { type: 'none' }, consumption: 'pull' } } } });
  const fields = (over: Partial<MessageFields>): MessageFields => ({ idempotencyKey: 'k', eventType: 'paid', aggregateId: 'a', correlationId: 'c', delayMs: 0, ...over });
  const check = (over: Partial<MessageFields>, source = 's') => checkRelayable(source, config.inbox.sources[source]!, config.inbox, fields(over), 'postgres');

  it('the test set agrees with the SQS destination\'s own character test', () => {
    for (const [c] of REFUSED) assert.equal(isValidSqsText(`x${c}`), false, JSON.stringify(c));
    for (const c of ACCEPTED) assert.equal(isValidSqsText(`x${c}`), true, JSON.stringify(c));
  });

  for (const [field, what, attribute] of [
    ['idempotencyKey', 'idempotency key', 'x-idempotency-key'],
    ['eventType', 'event type', 'X-Topic'],
    ['aggregateId', 'aggregate id', 'X-Message-Key'],
    ['correlationId', 'correlation id', 'X-Correlation-Id'],
  ] as const) {
    it(`${what}: a character SQS refuses is invalid_field naming the field, the character and ${attribute}; the characters it accepts pass`, () => {
      for (const [c, name] of REFUSED) {
        assert.throws(
          () => check({ [field]: `v${c}w` }),
          (e: unknown) => e instanceof InboxRejectionError && e.reason === 'invalid_field' && e.message.startsWith(`${what} `) && e.message.includes(name) && e.message.includes(attribute),
          `${what} with ${name}`,
        );
      }
      for (const c of ACCEPTED) check({ [field]: `v${c}w` });
    });
  }

  it('a pull source is never relayed: its fields are not checked against SQS', () => {
    check({ idempotencyKey: 'k\u0001', eventType: 't\uFFFF', aggregateId: 'a\u0001', correlationId: 'c\u0001' }, 'p');
  });
});

describe('receipt refuses what SQS would refuse in a message attribute; what it accepts reaches the queue', () => {
  let sqs: FauxqsServer;
  let client: SQSClient;
  let queueUrl: string;
  let db: TestDatabase;
  const paths = { idempotencyKeyPath: '$.id', eventTypePath: '$.type', aggregateIdPath: '$.agg', correlationIdPath: '$.corr' };
  before(async () => {
    sqs = await startFauxqs({ port: 0, logger: false });
    const endpoint = `http://127.0.0.1:${sqs.port}`;
    queueUrl = sqs.createQueue('receipt-attributes').queueUrl;
    client = new SQSClient({ endpoint, region: 'us-east-1', credentials });
    db = await createTestDatabase({
      inbox: {
        sources: {
          hooks: { type: 'http', path: '/hooks', auth: { type: 'none' }, ...paths },
          later: { type: 'http', path: '/later', auth: { type: 'none' }, consumption: 'pull', ...paths },
          feed: { type: 'sqs', ...paths },
        },
      },
      destinations: { queue: { type: 'sqs', queueUrl, endpoint, region: 'us-east-1' } },
      outbox: { routes: [{ topicPattern: '**', destination: 'queue' }], pollIntervalMs: 10 },
      lambda: { deadlineMarginMs: 1000 },
    });
  });
  beforeEach(async () => {
    setContainer({ config: db.config, driver: db.driver, logger, env: {}, writeMetrics: () => {} });
    await db.query(`TRUNCATE "${db.schema}".inbox, "${db.schema}".outbox, "${db.schema}".queuebox_maintenance`);
  });
  after(async () => {
    setContainer(undefined);
    client.destroy();
    await db.drop();
    await sqs.stop();
  });

  const post = async (path: string, body: unknown) => {
    const answer = await httpHandler(apiGatewayV2Event(path, JSON.stringify(body), {}), ctx());
    return { status: answer.statusCode, error: (JSON.parse(answer.body ?? '{}') as { error?: string }).error };
  };
  const inboxRows = () => db.query<{ idempotency_key: string; state: string; last_error: string | null }>(`SELECT idempotency_key, state, last_error FROM "${db.schema}".inbox ORDER BY sequence`);
  const poller = createOutboxPoller({ buildDestinations: (container) => createDestinations(container.config, { clientOverrides: { credentials } }) });
  const deliver = async () => {
    await relayHandler({}, fakeLambdaContext({ timeoutMs: 2_500 }));
    return poller({ source: 'aws.events' }, fakeLambdaContext({ timeoutMs: 2_500 }));
  };
  const good = { id: 'evt_ok', type: 'paid', agg: 'A', corr: 'c-1' };

  for (const [field, what, value] of [
    ['id', 'idempotency key', 'evt_\u0001'],
    ['type', 'event type', 'paid\u001b[2J'],
    ['agg', 'aggregate id', 'B\u0001'],
    ['corr', 'correlation id', 'c-\uFFFF'],
  ] as const) {
    it(`HTTP: ${what} with a character SQS refuses is answered 400 invalid_field naming the field; nothing is stored`, async () => {
      const answer = await post('/inbox/hooks', { ...good, [field]: value });
      assert.equal(answer.status, 400);
      assert.match(answer.error ?? '', new RegExp(`^${what} .*SQS does not accept`));
      assert.deepEqual(await inboxRows(), []);
    });
  }

  it('SQS: a record whose fields hold a character SQS refuses is stored dead with the reason; the good record of the batch is stored', async () => {
    const result = await sqsHandler(
      {
        Records: [
          sqsRecord('m-key', JSON.stringify({ ...good, id: 'evt_\u0001' }), 'feed'),
          sqsRecord('m-type', JSON.stringify({ ...good, id: 'evt_t', type: 'paid\u001b[2J' }), 'feed'),
          sqsRecord('m-corr', JSON.stringify({ ...good, id: 'evt_c', corr: '\uFFFE' }), 'feed'),
          sqsRecord('m-good', JSON.stringify(good), 'feed'),
        ],
      },
      ctx(),
    );
    assert.deepEqual(result.batchItemFailures, []);
    const rows = await inboxRows();
    assert.deepEqual(rows.map((r) => [r.idempotency_key, r.state]), [['rejected:m-key', 'dead'], ['rejected:m-type', 'dead'], ['rejected:m-corr', 'dead'], ['evt_ok', 'pending']]);
    assert.match(rows[0]!.last_error ?? '', /^idempotency key contains U\+0001, which SQS does not accept in a message attribute value/);
    assert.match(rows[1]!.last_error ?? '', /^event type .*U\+001B, which SQS does not accept in a message attribute value/);
    assert.match(rows[2]!.last_error ?? '', /^correlation id contains U\+FFFE, which SQS does not accept in a message attribute value/);
  });

  it('a pull source takes them: its rows are never relayed', async () => {
    assert.equal((await post('/inbox/later', { ...good, id: 'evt_\u0001', type: 'x\uFFFF' })).status, 202);
  });

  it('fields at the edges of what SQS accepts are answered 202 and reach the queue as message attributes', async () => {
    // Not U+10000 and beyond, which SQS accepts (the unit test above) but the emulator refuses.
    const edge = '\t\u007f\uD7FF\uE000\uFFFDé';
    assert.equal((await post('/inbox/hooks', { id: `id${edge}`, type: `t${edge}`, agg: `a${edge}`, corr: `c${edge}` })).status, 202);
    const summary = await deliver();
    assert.deepEqual([summary.sent, summary.dead], [1, 0]);
    const { Messages = [] } = await client.send(new ReceiveMessageCommand({ QueueUrl: queueUrl, MaxNumberOfMessages: 10, MessageAttributeNames: ['All'] }));
    assert.equal(Messages.length, 1);
    const attributes = Messages[0]!.MessageAttributes ?? {};
    assert.equal(attributes['x-idempotency-key']?.StringValue, `id${edge}`);
    assert.equal(attributes['X-Topic']?.StringValue, `hooks.t${edge}`);
    assert.equal(attributes['X-Message-Key']?.StringValue, `hooks:a${edge}`);
    assert.equal(attributes['X-Correlation-Id']?.StringValue, `c${edge}`);
  });

  it('a payload holding U+FFFF, which SQS refuses raw, is accepted and delivered with it escaped: the same JSON value', async () => {
    assert.equal((await post('/inbox/hooks', { ...good, note: '\uFFFF' })).status, 202);
    const summary = await deliver();
    assert.deepEqual([summary.sent, summary.dead], [1, 0]);
    const { Messages = [] } = await client.send(new ReceiveMessageCommand({ QueueUrl: queueUrl, MaxNumberOfMessages: 10 }));
    assert.equal(Messages.length, 1);
    assert.ok(Messages[0]!.Body!.includes('"\\uffff"') && !Messages[0]!.Body!.includes('\uFFFF'), Messages[0]!.Body);
    assert.equal((JSON.parse(Messages[0]!.Body!) as { note: string }).note, '\uFFFF');
  });
});
