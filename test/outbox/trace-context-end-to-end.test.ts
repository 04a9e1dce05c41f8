/**
 * Trace context end to end, on the real PostgreSQL: `enqueue` records the caller's OpenTelemetry
 * span (through the real `@opentelemetry/api` and its AsyncLocalStorage context manager) or the
 * Lambda invocation's `_X_AMZN_TRACE_ID`; the HTTP and SQS inbox receivers record the sender's
 * headers and the relay copies them to the outbox row; the poller publishes them through the real
 * AWS SDK clients — to SQS (the fauxqs emulator: `traceparent` and `tracestate` message attributes
 * as received; the `AWSTraceHeader` system attribute as sent, since fauxqs drops system
 * attributes) and to EventBridge (the local PutEvents endpoint:
 * `TraceHeader` of the entry, `traceparent` in the envelope metadata). Malformed headers are
 * dropped: the message is stored and delivered without them.
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import { context, createTraceState, ROOT_CONTEXT, trace, TraceFlags } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { DeleteMessageCommand, ReceiveMessageCommand, SQSClient, type Message } from '@aws-sdk/client-sqs';
import type { SQSRecord } from 'aws-lambda';
import { startFauxqs, type FauxqsServer } from 'fauxqs';
import { createDestinations } from '../../lib/destinations/create-destinations.ts';
import { createHttpReceiver } from '../../lib/inbox/http-receiver.ts';
import { runRelayPass } from '../../lib/inbox/relay-pass.ts';
import { createSqsReceiver } from '../../lib/inbox/sqs-receiver.ts';
import { startLocalEventBridge, type LocalEventBridge } from '../../lib/local/local-eventbridge.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import { enqueue } from '../../lib/outbox/enqueue.ts';
import { runOutboxPass } from '../../lib/outbox/outbox-pass.ts';
import { createRouter } from '../../lib/outbox/routes.ts';
import { createDeadline } from '../../lib/runtime/deadline.ts';
import { apiGatewayV2Event } from '../helpers/api-gateway-event.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { fakeLambdaContext } from '../helpers/lambda-context.ts';
import { passFixture } from '../helpers/outbox-pass-fixture.ts';

const credentials = { accessKeyId: 'test', secretAccessKey: 'test' };
const TRACE_ID = '4bf92f3577b34da6a3ce929d0e0e4736';
const SPAN_ID = '00f067aa0ba902b7';
const TRACEPARENT = `00-${TRACE_ID}-${SPAN_ID}-01`;
const XRAY_OF_TRACEPARENT = 'Root=1-4bf92f35-77b34da6a3ce929d0e0e4736;Parent=00f067aa0ba902b7;Sampled=1';
const LAMBDA_XRAY = 'Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1;Lineage=1:a87bd80c:0';
const TRACEPARENT_OF_LAMBDA = '00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01';

describe('trace context from the writer to SQS and EventBridge', () => {
  let server: FauxqsServer;
  let bus: LocalEventBridge;
  let db: TestDatabase;
  let queueUrl: string;
  let reader: SQSClient;
  const logger = createLogger({ serviceName: 'test', logLevel: 'SILENT' });
  const contextManager = new AsyncLocalStorageContextManager();
  before(async () => {
    context.setGlobalContextManager(contextManager.enable());
    server = await startFauxqs({ port: 0, logger: false });
    const endpoint = `http://127.0.0.1:${server.port}`;
    queueUrl = server.createQueue('traced-events').queueUrl;
    reader = new SQSClient({ endpoint, region: 'us-east-1', credentials });
    bus = await startLocalEventBridge({ buses: ['traced-bus'] });
    db = await createTestDatabase({
      destinations: {
        queue: { type: 'sqs', queueUrl, endpoint, region: 'us-east-1' },
        bus: { type: 'eventbridge', eventBusName: 'traced-bus', source: 'shop.orders', endpoint: bus.endpoint, region: 'us-east-1' },
      },
      outbox: { routes: [{ topicPattern: 'bus.**', destination: 'bus' }, { topicPattern: '**', destination: 'queue' }], pollIntervalMs: 10 },
      inbox: {
        sources: {
          hooks: { type: 'http', path: '/hooks', auth: { type: 'none' }, topicTemplate: '{{ source }}.received' },
          'orders-queue': { type: 'sqs', topicTemplate: '{{ source }}.received' },
        },
      },
    });
  });
  after(async () => {
    reader.destroy();
    await db.drop();
    await bus.stop();
    await server.stop();
    context.disable();
  });
  beforeEach(async () => {
    delete process.env._X_AMZN_TRACE_ID;
    await db.query(`TRUNCATE "${db.schema}".outbox, "${db.schema}".inbox`);
  });

  /** Enqueues one message in its own transaction of the caller. */
  async function enqueueOne(topic: string): Promise<string> {
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      const id = await enqueue(client, { topic, payload: { topic } }, { schema: db.schema });
      await client.query('COMMIT');
      return id;
    } finally {
      client.release();
    }
  }

  const storedTrace = async (table: 'outbox' | 'inbox') =>
    (await db.query<{ trace_context: unknown }>(`SELECT trace_context FROM "${db.schema}".${table} ORDER BY sequence`)).map((r) => r.trace_context);

  /**
   * The entries of every `SendMessageBatch` request the SQS client sent, as serialized on the wire.
   * fauxqs keeps message attributes but not message system attributes (it never returns
   * `AWSTraceHeader`), so `AWSTraceHeader` is read from the request, the rest from the queue.
   */
  let sentEntries: Array<{ MessageBody: string; MessageSystemAttributes?: { AWSTraceHeader?: { DataType: string; StringValue: string } } }> = [];
  const recordingSqsClient = (config: { endpoint?: string; region?: string }) => {
    const client = new SQSClient({ endpoint: config.endpoint, region: config.region, credentials });
    client.middlewareStack.add(
      (next) => async (args) => {
        const raw = (args.request as { body?: unknown }).body;
        const body = raw instanceof Uint8Array ? new TextDecoder().decode(raw) : typeof raw === 'string' ? raw : '';
        if (body.includes('"Entries"')) sentEntries.push(...(JSON.parse(body) as { Entries: typeof sentEntries }).Entries);
        return next(args);
      },
      { step: 'finalizeRequest', name: 'recordSendMessageBatch' },
    );
    return client;
  };
  const awsTraceHeaderSent = (body: (text: string) => boolean) => sentEntries.find((e) => body(e.MessageBody))?.MessageSystemAttributes?.AWSTraceHeader;

  /** One drained outbox pass with the SDK clients built as the poller builds them (the SQS one recording its requests). */
  async function publish(): Promise<void> {
    sentEntries = [];
    const destinations = createDestinations(db.config, { clientOverrides: { credentials }, sqsClient: recordingSqsClient });
    const fixture = passFixture(db, { destinations: [] });
    const summary = await runOutboxPass({ ...fixture, destinations, router: createRouter(db.config.outbox.routes, Object.fromEntries(destinations)) });
    assert.equal(summary.dead + summary.retried, 0);
  }

  async function receiveAll(): Promise<Message[]> {
    const out: Message[] = [];
    for (;;) {
      const { Messages = [] } = await reader.send(
        new ReceiveMessageCommand({ QueueUrl: queueUrl, MaxNumberOfMessages: 10, MessageAttributeNames: ['All'], MessageSystemAttributeNames: ['All'], VisibilityTimeout: 60 }),
      );
      if (Messages.length === 0) return out;
      out.push(...Messages);
      for (const m of Messages) await reader.send(new DeleteMessageCommand({ QueueUrl: queueUrl, ReceiptHandle: m.ReceiptHandle! }));
    }
  }

  const relay = () =>
    runRelayPass({
      config: db.config,
      driver: db.driver,
      logger,
      metrics: new QueueBoxMetrics({ namespace: 'QueueBox', serviceName: 'test', write: () => {} }),
      deadline: createDeadline(fakeLambdaContext({ timeoutMs: 20_000 }), db.config.lambda.deadlineMarginMs),
      mode: 'drain',
    });

  it('enqueue inside an active OpenTelemetry span records its traceparent and tracestate; SQS receives AWSTraceHeader and the traceparent attribute', async () => {
    process.env._X_AMZN_TRACE_ID = LAMBDA_XRAY; // the span wins over the invocation's header
    const span = trace.setSpanContext(ROOT_CONTEXT, { traceId: TRACE_ID, spanId: SPAN_ID, traceFlags: TraceFlags.SAMPLED, traceState: createTraceState('vendor=abc,rojo=1') });
    const id = await context.with(span, () => enqueueOne('orders.created'));
    assert.deepEqual(await storedTrace('outbox'), [{ traceparent: TRACEPARENT, tracestate: 'vendor=abc,rojo=1' }]);

    await publish();
    const [received, ...rest] = await receiveAll();
    assert.equal(rest.length, 0);
    assert.equal(received!.MessageAttributes?.['X-Message-Id']?.StringValue, id);
    assert.deepEqual(awsTraceHeaderSent(() => true), { DataType: 'String', StringValue: XRAY_OF_TRACEPARENT });
    assert.equal(received!.MessageAttributes?.traceparent?.StringValue, TRACEPARENT);
    assert.equal(received!.MessageAttributes?.tracestate?.StringValue, 'vendor=abc,rojo=1');
  });

  it('enqueue with only the Lambda invocation\'s _X_AMZN_TRACE_ID records that header, read at each call; EventBridge gets it as TraceHeader', async () => {
    process.env._X_AMZN_TRACE_ID = LAMBDA_XRAY;
    await enqueueOne('bus.order.paid');
    const next = 'Root=1-66a0b2c4-0123456789abcdef01234567;Parent=1111111111111111;Sampled=0';
    process.env._X_AMZN_TRACE_ID = next; // the next invocation
    await enqueueOne('bus.order.shipped');
    delete process.env._X_AMZN_TRACE_ID;
    await enqueueOne('bus.order.untraced');
    assert.deepEqual(await storedTrace('outbox'), [{ awsTraceHeader: LAMBDA_XRAY }, { awsTraceHeader: next }, null]);

    const requestsBefore = bus.requests;
    await publish();
    assert.ok(bus.requests > requestsBefore);
    const events = new Map(bus.events('traced-bus').map((e) => [e.detailType, e]));
    assert.equal(events.get('bus.order.paid')?.traceHeader, LAMBDA_XRAY);
    assert.equal((events.get('bus.order.paid')?.detail.metadata as Record<string, unknown>).traceparent, TRACEPARENT_OF_LAMBDA);
    assert.equal(events.get('bus.order.shipped')?.traceHeader, next);
    assert.equal(events.get('bus.order.untraced')?.traceHeader, undefined);
    assert.equal('traceparent' in (events.get('bus.order.untraced')?.detail.metadata as Record<string, unknown>), false);
  });

  it('the relay carries an HTTP sender\'s traceparent and API Gateway\'s X-Amzn-Trace-Id to the outbox row and on to SQS; a malformed header is dropped', async () => {
    const receive = createHttpReceiver({ config: db.config, driver: db.driver, logger, env: {} });
    const metrics = new QueueBoxMetrics({ namespace: 'QueueBox', serviceName: 'test', write: () => {} });
    const answers = [
      await receive(apiGatewayV2Event('/inbox/hooks', '{"n":1}', { 'x-idempotency-key': 'h-1', traceparent: TRACEPARENT, tracestate: 'vendor=abc', 'x-amzn-trace-id': LAMBDA_XRAY }), metrics),
      await receive(apiGatewayV2Event('/inbox/hooks', '{"n":2}', { 'x-idempotency-key': 'h-2', 'x-amzn-trace-id': 'Root=1-5759e988-bd862e3fe1be46a994272793' }), metrics),
      await receive(apiGatewayV2Event('/inbox/hooks', '{"n":3}', { 'x-idempotency-key': 'h-3', traceparent: `00-${'a'.repeat(32)}-${'b'.repeat(16)}-01${'x'.repeat(20_000)}`, 'x-amzn-trace-id': `Root=1-5759e988-bd862e3fe1be46a994272793;Evil=<script>` }), metrics),
    ];
    assert.deepEqual(answers.map((a) => a.statusCode), [202, 202, 202], 'a malformed trace header never refuses the message');
    assert.deepEqual(await storedTrace('inbox'), [
      { traceparent: TRACEPARENT, tracestate: 'vendor=abc', awsTraceHeader: LAMBDA_XRAY },
      { awsTraceHeader: 'Root=1-5759e988-bd862e3fe1be46a994272793' },
      null,
    ]);

    assert.equal((await relay()).forwarded, 3);
    assert.deepEqual(await storedTrace('outbox'), await storedTrace('inbox'));

    await publish();
    const received = new Map((await receiveAll()).map((m) => [JSON.parse(m.Body!).n as number, m]));
    assert.equal(received.size, 3);
    assert.equal(awsTraceHeaderSent((b) => JSON.parse(b).n === 1)?.StringValue, LAMBDA_XRAY);
    assert.equal(received.get(1)?.MessageAttributes?.traceparent?.StringValue, TRACEPARENT);
    assert.equal(received.get(1)?.MessageAttributes?.tracestate?.StringValue, 'vendor=abc');
    assert.equal(awsTraceHeaderSent((b) => JSON.parse(b).n === 2)?.StringValue, 'Root=1-5759e988-bd862e3fe1be46a994272793');
    assert.equal(received.get(2)?.MessageAttributes?.traceparent, undefined, 'a Root without Parent makes no traceparent');
    assert.equal(awsTraceHeaderSent((b) => JSON.parse(b).n === 3), undefined);
    assert.equal(received.get(3)?.MessageAttributes?.traceparent, undefined);
  });

  it('the relay carries an SQS record\'s AWSTraceHeader and traceparent attribute to the outbox row; malformed ones are dropped', async () => {
    const record = (messageId: string, attributes: Partial<SQSRecord['attributes']>, messageAttributes: Record<string, string>): SQSRecord => ({
      messageId,
      receiptHandle: `rh-${messageId}`,
      body: JSON.stringify({ messageId }),
      attributes: { ApproximateReceiveCount: '1', SentTimestamp: '0', SenderId: 's', ApproximateFirstReceiveTimestamp: '0', ...attributes },
      messageAttributes: Object.fromEntries(Object.entries(messageAttributes).map(([k, v]) => [k, { stringValue: v, dataType: 'String' }])),
      md5OfBody: '',
      eventSource: 'aws:sqs',
      eventSourceARN: 'arn:aws:sqs:us-east-1:000000000000:orders-queue',
      awsRegion: 'us-east-1',
    });
    const receive = createSqsReceiver({ config: db.config, driver: db.driver, logger });
    const answer = await receive(
      {
        Records: [
          record('m-1', { AWSTraceHeader: LAMBDA_XRAY }, { traceparent: TRACEPARENT }),
          record('m-2', {}, { Traceparent: TRACEPARENT_OF_LAMBDA }),
          record('m-3', { AWSTraceHeader: 'x'.repeat(10_000) }, { traceparent: 'not-a-traceparent' }),
        ],
      },
      new QueueBoxMetrics({ namespace: 'QueueBox', serviceName: 'test', write: () => {} }),
    );
    assert.deepEqual(answer.batchItemFailures, []);
    assert.deepEqual(await storedTrace('inbox'), [{ traceparent: TRACEPARENT, awsTraceHeader: LAMBDA_XRAY }, { traceparent: TRACEPARENT_OF_LAMBDA }, null]);

    assert.equal((await relay()).forwarded, 3);
    assert.deepEqual(await storedTrace('outbox'), [{ traceparent: TRACEPARENT, awsTraceHeader: LAMBDA_XRAY }, { traceparent: TRACEPARENT_OF_LAMBDA }, null]);

    await publish();
    const received = new Map((await receiveAll()).map((m) => [JSON.parse(m.Body!).messageId as string, m]));
    assert.equal(received.size, 3);
    assert.equal(awsTraceHeaderSent((b) => b.includes('m-1'))?.StringValue, LAMBDA_XRAY, 'the stored X-Ray header, Lineage kept');
    assert.equal(received.get('m-1')?.MessageAttributes?.traceparent?.StringValue, TRACEPARENT);
    assert.equal(awsTraceHeaderSent((b) => b.includes('m-2'))?.StringValue, LAMBDA_XRAY.replace(';Lineage=1:a87bd80c:0', ''), 'derived from the traceparent');
    assert.equal(received.get('m-2')?.MessageAttributes?.traceparent?.StringValue, TRACEPARENT_OF_LAMBDA);
    assert.equal(awsTraceHeaderSent((b) => b.includes('m-3')), undefined);
    assert.equal(received.get('m-3')?.MessageAttributes?.traceparent, undefined);
  });
});
