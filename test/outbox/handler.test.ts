import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createOutboxPoller } from '../../functions/outbox-poller.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { setContainer } from '../../lib/runtime/container.ts';
import { createInvocationContext } from '../../lib/runtime/invocation-context.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { insertOutboxRows, inspectRows } from '../helpers/outbox-pass-fixture.ts';
import { RecordingDestination } from '../helpers/recording-destination.ts';

interface EmfDoc {
  _aws: { Timestamp: number; CloudWatchMetrics: Array<{ Namespace: string; Dimensions: string[][]; Metrics: Array<{ Name: string; Unit: string }> }> };
  [field: string]: unknown;
}

describe('outbox poller handler', () => {
  let db: TestDatabase;
  const lines: string[] = [];
  before(async () => {
    db = await createTestDatabase({
      destinations: { main: { type: 'sqs', queueUrl: 'http://localhost:1/000000000000/main' } },
      outbox: { routes: [{ topicPattern: 'orders.**', destination: 'main' }], pollIntervalMs: 20 },
      lambda: { deadlineMarginMs: 1000 },
      observability: { namespace: 'QueueBoxHandlerTest' },
    });
    const logger = createLogger({ serviceName: 'queuebox', logLevel: 'SILENT' });
    setContainer({ config: db.config, driver: db.driver, logger, env: {}, writeMetrics: (line) => lines.push(line) });
  });
  after(async () => {
    setContainer(undefined);
    await db.drop();
  });

  it('returns by its deadline with a context that counts down, leaving a slow publish in flight, and emits the spec §7 metrics as EMF', async () => {
    const [sent, retried, unrouted, stale, slow] = await insertOutboxRows(db, [
      { topic: 'orders.created', payload: { answer: 'sent' } },
      { topic: 'orders.created', payload: { answer: 'retry' } },
      { topic: 'billing.created', payload: {} },
      { topic: 'orders.paid', payload: { answer: 'sent' } },
      { topic: 'orders.shipped', payload: { answer: 'sent', slow: true }, delayMs: 500 },
    ]);
    // A row a crashed invocation left behind with an expired lease.
    await db.query(`UPDATE "${db.schema}".outbox SET state = 'processing', claim_token = gen_random_uuid(), lease_expires_at = clock_timestamp() - interval '1 second' WHERE id = $1`, [stale]);
    const destination = new RecordingDestination({
      delayMs: (messages) => (messages.some((m) => m.payload.slow === true) ? 10_000 : 0),
      answer: (m) => (m.payload.answer === 'retry' ? { status: 'retryable', error: 'InternalError' } : 'sent'),
    });
    const handler = createOutboxPoller({ buildDestinations: () => new Map([['main', destination]]) });
    const context = createInvocationContext({ timeoutMs: 3000 });

    const summary = await handler({ source: 'aws.events' }, context);

    // It stopped at the deadline (3 s − 1 s margin) instead of waiting for the 10 s publish; the
    // margin pays for the final stats query and the metrics flush.
    assert.ok(context.getRemainingTimeInMillis() > 0, 'returned before the invocation timed out');
    assert.equal(summary.stoppedBecause, 'deadline');
    assert.deepEqual(
      { sent: summary.sent, retried: summary.retried, dead: summary.dead, reclaimed: summary.reclaimed, abandoned: summary.abandoned },
      { sent: 2, retried: 1, dead: 1, reclaimed: 1, abandoned: 1 },
    );
    const states = Object.fromEntries((await inspectRows(db)).map((r) => [r.id, r.state]));
    assert.deepEqual([states[sent!], states[retried!], states[unrouted!], states[stale!], states[slow!]], ['sent', 'pending', 'dead', 'sent', 'processing']);

    const docs = lines.map((line) => JSON.parse(line) as EmfDoc);
    assert.ok(docs.length > 0, 'metrics were flushed');
    const seen = new Map<string, Record<string, unknown>[]>();
    for (const doc of docs) {
      const directive = doc._aws.CloudWatchMetrics[0]!;
      assert.equal(directive.Namespace, 'QueueBoxHandlerTest');
      assert.ok(directive.Dimensions[0]!.includes('service'));
      const dims = Object.fromEntries(directive.Dimensions[0]!.map((d) => [d, doc[d]]));
      for (const metric of directive.Metrics) seen.set(metric.Name, [...(seen.get(metric.Name) ?? []), { ...dims, value: doc[metric.Name] }]);
    }
    // Summed over lines, as CloudWatch does: a settle that made rows dead writes its counts at once
    // (the sent rows of that settle with them), and the rest are written when the pass ends.
    const statuses = new Map<unknown, number>();
    for (const d of seen.get('queuebox_outbox_messages_total') ?? []) statuses.set(d.status, (statuses.get(d.status) ?? 0) + Number(d.value));
    assert.deepEqual([...statuses].sort(), [['dead', 1], ['retried', 1], ['sent', 2]]);
    assert.deepEqual(seen.get('queuebox_outbox_messages_reclaimed_total')?.map((d) => d.value), [1]);
    assert.deepEqual(seen.get('queuebox_outbox_publish_duration_seconds')?.map((d) => d.destination_type), ['sqs']);
    // Summed over lines too: the stale row comes back in a second claim when the first claim
    // answered before the reclaim (they go out side by side), and the first batch's settle, which
    // made a row dead, wrote its counts at once.
    const outcomes = new Map<string, number>();
    for (const d of seen.get('queuebox_outbox_destination_messages_total') ?? []) {
      const name = `${String(d.destination)} ${String(d.outcome)}`;
      outcomes.set(name, (outcomes.get(name) ?? 0) + Number(d.value));
    }
    assert.deepEqual([...outcomes].sort(), [['main retryable', 1], ['main sent', 2]]);
    assert.deepEqual(seen.get('queuebox_outbox_messages_pending')?.map((d) => d.value), [1]);
    assert.equal(seen.get('queuebox_outbox_oldest_pending_age_seconds')?.length, 1);
  });
});
