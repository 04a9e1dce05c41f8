/**
 * X-Ray tracing, off by default and on with `observability.tracing`. The test plays the Lambda
 * environment the X-Ray SDK expects (`AWS_EXECUTION_ENV`, `LAMBDA_TASK_ROOT`, a sampled
 * `_X_AMZN_TRACE_ID`) and the X-Ray daemon: a UDP socket at `AWS_XRAY_DAEMON_ADDRESS` that
 * receives the subsegments Powertools Tracer sends. The deployed poller handler delivers through
 * the real EventBridge client to the local endpoint; the trace shows the invocation, each
 * destination call and the SDK's `PutEvents` request.
 */
import assert from 'node:assert/strict';
import { createSocket, type Socket } from 'node:dgram';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { buildAll } from '../../infra/build.ts';
import { buildStackFragment } from '../../lib/serverless/stack.ts';
import { handler as pollerHandler } from '../../functions/outbox-poller.ts';
import { parseConfig } from '../../lib/config/load-config.ts';
import { startLocalEventBridge, type LocalEventBridge } from '../../lib/local/local-eventbridge.ts';
import { getContainer, setContainer } from '../../lib/runtime/container.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { fakeLambdaContext } from '../helpers/lambda-context.ts';
import { insertOutboxRows, inspectRows } from '../helpers/outbox-pass-fixture.ts';
import { captureStdout } from '../helpers/stdout-capture.ts';
import { waitUntil } from '../helpers/wait.ts';

const TRACE_ROOT = '1-5759e988-bd862e3fe1be46a994272793';
const LAMBDA_PARENT = '53995c3f42cd8ad8';

interface Subsegment {
  id: string;
  name: string;
  trace_id: string;
  parent_id: string;
  type?: string;
  namespace?: string;
  annotations?: Record<string, unknown>;
  metadata?: Record<string, Record<string, unknown>>;
  aws?: Record<string, unknown>;
  subsegments?: Subsegment[];
  fault?: boolean;
  error?: boolean;
}

