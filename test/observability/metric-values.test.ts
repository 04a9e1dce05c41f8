/**
 * `QueueBoxMetrics` (exported: a pull worker may be given one of yours) refuses what it would
 * otherwise write as invalid or unqueried EMF: a value EMF cannot carry (NaN and ±Infinity print as
 * `null`, which CloudWatch drops; a negative count, age or duration), a metric without one of its
 * declared dimensions (published under a dimension set no panel or alarm queries), and a dimension
 * value CloudWatch refuses (empty, whitespace only, not printable ASCII; Powertools drops an empty
 * one with a warning, the same miss). Each is a `UsageError` naming the metric and the problem, and
 * nothing of a refused call is recorded.
 */
import assert from 'node:assert/strict';
import { it } from 'node:test';
import { QueueBoxMetrics, UsageError } from '../../lib/index.ts';

function collect(): { metrics: QueueBoxMetrics; lines: string[] } {
  const lines: string[] = [];
  return { metrics: new QueueBoxMetrics({ namespace: 'NS', serviceName: 'svc', write: (line) => lines.push(line) }), lines };
}

const refused = (pattern: RegExp) => (error: unknown) => error instanceof UsageError && pattern.test(error.message);

it('refuses a value that is not a finite number of at least 0, counts and gauges alike', () => {
  const { metrics, lines } = collect();
  for (const value of [NaN, Infinity, -Infinity]) {
    assert.throws(() => metrics.count('outboxMessages', value, { status: 'sent' }), refused(new RegExp(`^metric queuebox_outbox_messages_total: value is ${value}, not a finite number$`)));
    assert.throws(() => metrics.gauge('outboxPending', value), refused(new RegExp(`^metric queuebox_outbox_messages_pending: value is ${value}, not a finite number$`)));
  }
  assert.throws(() => metrics.count('outboxMessages', -3, { status: 'sent' }), refused(/^metric queuebox_outbox_messages_total: value is -3: a count, age or duration is never below 0$/));
  assert.throws(() => metrics.gauge('outboxOldestPendingAge', -1), refused(/queuebox_outbox_oldest_pending_age_seconds: value is -1/));
  assert.throws(() => metrics.count('outboxMessages', '2' as unknown as number, { status: 'sent' }), refused(/value is 2, not a finite number/));
  metrics.flush();
  assert.deepEqual(lines, [], 'nothing refused was recorded');
});

it('refuses dimensions other than exactly the declared ones, and values CloudWatch refuses', () => {
  const { metrics, lines } = collect();
  assert.throws(() => metrics.count('outboxFailedMessages', 1, { status: 'dead' }), refused(/^metric queuebox_outbox_failed_messages_total needs dimension destination \(it is written with exactly destination, status\)$/));
  assert.throws(() => metrics.count('claimsLost'), refused(/queuebox_claims_lost_total needs dimension component/));
  assert.throws(() => metrics.gauge('outboxPending', 1, { status: 'x' }), refused(/queuebox_outbox_messages_pending has no dimension status \(it is written with no dimension of its own\)/));
  assert.throws(() => metrics.count('outboxMessages', 1, { status: '' }), refused(/^metric queuebox_outbox_messages_total: dimension status is "": a value needs a character other than whitespace$/));
  assert.throws(() => metrics.count('outboxMessages', 1, { status: ' \t' }), refused(/dimension status is " \\t"/));
  assert.throws(() => metrics.count('inboxRejections', 1, { reason: 'été' }), refused(/dimension reason is "été": only printable ASCII characters/));
  assert.throws(() => metrics.count('inboxRejections', 1, { reason: 'a'.repeat(1025) }), refused(/dimension reason is 1025 characters long: at most 1024/));
  assert.throws(() => metrics.count('claimsLost', 1, { component: undefined as unknown as string }), refused(/needs dimension component/));
  assert.throws(() => metrics.count('claimsLost', 1, { component: 7 as unknown as string }), refused(/dimension component is a number, not a string/));
  // Checked before a count of 0 is skipped: a bad call fails whatever its value.
  assert.throws(() => metrics.count('outboxMessages', 0, { status: '' }), refused(/dimension status/));
  metrics.flush();
  assert.deepEqual(lines, [], 'nothing refused was recorded');
});

it('writes what it accepts: the declared dimensions, finite values, 0 counts skipped', () => {
  const { metrics, lines } = collect();
  metrics.count('outboxFailedMessages', 2, { destination: '(no route)', status: 'dead' });
  metrics.count('outboxMessages', 0, { status: 'sent' });
  metrics.gauge('outboxOldestPendingAge', 0);
  metrics.flush();
  const docs = lines.map((line) => JSON.parse(line) as Record<string, unknown> & { _aws: { CloudWatchMetrics: Array<{ Dimensions: string[][] }> } });
  assert.deepEqual(
    docs.map((d) => [d._aws.CloudWatchMetrics[0]!.Dimensions, d.queuebox_outbox_failed_messages_total ?? d.queuebox_outbox_oldest_pending_age_seconds]),
    [
      [[['service', 'destination', 'status']], 2],
      [[['service']], 0],
    ],
  );
});
