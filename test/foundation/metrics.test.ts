/**
 * The in-memory metric buffer behind every pass: counts add up per metric and dimension set,
 * gauges keep the last value, each dimension set is its own EMF line, and a dimension the metric
 * does not declare is refused (a typo would otherwise create a new CloudWatch series), as are a
 * missing or empty one (a series nothing queries) and a value EMF cannot carry (NaN, Infinity, < 0).
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

  it('refuses a missing or an empty dimension (test/observability/metric-values.test.ts has the rest)', () => {
    const { metrics } = collect();
    assert.throws(() => metrics.count('claimsLost', 1), /queuebox_claims_lost_total needs dimension component/);
    assert.throws(() => metrics.count('claimsLost', 2, { component: '' }), /queuebox_claims_lost_total: dimension component is ""/);
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
