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
    const tally: PassTally = { claimed: 0, sent: 0, retried: 0, dead: 0, claimsLost: 0, reclaimed: 0, batches: 0, publishCalls: 0 };
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
    plan.add(row('s1'), { id: 's1', status: 'sent' });
    plan.add(row('s2'), { id: 's2', status: 'sent' });
    plan.add(row('r1'), { id: 'r1', status: 'retryable', error: 'throttled' });
    plan.deadNow(row('d1'), 'poison');
    await assert.rejects(settleBatch(ctx, plan), /connection terminated/);
    assert.deepEqual([tally.sent, tally.retried, tally.dead, tally.claimsLost], [1, 0, 1, 1]);
    assert.equal(metrics.value('claimsLost', { component: 'outbox' }), 1);
    assert.equal(metrics.value('outboxMessages', { status: 'sent' }), 1);
    assert.equal(metrics.value('outboxMessages', { status: 'dead' }), 1);
    assert.equal(logged.length, 1, 'the lost sent row is logged');
  });
});
