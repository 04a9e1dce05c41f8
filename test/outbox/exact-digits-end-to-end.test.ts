/**
 * Numbers keep every digit end to end: a webhook body with a 23-digit integer and a 34-digit
 * decimal goes through the HTTP receiver handler, the relay handler and the outbox poller handler
 * (real SQS destination and SDK to fauxqs) and reaches the queue body with the digits as sent.
 * On EventBridge (real destination and SDK to the local PutEvents endpoint) every digit of an
 * integer within the signed 64-bit range `PutEvents` accepts (beyond 2^53 too) and of a decimal
 * arrives in the event `Detail`; a row with an integer outside that range is dead at once, with a
 * reason naming the limit. So does a row an adopter inserts with plain SQL, and a pull worker sees
 * the digits in `payloadText`.
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import { DeleteMessageCommand, ReceiveMessageCommand, SQSClient, type Message } from '@aws-sdk/client-sqs';
import type { APIGatewayProxyEventV2 } from 'aws-lambda';
import { startFauxqs, type FauxqsServer } from 'fauxqs';
import { handler as httpHandler } from '../../functions/inbox-http.ts';
import { handler as relayHandler } from '../../functions/inbox-relay.ts';
import { createOutboxPoller } from '../../functions/outbox-poller.ts';
import type { Driver } from '../../lib/db/driver.ts';
import { createDestinations } from '../../lib/destinations/create-destinations.ts';
import { runRelayPass } from '../../lib/inbox/relay-pass.ts';
import { startLocalEventBridge, type LocalEventBridge } from '../../lib/local/local-eventbridge.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import { createPullWorker } from '../../lib/pull/pull-worker.ts';
import { setContainer } from '../../lib/runtime/container.ts';
import { createDeadline } from '../../lib/runtime/deadline.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { fakeLambdaContext } from '../helpers/lambda-context.ts';
import { apiGatewayV2Event } from '../helpers/api-gateway-event.ts';

const credentials = { accessKeyId: 'test', secretAccessKey: 'test' };
const env = { API_TOKEN: 'token-123-0000000' };
const BIG = '12345678901234567890123';
const FINE = '0.1000000000000000055511151231257827';
const NEGATIVE = '-98765432109876543210987654321';
/** Beyond double precision (2^53 + 1), within a signed 64-bit long. */
const ODD = '9007199254740993';
/** The smallest signed 64-bit long. */
const INT64_MIN = '-9223372036854775808';
/** The reason of an EventBridge row with `BIG` in its payload. */
const OUT_OF_RANGE = `event detail has the integer ${BIG}, outside the signed 64-bit range EventBridge PutEvents accepts (-9223372036854775808 to 9223372036854775807)`;

/** The body a sender posts; every number is beyond double precision. */
function webhookBody(id: string): string {
  return `{"id": "${id}", "amount": ${BIG}, "ratio": ${FINE}, "nested": {"balances": [${NEGATIVE}, 1]}}`;
}

/** A body EventBridge accepts: beyond double precision, integers within 64 bits. */
function eventBody(id: string): string {
  return `{"id": "${id}", "amount": ${ODD}, "ratio": ${FINE}, "nested": {"balances": [${INT64_MIN}, 1]}}`;
}

/** The digits, each a whole JSON number token in `text` (not a prefix of a longer or rounded one). */
function assertDigits(text: string, what: string, numbers = [BIG, FINE, NEGATIVE]): void {
  for (const digits of numbers) {
    assert.match(text, new RegExp(`[:\\[\\s]${digits.replace(/[.-]/g, '\\$&')}[,}\\]]`), `${what} carries ${digits} exactly: ${text}`);
  }
}
const assertEventDigits = (text: string, what: string) => assertDigits(text, what, [ODD, FINE, INT64_MIN]);

function post(path: string, body: string): APIGatewayProxyEventV2 {
  return apiGatewayV2Event(path, body, { authorization: `Bearer ${env.API_TOKEN}`, 'content-type': 'application/json' });
}

async function receiveAll(client: SQSClient, queueUrl: string): Promise<Message[]> {
  const out: Message[] = [];
  for (;;) {
    const { Messages = [] } = await client.send(new ReceiveMessageCommand({ QueueUrl: queueUrl, MaxNumberOfMessages: 10, VisibilityTimeout: 60 }));
    if (Messages.length === 0) return out;
    out.push(...Messages);
    for (const m of Messages) await client.send(new DeleteMessageCommand({ QueueUrl: queueUrl, ReceiptHandle: m.ReceiptHandle! }));
  }
}

