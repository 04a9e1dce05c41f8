/**
 * The failure line's bounds and redaction: however many rows a write settles, a line lists at
 * most 10 topics, keys and ids (and counts the distinct keys); a queue URL with credentials in it
 * is logged redacted; rows of one destination with different error classes are separate lines.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { SQSClient } from '@aws-sdk/client-sqs';
import type { OutboxRow } from '../../lib/db/driver.ts';
import { SqsDestination } from '../../lib/destinations/sqs-destination.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import { reportFailures, type FailureNote } from '../../lib/outbox/failure-report.ts';
import { RecordingLogger } from '../helpers/recording-logger.ts';

const row = (i: number): OutboxRow => ({
  id: `id-${String(i).padStart(2, '0')}`,
  topic: `orders.t${i % 12}`,
  key: `k-${String(i).padStart(2, '0')}`,
  payload: {},
  payloadText: '{}',
  headers: {},
  attempt: 0,
  maxAttempts: 5,
  sequence: String(i + 1),
  replayCount: 0,
  createdAt: new Date(),
  claimToken: `token-${i}`,
  leaseExpiresAt: new Date(),
});

describe('reportFailures', () => {
  const client = new SQSClient({ region: 'us-east-1', credentials: { accessKeyId: 'test', secretAccessKey: 'test' } });
  const destination = new SqsDestination({ name: 'orders', queueUrl: 'https://admin:hunter2@sqs.example/000000000000/orders.fifo', client });

  it('lists at most 10 topics, keys and ids per line, counts every distinct key, and redacts the queue URL', () => {
    const logger = new RecordingLogger();
    const metrics = new QueueBoxMetrics({ namespace: 'test', serviceName: 'test', write: () => {} });
    const notes = new Map<string, FailureNote>();
    const rows = Array.from({ length: 25 }, (_, i) => row(i));
    for (const r of rows) notes.set(r.id, { row: r, destinationName: 'orders', destination, errorClass: 'QueueDoesNotExist', error: 'destination orders (SQS queue orders.fifo): …' });
    reportFailures({ logger, metrics }, notes, rows.slice(0, 20).map((r) => r.id), rows.slice(20).map((r) => r.id));

    assert.equal(logger.entries.length, 1, 'one line for one destination and error class');
    const line = logger.entries[0]!;
    assert.equal(line.level, 'error', 'a row went dead');
    assert.deepEqual([line.extra.retried, line.extra.dead, line.extra.keyCount], [20, 5, 25]);
    assert.equal((line.extra.topics as string[]).length, 10);
    assert.deepEqual(line.extra.keys, rows.slice(0, 10).map((r) => r.key), 'the first 10 keys in sorted order');
    assert.equal((line.extra.ids as string[]).length, 10);
    assert.equal(line.extra.queueUrl, 'https://***@sqs.example/000000000000/orders.fifo');
    assert.equal(metrics.value('outboxFailedMessages', { destination: 'orders', status: 'retried' }), 20);
    assert.equal(metrics.value('outboxFailedMessages', { destination: 'orders', status: 'dead' }), 5);
  });

  it('writes one line per error class of a destination, and nothing for rows no write changed', () => {
    const logger = new RecordingLogger();
    const metrics = new QueueBoxMetrics({ namespace: 'test', serviceName: 'test', write: () => {} });
    const [a, b, c] = [row(1), row(2), row(3)];
    const notes = new Map<string, FailureNote>([
      [a.id, { row: a, destinationName: 'orders', destination, errorClass: 'ThrottlingException', error: 'x' }],
      [b.id, { row: b, destinationName: 'orders', destination, errorClass: 'MessageTooLarge', error: 'y' }],
      [c.id, { row: c, destinationName: 'orders', destination, errorClass: 'ThrottlingException', error: 'z' }],
    ]);
    // c's claim was lost: its write changed a and b only.
    reportFailures({ logger, metrics }, notes, [a.id], [b.id]);
    assert.deepEqual(
      logger.entries.map((e) => [e.level, e.extra.errorClass, e.extra.retried, e.extra.dead, e.extra.ids]).sort(),
      [['error', 'MessageTooLarge', 0, 1, [b.id]], ['warn', 'ThrottlingException', 1, 0, [a.id]]],
    );
    reportFailures({ logger, metrics }, notes, [], []);
    assert.equal(logger.entries.length, 2, 'no rows, no line');
  });
});
