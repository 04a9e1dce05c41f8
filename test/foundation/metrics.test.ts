/**
 * The in-memory metric buffer behind every pass: counts add up per metric and dimension set,
 * gauges keep the last value, each dimension set is its own EMF line, and a dimension the metric
 * does not declare is refused (a typo would otherwise create a new CloudWatch series).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';

function collect(): { metrics: QueueBoxMetrics; lines: Array<Record<string, unknown>> } {
  const lines: Array<Record<string, unknown>> = [];
  const metrics = new QueueBoxMetrics({ namespace: 'test', serviceName: 'svc', write: (line) => lines.push(JSON.parse(line) as Record<string, unknown>) });
  return { metrics, lines };
}

describe('QueueBoxMetrics', () => {
  it('adds counts per dimension set, in any key order of the dimensions object', () => {
    const { metrics } = collect();
    metrics.count('outboxDestinationMessages', 3, { destination: 'orders', outcome: 'sent' });
    metrics.count('outboxDestinationMessages', 4, { outcome: 'sent', destination: 'orders' });
    metrics.count('outboxDestinationMessages', 2, { destination: 'orders', outcome: 'retryable' });
    metrics.count('outboxDestinationMessages', 5, { destination: 'billing', outcome: 'sent' });
    assert.equal(metrics.value('outboxDestinationMessages', { destination: 'orders', outcome: 'sent' }), 7);
    assert.equal(metrics.value('outboxDestinationMessages', { outcome: 'retryable', destination: 'orders' }), 2);
    assert.equal(metrics.value('outboxDestinationMessages', { destination: 'billing', outcome: 'sent' }), 5);
  });

  it('keeps a missing dimension apart from an empty one', () => {
    const { metrics } = collect();
    metrics.count('claimsLost', 1);
    metrics.count('claimsLost', 2, { component: '' });
    assert.equal(metrics.value('claimsLost'), 1);
    assert.equal(metrics.value('claimsLost', { component: '' }), 2);
  });

  it('refuses a dimension the metric does not declare, naming it', () => {
    const { metrics } = collect();
    assert.throws(() => metrics.count('outboxMessages', 1, { status: 'sent', destination: 'orders' }), /queuebox_outbox_messages_total has no dimension destination/);
    assert.throws(() => metrics.gauge('outboxPending', 1, { component: 'outbox' }), /has no dimension component/);
  });

  it('writes one EMF line per dimension set, with the summed counts and the last gauge', () => {
    const { metrics, lines } = collect();
    metrics.count('outboxMessages', 2, { status: 'sent' });
    metrics.count('outboxMessages', 3, { status: 'sent' });
    metrics.count('outboxMessages', 1, { status: 'dead' });
    metrics.gauge('outboxPending', 10);
    metrics.gauge('outboxPending', 7);
    metrics.flush();
    assert.equal(lines.length, 3);
    const sent = lines.find((l) => l.status === 'sent');
    const dead = lines.find((l) => l.status === 'dead');
    const plain = lines.find((l) => l.status === undefined);
    assert.equal(sent?.queuebox_outbox_messages_total, 5);
    assert.equal(dead?.queuebox_outbox_messages_total, 1);
    assert.equal(plain?.queuebox_outbox_messages_pending, 7);
    metrics.flush();
    assert.equal(lines.length, 3, 'a flush empties the buffer');
  });
});