describe('payload numbers keep every digit from the webhook to SQS, EventBridge and pull workers', () => {
  let sqs: FauxqsServer;
  let bus: LocalEventBridge;
  let db: TestDatabase;
  let queueUrl: string;
  let client: SQSClient;
  const auth = { type: 'bearer', tokenEnv: 'API_TOKEN' } as const;
  before(async () => {
    sqs = await startFauxqs({ port: 0, logger: false });
    const endpoint = `http://127.0.0.1:${sqs.port}`;
    queueUrl = sqs.createQueue('exact-digits').queueUrl;
    client = new SQSClient({ endpoint, region: 'us-east-1', credentials });
    bus = await startLocalEventBridge({ buses: ['digits-bus'] });
    db = await createTestDatabase({
      inbox: {
        sources: {
          payments: { type: 'http', path: '/payments', auth, idempotencyKeyPath: '$.id', topicTemplate: 'sqs.{{ source }}' },
          ledger: { type: 'http', path: '/ledger', auth, idempotencyKeyPath: '$.id', topicTemplate: 'eb.{{ source }}' },
          shop: { type: 'http', path: '/shop', auth, idempotencyKeyPath: '$.id', consumption: 'pull' },
        },
      },
      destinations: {
        queue: { type: 'sqs', queueUrl, endpoint, region: 'us-east-1' },
        events: { type: 'eventbridge', eventBusName: 'digits-bus', source: 'shop.ledger', endpoint: bus.endpoint, region: 'us-east-1' },
      },
      outbox: { routes: [{ topicPattern: 'sqs.**', destination: 'queue' }, { topicPattern: 'eb.**', destination: 'events' }], pollIntervalMs: 10 },
      lambda: { deadlineMarginMs: 1000 },
    });
    const logger = createLogger({ serviceName: 'test', logLevel: 'SILENT' });
    setContainer({ config: db.config, driver: db.driver, logger, env, writeMetrics: () => {} });
  });
  after(async () => {
    setContainer(undefined);
    client.destroy();
    await db.drop();
    await bus.stop();
    await sqs.stop();
  });
  beforeEach(async () => {
    await db.query(`DELETE FROM "${db.schema}".outbox`);
    await db.query(`DELETE FROM "${db.schema}".inbox`);
  });

  const poller = createOutboxPoller({ buildDestinations: (container) => createDestinations(container.config, { clientOverrides: { credentials } }) });
  const runPoller = () => poller({ source: 'aws.events' }, fakeLambdaContext({ timeoutMs: 2_500 }));

  it('relays a webhook to the outbox and delivers it to SQS (body) and EventBridge (Detail data) with the digits as sent', async () => {
    for (const [path, body] of [['/inbox/payments', webhookBody('pay-1')], ['/inbox/ledger', eventBody('led-1')]] as const) {
      const answer = await httpHandler(post(path, body), fakeLambdaContext({ timeoutMs: 3_000 }));
      assert.equal(answer.statusCode, 202, `${path}: ${answer.body}`);
    }
    const relayed = await relayHandler({}, fakeLambdaContext({ timeoutMs: 2_500 }));
    assert.equal(relayed.forwarded, 2);
    const stored = await db.query<{ topic: string; payload: string }>(`SELECT topic, payload::text AS payload FROM "${db.schema}".outbox ORDER BY topic`);
    assert.deepEqual(stored.map((r) => r.topic), ['eb.ledger', 'sqs.payments']);
    assertEventDigits(stored[0]!.payload, 'outbox row eb.ledger');
    assertDigits(stored[1]!.payload, 'outbox row sqs.payments');

    const summary = await runPoller();
    assert.equal(summary.sent, 2);

    const messages = await receiveAll(client, queueUrl);
    assert.equal(messages.length, 1);
    assertDigits(messages[0]!.Body!, 'SQS body');
    assert.equal((JSON.parse(messages[0]!.Body!) as { id: string }).id, 'pay-1');

    const events = bus.events('digits-bus');
    assert.equal(events.length, 1);
    const detail = events[0]!.detailText;
    assertEventDigits(detail, 'EventBridge Detail');
    const [, dataText] = /"data":(.*)}$/s.exec(detail) ?? [];
    assert.equal(dataText, stored.find((r) => r.topic === 'eb.ledger')!.payload, 'data is the stored payload text verbatim');
    const metadata = events[0]!.detail.metadata as { topic: string; headers: Record<string, string> };
    assert.equal(metadata.topic, 'eb.ledger');
    assert.equal(metadata.headers['x-source'], 'ledger');
  });

  it('keeps the digits when the batched forward fails and the relay forwards row by row', async () => {
    for (const id of ['pay-2', 'pay-3']) {
      const answer = await httpHandler(post('/inbox/payments', webhookBody(id)), fakeLambdaContext({ timeoutMs: 3_000 }));
      assert.equal(answer.statusCode, 202, answer.body);
    }
    let batchedCalls = 0;
    const failingBatch: Driver = Object.create(db.newDriver(), {
      inboxForwardMany: {
        value: async () => {
          batchedCalls++;
          throw new Error('batched forward refused');
        },
      },
    });
    const logger = createLogger({ serviceName: 'test', logLevel: 'SILENT' });
    const metrics = new QueueBoxMetrics({ namespace: 'QueueBox', serviceName: 'test', write: () => {} });
    const relayed = await runRelayPass({ config: db.config, driver: failingBatch, logger, metrics, deadline: createDeadline(fakeLambdaContext({ timeoutMs: 20_000 }), 1000), mode: 'drain' });
    assert.equal(batchedCalls, 1, 'the batched forward was tried first');
    assert.equal(relayed.forwarded, 2);
    const stored = await db.query<{ payload: string }>(`SELECT payload::text AS payload FROM "${db.schema}".outbox`);
    assert.equal(stored.length, 2);
    for (const row of stored) assertDigits(row.payload, 'outbox row forwarded row by row');
    assert.equal((await runPoller()).sent, 2);
    const messages = await receiveAll(client, queueUrl);
    assert.deepEqual(messages.map((m) => (JSON.parse(m.Body!) as { id: string }).id).sort(), ['pay-2', 'pay-3']);
    for (const m of messages) assertDigits(m.Body!, 'SQS body');
  });

  it('dead-letters at once a webhook whose integer is outside 64 bits for EventBridge, naming the limit, while SQS takes the same body', async () => {
    for (const [path, id] of [['/inbox/payments', 'pay-9'], ['/inbox/ledger', 'led-9']] as const) {
      const answer = await httpHandler(post(path, webhookBody(id)), fakeLambdaContext({ timeoutMs: 3_000 }));
      assert.equal(answer.statusCode, 202, `${path}: ${answer.body}`);
    }
    assert.equal((await relayHandler({}, fakeLambdaContext({ timeoutMs: 2_500 }))).forwarded, 2);
    const before = bus.requests;
    const summary = await runPoller();
    assert.deepEqual([summary.sent, summary.dead], [1, 1]);
    const rows = await db.query<{ topic: string; state: string; attempt: number; last_error: string | null }>(
      `SELECT topic, state, attempt, last_error FROM "${db.schema}".outbox ORDER BY topic`,
    );
    assert.deepEqual(rows.map((r) => [r.topic, r.state, r.attempt]), [['eb.ledger', 'dead', 0], ['sqs.payments', 'sent', 0]]);
    assert.equal(rows[0]!.last_error, `permanent failure, not retried: destination events (EventBridge bus digits-bus): ${OUT_OF_RANGE}`);
    assert.equal(bus.requests, before, 'the row was not sent to EventBridge');
    const messages = await receiveAll(client, queueUrl);
    assert.equal(messages.length, 1);
    assertDigits(messages[0]!.Body!, 'SQS body');
  });

  it('delivers a row inserted with plain SQL with exactly its digits', async () => {
    await db.query(
      `INSERT INTO "${db.schema}".outbox (topic, payload) VALUES ('sqs.plain', $1::jsonb), ('eb.plain', $2::jsonb), ('eb.big', $1::jsonb)`,
      [webhookBody('plain-1'), eventBody('plain-2')],
    );
    const summary = await runPoller();
    assert.deepEqual([summary.sent, summary.dead], [2, 1]);
    const messages = await receiveAll(client, queueUrl);
    assert.equal(messages.length, 1);
    assertDigits(messages[0]!.Body!, 'SQS body');
    const events = bus.events('digits-bus').filter((e) => e.detailType === 'eb.plain');
    assert.equal(events.length, 1);
    assertEventDigits(events[0]!.detailText, 'EventBridge Detail');
    const [big] = await db.query<{ state: string; last_error: string }>(`SELECT state, last_error FROM "${db.schema}".outbox WHERE topic = 'eb.big'`);
    assert.deepEqual(big, { state: 'dead', last_error: `permanent failure, not retried: destination events (EventBridge bus digits-bus): ${OUT_OF_RANGE}` });
  });

  it('gives a pull worker the payload text with the digits next to the parsed payload', async () => {
    const answer = await httpHandler(post('/inbox/shop', webhookBody('shop-1')), fakeLambdaContext({ timeoutMs: 3_000 }));
    assert.equal(answer.statusCode, 202, answer.body);
    const seen: Array<{ text: string; id: unknown }> = [];
    const worker = createPullWorker({
      driver: db.driver,
      config: db.config,
      source: 'shop',
      metrics: false,
      handler: async (message) => {
        seen.push({ text: message.payloadText, id: (message.payload as { id: unknown }).id });
      },
    });
    const summary = await worker.runOnce();
    assert.equal(summary.completed, 1);
    assert.equal(seen.length, 1);
    assert.equal(seen[0]!.id, 'shop-1');
    assertDigits(seen[0]!.text, 'payloadText');
  });
});
