/**
 * The relay's failure report counts what it logs: `queuebox_inbox_failed_messages_total` per
 * configured source and status, summed over error classes, with `(unknown source)` for a row whose
 * source the configuration does not (or no longer) name, while the log line keeps the row's source.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { InboxRow } from '../../lib/db/driver.ts';
import { RELAY_FAILURE_LOG_MESSAGE, reportRelayFailures, sourceDimension, UNKNOWN_SOURCE, type RelayFailure } from '../../lib/inbox/relay-failure-report.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import { RecordingLogger } from '../helpers/recording-logger.ts';

const row = (i: number, source: string): InboxRow => ({
  id: `id-${String(i).padStart(2, '0')}`,
  source,
  idempotencyKey: `idem-${i}`,
  aggregateId: `agg-${i % 3}`,
  eventType: 'created',
  payload: {},
  payloadText: '{}',
  headers: {},
  correlationId: null,
  attempt: 0,
  createdAt: new Date(),
  claimToken: `token-${i}`,
  leaseExpiresAt: new Date(),
});

const failure = (i: number, source: string, errorClass: string): RelayFailure => ({ row: row(i, source), topic: `${source}.created`, errorClass, error: `refused ${i}` });

// What `inbox.sources` holds: the report reads its names only.
const sources = { shop: { type: 'http' }, crm: { type: 'sqs' } };
const setup = () => {
  const logger = new RecordingLogger();
  const metrics = new QueueBoxMetrics({ namespace: 'test', serviceName: 'test', write: () => {} });
  return { logger, metrics, ctx: { logger, metrics, sources } };
};

describe('reportRelayFailures', () => {
  it('counts the rows of each write per configured source and status, over every error class', () => {
    const { logger, metrics, ctx } = setup();
    reportRelayFailures(ctx, 'retried', [failure(1, 'shop', 'Error'), failure(2, 'shop', '57014'), failure(3, 'crm', 'Error'), failure(4, 'shop', 'Error')]);
    reportRelayFailures(ctx, 'dead', [failure(5, 'crm', 'TopicTemplate'), failure(6, 'crm', 'ValidationError'), failure(7, 'shop', 'TopicTemplate')]);

    assert.equal(metrics.value('inboxFailedMessages', { source: 'shop', status: 'retried' }), 3);
    assert.equal(metrics.value('inboxFailedMessages', { source: 'crm', status: 'retried' }), 1);
    assert.equal(metrics.value('inboxFailedMessages', { source: 'shop', status: 'dead' }), 1);
    assert.equal(metrics.value('inboxFailedMessages', { source: 'crm', status: 'dead' }), 2);
    assert.equal(metrics.value('inboxFailedMessages', { source: UNKNOWN_SOURCE, status: 'retried' }), 0);
    // The log lines are unchanged: one per source and error class.
    assert.deepEqual(
      logger.entries.map((e) => [e.level, e.message, e.extra.source, e.extra.errorClass, e.extra.retried, e.extra.dead]).sort(),
      [
        ['error', RELAY_FAILURE_LOG_MESSAGE, 'crm', 'TopicTemplate', 0, 1],
        ['error', RELAY_FAILURE_LOG_MESSAGE, 'crm', 'ValidationError', 0, 1],
        ['error', RELAY_FAILURE_LOG_MESSAGE, 'shop', 'TopicTemplate', 0, 1],
        ['warn', RELAY_FAILURE_LOG_MESSAGE, 'crm', 'Error', 1, 0],
        ['warn', RELAY_FAILURE_LOG_MESSAGE, 'shop', '57014', 1, 0],
        ['warn', RELAY_FAILURE_LOG_MESSAGE, 'shop', 'Error', 2, 0],
      ],
    );
  });

  it('counts a row whose source is not configured as (unknown source), never under its own name, and logs its own name', () => {
    const { logger, metrics, ctx } = setup();
    // A removed source, and names an object has without owning them: none is configured.
    reportRelayFailures(ctx, 'retried', [failure(1, 'legacy', 'Error'), failure(2, 'constructor', 'Error')]);
    reportRelayFailures(ctx, 'dead', [failure(3, 'legacy', 'Error'), failure(4, '__proto__', 'Error'), failure(5, 'shop', 'Error')]);

    assert.equal(metrics.value('inboxFailedMessages', { source: UNKNOWN_SOURCE, status: 'retried' }), 2);
    assert.equal(metrics.value('inboxFailedMessages', { source: UNKNOWN_SOURCE, status: 'dead' }), 2);
    assert.equal(metrics.value('inboxFailedMessages', { source: 'shop', status: 'dead' }), 1);
    for (const name of ['legacy', 'constructor', '__proto__']) {
      assert.equal(metrics.value('inboxFailedMessages', { source: name, status: 'retried' }) + metrics.value('inboxFailedMessages', { source: name, status: 'dead' }), 0, name);
    }
    assert.deepEqual(logger.entries.map((e) => e.extra.source).sort(), ['__proto__', 'constructor', 'legacy', 'legacy', 'shop']);
  });

  it('emits one EMF line per source and status with exactly the dimensions service, source and status', () => {
    const lines: string[] = [];
    const metrics = new QueueBoxMetrics({ namespace: 'QueueBox', serviceName: 'queuebox', write: (l) => lines.push(l) });
    const logger = new RecordingLogger();
    reportRelayFailures({ logger, metrics, sources }, 'dead', [failure(1, 'shop', 'Error'), failure(2, 'gone', 'Error')]);
    metrics.flush();
    const emitted = lines.map((l) => JSON.parse(l) as Record<string, unknown> & { _aws: { CloudWatchMetrics: Array<{ Dimensions: string[][]; Metrics: Array<{ Name: string }> }> } });
    assert.deepEqual(
      emitted.map((e) => [[...e._aws.CloudWatchMetrics[0]!.Dimensions[0]!].sort(), e._aws.CloudWatchMetrics[0]!.Metrics.map((m) => m.Name), e.source, e.status, e.queuebox_inbox_failed_messages_total]).sort(),
      [
        [['service', 'source', 'status'], ['queuebox_inbox_failed_messages_total'], '(unknown source)', 'dead', 1],
        [['service', 'source', 'status'], ['queuebox_inbox_failed_messages_total'], 'shop', 'dead', 1],
      ],
    );
  });

  it('writes nothing for a write that changed no row', () => {
    const lines: string[] = [];
    const metrics = new QueueBoxMetrics({ namespace: 'test', serviceName: 'test', write: (l) => lines.push(l) });
    const logger = new RecordingLogger();
    reportRelayFailures({ logger, metrics, sources }, 'dead', []);
    metrics.flush();
    assert.deepEqual([logger.entries.length, lines.length], [0, 0]);
  });

  it('sourceDimension: a configured name as is, anything else (own keys only) as (unknown source)', () => {
    assert.equal(UNKNOWN_SOURCE, '(unknown source)');
    assert.deepEqual(
      ['shop', 'crm', 'Shop', 'legacy', '', 'toString', 'hasOwnProperty'].map((s) => sourceDimension(s, sources)),
      ['shop', 'crm', UNKNOWN_SOURCE, UNKNOWN_SOURCE, UNKNOWN_SOURCE, UNKNOWN_SOURCE, UNKNOWN_SOURCE],
    );
  });
});