describe('X-Ray tracing', () => {
  let db: TestDatabase;
  let bus: LocalEventBridge;
  let daemon: Socket;
  const received: Subsegment[] = [];
  const saved = { ...process.env };

  before(async () => {
    daemon = createSocket('udp4');
    daemon.on('message', (datagram) => {
      const [header, body] = datagram.toString('utf8').split('\n');
      assert.equal(header, '{"format":"json","version":1}');
      received.push(JSON.parse(body!) as Subsegment);
    });
    await new Promise<void>((resolve) => daemon.bind(0, '127.0.0.1', resolve));
    bus = await startLocalEventBridge({ buses: ['orders-bus'] });
    db = await createTestDatabase();
    const dir = mkdtempSync(join(tmpdir(), 'qb-tracing-'));
    const configPath = join(dir, 'queuebox.yml');
    writeFileSync(
      configPath,
      [
        'destinations:',
        `  events: { type: eventbridge, eventBusName: orders-bus, source: shop.orders, endpoint: "${bus.endpoint}", region: us-east-1 }`,
        'outbox:',
        '  routes: [{ topicPattern: "**", destination: events }]',
        '  pollIntervalMs: 20',
        'lambda: { deadlineMarginMs: 1000 }',
        'observability: { tracing: true }',
      ].join('\n'),
    );
    Object.assign(process.env, {
      QUEUEBOX_CONFIG: configPath,
      QUEUEBOX_DATABASE_URL: db.url,
      QUEUEBOX_DATABASE__SCHEMA: db.schema,
      AWS_ACCESS_KEY_ID: 'test',
      AWS_SECRET_ACCESS_KEY: 'test',
      AWS_REGION: 'us-east-1',
      // What Lambda sets for a function with active tracing.
      AWS_EXECUTION_ENV: 'AWS_Lambda_nodejs20.x',
      LAMBDA_TASK_ROOT: '/var/task',
      AWS_LAMBDA_INITIALIZATION_TYPE: 'on-demand',
      _X_AMZN_TRACE_ID: `Root=${TRACE_ROOT};Parent=${LAMBDA_PARENT};Sampled=1`,
      AWS_XRAY_DAEMON_ADDRESS: `127.0.0.1:${daemon.address().port}`,
      POWERTOOLS_LOG_LEVEL: 'ERROR',
    });
    setContainer(undefined);
  });
  after(async () => {
    setContainer(undefined);
    for (const name of Object.keys(process.env)) if (!(name in saved)) delete process.env[name];
    await db.drop();
    await bus.stop();
    daemon.close();
  });

  it('is off by default: no tracer is built and the stack asks for no tracing (nor X-Ray rights)', () => {
    const config = parseConfig({});
    assert.equal(config.observability.tracing, false);
    const deployment = { service: 'app', stage: 'test' };
    assert.equal(buildStackFragment(config, deployment).providerTracing, null);
    assert.deepEqual(buildStackFragment(parseConfig({ observability: { tracing: true } }), deployment).providerTracing, { lambda: 'Active' });
  });

  it('ships the tracer in the function bundles only when tracing is on', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'qb-tracing-build-'));
    try {
      for (const tracing of [false, true]) {
        const configPath = join(dir, `queuebox-${tracing}.yml`);
        writeFileSync(configPath, `observability: { tracing: ${tracing} }\n`);
        const outDir = join(dir, `dist-${tracing}`);
        await buildAll({ configPath, outDir, log: () => {} });
        // The entry file and its lazily loaded chunks: what the poller's deployment package holds.
        const poller = readdirSync(join(outDir, 'outboxPoller'), { recursive: true, encoding: 'utf8' })
          .filter((f) => f.endsWith('.js'))
          .map((f) => readFileSync(join(outDir, 'outboxPoller', f), 'utf8'))
          .join('\n');
        assert.equal(poller.includes('AWS_XRAY_DAEMON_ADDRESS'), tracing, `tracing ${tracing}: the X-Ray SDK is ${tracing ? '' : 'not '}bundled`);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('when on, sends the poller invocation, each destination call and the SDK request as subsegments of the Lambda trace', async () => {
    const ids = await insertOutboxRows(db, Array.from({ length: 12 }, (_, i) => ({ topic: 'orders.created', payload: { n: i } })));
    const { result: summary } = await captureStdout(() => pollerHandler({ source: 'aws.events' }, fakeLambdaContext({ timeoutMs: 4700 })));
    assert.equal(summary.sent, 12, JSON.stringify(summary));
    assert.deepEqual(new Set((await inspectRows(db, ids)).map((r) => r.state)), new Set(['sent']));
    assert.ok((await getContainer()).tracer?.isTracingEnabled(), 'the container has an enabled tracer');

    await waitUntil('the invocation subsegment arrived', () => received.some((s) => s.name === '## outboxPoller'), 5000);
    const all = received.flatMap(function flatten(s): Subsegment[] {
      return [s, ...(s.subsegments ?? []).map((c) => ({ ...c, trace_id: s.trace_id, parent_id: s.id })).flatMap(flatten)];
    });
    const invocation = all.find((s) => s.name === '## outboxPoller')!;
    assert.equal(invocation.trace_id, TRACE_ROOT);
    assert.equal(invocation.parent_id, LAMBDA_PARENT, 'a child of the Lambda function segment');
    assert.deepEqual(invocation.annotations, { ColdStart: true, Service: 'queuebox' });
    assert.equal((invocation.metadata?.queuebox?.['outboxPoller response'] as { sent: number }).sent, 12);

    const calls = all.filter((s) => s.name === '### eventbridge events');
    assert.ok(calls.length >= 2, `one subsegment per PutEvents call (12 entries: at least 2), got ${calls.length}`);
    for (const call of calls) {
      assert.equal(call.trace_id, TRACE_ROOT);
      assert.equal(call.annotations?.destination, 'events');
      assert.equal(call.annotations?.destination_type, 'eventbridge');
    }
    assert.equal(calls.reduce((n, c) => n + Number(c.annotations?.entries), 0), 12);
    assert.equal(calls.reduce((n, c) => n + Number((c.metadata?.default?.outcomes as { sent?: number }).sent ?? 0), 0), 12);

    const sdk = all.filter((s) => s.namespace === 'aws' && s.aws?.operation === 'PutEvents');
    assert.equal(sdk.length, calls.length, 'each call shows its PutEvents request');
    assert.ok(sdk.every((s) => s.trace_id === TRACE_ROOT && s.name === 'EventBridge'));
  });
});
