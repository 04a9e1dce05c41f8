/**
 * Failed deliveries where operators look: a row's `last_error` names its destination and queue or
 * bus, each settle write's retried and dead rows are one `outbox delivery failed` line per
 * destination and error class (through the real Powertools Logger), and
 * `queuebox_outbox_failed_messages_total` counts them per destination. Real PostgreSQL, the real
 * AWS SDK to the SQS emulator (fauxqs) and to the local EventBridge endpoint. The example line and
 * the Logs Insights query of docs/operations.md are checked against the line the code writes.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, beforeEach, describe, it } from 'node:test';
import { startFauxqs, type FauxqsServer } from 'fauxqs';
import { createDestinations } from '../../lib/destinations/create-destinations.ts';
import { startLocalEventBridge, type LocalEventBridge } from '../../lib/local/local-eventbridge.ts';
import { errorClassOf } from '../../lib/observability/failure-log.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { runOutboxPass } from '../../lib/outbox/outbox-pass.ts';
import { createRouter } from '../../lib/outbox/routes.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { emfValue } from '../helpers/emf.ts';
import { docsQueries, queryFields } from '../helpers/logs-insights.ts';
import { insertOutboxRows, inspectRows, passFixture } from '../helpers/outbox-pass-fixture.ts';
import { captureStdout } from '../helpers/stdout-capture.ts';

const credentials = { accessKeyId: 'test', secretAccessKey: 'test' };
const FAILED = 'queuebox_outbox_failed_messages_total';

type Line = Record<string, unknown>;

describe('failed deliveries: last_error, log lines and metrics name the destination', () => {
  let server: FauxqsServer;
  let bus: LocalEventBridge;
  let db: TestDatabase;
  let missingUrl: string;
  const missingBus = 'arn:aws:events:us-east-1:000000000000:event-bus/missing';
  before(async () => {
    server = await startFauxqs({ port: 0, logger: false });
    bus = await startLocalEventBridge({ buses: ['audit-bus'] });
    const endpoint = `http://127.0.0.1:${server.port}`;
    const eventsUrl = server.createQueue('failure-events').queueUrl;
    // A queue URL on the emulator that names no queue: SQS answers QueueDoesNotExist.
    missingUrl = eventsUrl.replace(/failure-events$/, 'missing-orders.fifo');
    db = await createTestDatabase({
      destinations: {
        orders: { type: 'sqs', queueUrl: missingUrl, endpoint, region: 'us-east-1' },
        events: { type: 'sqs', queueUrl: eventsUrl, endpoint, region: 'us-east-1' },
        audit: { type: 'eventbridge', eventBusName: missingBus, source: 'shop', endpoint: bus.endpoint, region: 'us-east-1' },
      },
      outbox: {
        routes: [
          { topicPattern: 'orders.**', destination: 'orders' },
          { topicPattern: 'events.**', destination: 'events' },
          { topicPattern: 'audit.**', destination: 'audit' },
        ],
        pollIntervalMs: 10,
      },
    });
  });
  after(async () => {
    await db.drop();
    await bus.stop();
    await server.stop();
  });
  beforeEach(async () => {
    await db.query(`DELETE FROM "${db.schema}".outbox`);
  });

  /** One drained pass through the real SDK clients and the real Powertools Logger; its failure lines and EMF lines. */
  async function pass() {
    const destinations = createDestinations(db.config, { clientOverrides: { credentials, maxAttempts: 1 } });
    const fixture = passFixture(db, { destinations: [] });
    const logger = createLogger({ serviceName: 'queuebox', logLevel: 'INFO' });
    const { result: summary, lines } = await captureStdout(() =>
      runOutboxPass({ ...fixture, logger, destinations, router: createRouter(db.config.outbox.routes, Object.fromEntries(destinations)) }),
      { stderr: true },
    );
    fixture.metrics.flush();
    const logs = lines.filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Line).filter((l) => !('_aws' in l));
    return { summary, failures: logs.filter((l) => l.message === 'outbox delivery failed'), emf: fixture.lines };
  }

  it('a missing queue: last_error names destination and queue, one WARN line for the batch names the queue URL, topics, keys and counts, and the metric has the destination', async () => {
    const ids = await insertOutboxRows(db, [
      { topic: 'orders.created', key: 'o-1', payload: { n: 1 } },
      { topic: 'orders.paid', key: 'o-1', payload: { n: 2 } },
      { topic: 'orders.created', key: 'o-2', payload: { n: 3 } },
      { topic: 'events.seen', payload: { n: 4 } },
    ]);
    const { summary, failures, emf } = await pass();
    assert.deepEqual([summary.sent, summary.retried, summary.dead], [1, 2, 0], 'o-1 holds its second row back (per-key order)');

    const rows = await inspectRows(db, ids);
    const failed = rows.filter((r) => r.topic.startsWith('orders.') && r.attempt === 1);
    assert.equal(failed.length, 2);
    for (const row of failed) {
      assert.equal(row.state, 'pending');
      assert.match(row.last_error!, /^destination orders \(SQS queue missing-orders\.fifo\): SQS SendMessageBatch failed: QueueDoesNotExist\b.*HTTP 400/, row.last_error!);
    }

    assert.equal(failures.length, 1, `one line for the batch, got ${JSON.stringify(failures)}`);
    const line = failures[0]!;
    assert.equal(line.level, 'WARN', 'nothing went dead');
    assert.deepEqual(
      { ...line, timestamp: undefined, ids: undefined, error: undefined },
      {
        level: 'WARN',
        message: 'outbox delivery failed',
        timestamp: undefined,
        service: 'queuebox',
        sampling_rate: 0,
        destination: 'orders',
        destinationType: 'sqs',
        queueUrl: missingUrl,
        errorClass: 'QueueDoesNotExist',
        retried: 2,
        dead: 0,
        topics: ['orders.created'],
        keys: ['o-1', 'o-2'],
        keyCount: 2,
        ids: undefined,
        error: undefined,
      },
    );
    assert.deepEqual([...(line.ids as string[])].sort(), failed.map((r) => r.id).sort());
    assert.equal(line.error, failed[0]!.last_error);

    assert.equal(emfValue(emf, FAILED, { destination: 'orders', status: 'retried' }), 2);
    assert.equal(emfValue(emf, FAILED, { destination: 'orders', status: 'dead' }), 0);
    assert.equal(emfValue(emf, FAILED, { destination: 'events' }), 0, 'the delivered row is not a failure');
  });

  it('rows that go dead: an ERROR line with the dead count, the metric per destination, last_error naming destination and queue after the verdict', async () => {
    const ids = await insertOutboxRows(db, [
      { topic: 'orders.created', key: 'o-7', payload: {} },
      { topic: 'orders.created', key: 'o-8', payload: {} },
    ]);
    // Their last attempt: the next failure is final.
    await db.query(`UPDATE "${db.schema}".outbox SET attempt = max_attempts - 1 WHERE id = ANY($1::uuid[])`, [ids]);
    const { summary, failures, emf } = await pass();
    assert.equal(summary.dead, 2);
    for (const row of await inspectRows(db, ids)) {
      assert.equal(row.state, 'dead');
      assert.match(row.last_error!, /^gave up after 5 of 5 attempts: destination orders \(SQS queue missing-orders\.fifo\): SQS SendMessageBatch failed: QueueDoesNotExist/);
    }
    assert.deepEqual(
      failures.map((l) => [l.level, l.destination, l.errorClass, l.retried, l.dead, l.keyCount]),
      [['ERROR', 'orders', 'QueueDoesNotExist', 0, 2, 2]],
    );
    assert.equal(emfValue(emf, FAILED, { destination: 'orders', status: 'dead' }), 2);
    assert.equal(emfValue(emf, 'queuebox_outbox_messages_total', { status: 'dead' }), 2, 'the existing status metric still counts them');
  });

  it('a missing event bus and a topic no route matches: one line each, naming the bus and "(no route)"', async () => {
    const [audit, stray] = await insertOutboxRows(db, [
      { topic: 'audit.logged', key: 'a-1', payload: {} },
      { topic: 'billing.created', payload: {} },
    ]);
    const { failures, emf } = await pass();
    const [auditRow, strayRow] = await inspectRows(db, [audit!, stray!]);
    assert.match(auditRow!.last_error!, new RegExp(`^destination audit \\(EventBridge bus ${missingBus.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}\\): EventBridge PutEvents entry failed: ResourceNotFoundException`));
    assert.equal(strayRow!.state, 'dead');
    assert.match(strayRow!.last_error!, /^no route matches topic "billing\.created"/);
    const byDestination = Object.fromEntries(failures.map((l) => [l.destination as string, l]));
    assert.deepEqual(Object.keys(byDestination).sort(), ['(no route)', 'audit']);
    const auditLine = byDestination.audit!;
    assert.deepEqual(
      [auditLine.level, auditLine.destinationType, auditLine.eventBusName, auditLine.queueUrl, auditLine.errorClass, auditLine.retried, auditLine.topics],
      ['WARN', 'eventbridge', missingBus, undefined, 'ResourceNotFoundException', 1, ['audit.logged']],
    );
    const strayLine = byDestination['(no route)']!;
    assert.deepEqual([strayLine.level, strayLine.errorClass, strayLine.dead, strayLine.destinationType, strayLine.keyCount], ['ERROR', 'NoRoute', 1, undefined, 0]);
    assert.equal(emfValue(emf, FAILED, { destination: 'audit', status: 'retried' }), 1);
    assert.equal(emfValue(emf, FAILED, { destination: '(no route)', status: 'dead' }), 1);
  });

  it('classes a database error by its SQLSTATE, a named error by its name', async () => {
    const divided = await db.query('SELECT 1 / 0').catch((error: unknown) => error);
    assert.equal(errorClassOf(divided), '22012', 'node-postgres names every error "error"; its code says which');
    assert.equal(errorClassOf(new TypeError('x')), 'TypeError');
    assert.equal(errorClassOf('text'), 'Error');
  });

  it('docs/operations.md shows the line the code writes, and its Logs Insights query names only fields of it', async () => {
    await insertOutboxRows(db, [
      { topic: 'orders.created', key: 'o-9', payload: {} },
      { topic: 'audit.logged', key: 'a-9', payload: {} },
    ]);
    const { failures } = await pass();
    const line = failures.find((l) => l.destination === 'orders')!;
    // The fields of an SQS line and of an EventBridge line (`queueUrl` or `eventBusName`).
    const known = new Set(failures.flatMap((l) => Object.keys(l)));
    assert.ok(known.has('queueUrl') && known.has('eventBusName'));
    const section = /## Failed deliveries in the logs\n([\s\S]*?)\n## /.exec(readFileSync('docs/operations.md', 'utf8'))?.[1];
    assert.ok(section, 'the section exists');
    const example = JSON.parse(/```json\n([\s\S]*?)\n```/.exec(section)![1]!) as Line;
    // What the handler's `logger.addContext(context)` adds on Lambda; this pass runs without it.
    const invocationFields = ['cold_start', 'function_arn', 'function_memory_size', 'function_name', 'function_request_id', 'xray_trace_id'];
    assert.deepEqual(Object.keys(example).filter((k) => !invocationFields.includes(k)).sort(), Object.keys(line).sort(), 'the example has the fields of the real line');
    assert.equal(example.message, line.message);
    const queries = docsQueries('docs/operations.md', 'outbox delivery failed');
    assert.ok(queries.length >= 2, 'the section has Logs Insights queries');
    for (const query of queries) {
      for (const field of queryFields(query)) assert.ok(known.has(field) || invocationFields.includes(field), `the query's field ${field} is a field of the log line`);
    }
  });
});
