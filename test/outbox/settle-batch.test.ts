/**
 * `settleBatch` when one of its three fenced statements fails (a dropped connection): the writes
 * that did answer are still counted — their sent rows and their lost claims — before the error
 * reaches the pass. Found by the fault suite: a lost `sent` that went uncounted because the retry
 * statement of the same batch failed left `queuebox_claims_lost_total` below what the database saw.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { OutboxRow } from '../../lib/db/driver.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import type { PassContext, PassTally } from '../../lib/outbox/pass-context.ts';
import { NoopDestination } from '../../lib/destinations/noop-destination.ts';
import { NO_ROUTE } from '../../lib/outbox/failure-report.ts';
import { SettlePlan, settleBatch } from '../../lib/outbox/settle-batch.ts';

const row = (id: string, attempt = 0): OutboxRow => ({
  id,
  topic: 't',
  key: null,
  payload: {},
  payloadText: '{}',
  headers: {},
  attempt,
  maxAttempts: 5,
  sequence: id.replace(/\D/g, '') || '1',
  replayCount: 0,
  createdAt: new Date(),
  claimToken: `token-${id}`,
  leaseExpiresAt: new Date(),
});

describe('settleBatch', () => {
  it('counts the writes that answered, lost claims included, then rejects with the failed write', async () => {
    const tally: PassTally = { claimed: 0, sent: 0, retried: 0, dead: 0, claimsLost: 0, reclaimed: 0, batches: 0, publishCalls: 0, released: 0 };
    const metrics = new QueueBoxMetrics({ namespace: 'test', serviceName: 'test', write: () => {} });
    const logged: string[] = [];
    const ctx = {
      driver: {
        // s2's claim was lost to another owner: the fenced write changed s1 only.
        outboxMarkSentMany: async () => ['s1'],
        outboxRetryMany: async () => Promise.reject(new Error('connection terminated')),
        outboxMarkDeadMany: async () => ['d1'],
      },
      tally,
      metrics,
      flushMetrics: () => metrics.flush(),
      logger: { debug() {}, info() {}, warn: (m: string) => logged.push(m), error: (m: string) => logged.push(m) },
    } as unknown as PassContext;
    const plan = new SettlePlan(1000, () => 0.5);
    const main = new NoopDestination('main');
    plan.add(row('s1'), { id: 's1', status: 'sent' }, main);
    plan.add(row('s2'), { id: 's2', status: 'sent' }, main);
    plan.add(row('r1'), { id: 'r1', status: 'retryable', error: 'throttled' }, main);
    plan.deadNow(row('d1'), 'poison', { destinationName: NO_ROUTE, errorClass: 'NoRoute' });
    await assert.rejects(settleBatch(ctx, plan), /connection terminated/);
    assert.deepEqual([tally.sent, tally.retried, tally.dead, tally.claimsLost], [1, 0, 1, 1]);
    assert.equal(metrics.value('claimsLost', { component: 'outbox' }), 1);
    assert.equal(metrics.value('outboxMessages', { status: 'sent' }), 1);
    assert.equal(metrics.value('outboxMessages', { status: 'dead' }), 1);
    assert.equal(metrics.value('outboxFailedMessages', { destination: NO_ROUTE, status: 'dead' }), 1);
    assert.equal(metrics.value('outboxFailedMessages', { destination: 'main', status: 'retried' }), 0, 'the retry write failed: nothing was retried');
    assert.deepEqual(logged.sort(), [
      'outbox claim lost before marking sent: the destination already holds these messages and the new owner will publish them again',
      'outbox delivery failed',
    ], 'the lost sent row and the dead row are logged; the retry that was not written is not');
  });
});
