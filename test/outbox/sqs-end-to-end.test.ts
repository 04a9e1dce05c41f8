/**
 * The poller through the real SQS destination (AWS SDK) to an in-process SQS emulator (fauxqs).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { DeleteMessageCommand, ReceiveMessageCommand, SQSClient, type Message } from '@aws-sdk/client-sqs';
import { startFauxqs, type FauxqsServer } from 'fauxqs';
import { createDestinations } from '../../lib/destinations/create-destinations.ts';
import { runOutboxPass } from '../../lib/outbox/outbox-pass.ts';
import { createRouter } from '../../lib/outbox/routes.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { insertOutboxRows, inspectRows, passFixture } from '../helpers/outbox-pass-fixture.ts';

const credentials = { accessKeyId: 'test', secretAccessKey: 'test' };

async function receiveAll(client: SQSClient, queueUrl: string): Promise<Message[]> {
  const out: Message[] = [];
  for (;;) {
    const { Messages = [] } = await client.send(
      new ReceiveMessageCommand({ QueueUrl: queueUrl, MaxNumberOfMessages: 10, MessageAttributeNames: ['All'], MessageSystemAttributeNames: ['All'], VisibilityTimeout: 60 }),
    );
    if (Messages.length === 0) return out;
    out.push(...Messages);
    // Deleting releases the next message of a FIFO group.
    for (const m of Messages) await client.send(new DeleteMessageCommand({ QueueUrl: queueUrl, ReceiptHandle: m.ReceiptHandle! }));
  }
}

describe('outbox pass through the real SQS destination', () => {
  let server: FauxqsServer;
  let db: TestDatabase;
  let endpoint: string;
  let fifoUrl: string;
  let standardUrl: string;
  before(async () => {
    server = await startFauxqs({ port: 0, logger: false });
    endpoint = `http://127.0.0.1:${server.port}`;
    fifoUrl = server.createQueue('e2e-orders.fifo', { attributes: { FifoQueue: 'true' } }).queueUrl;
    standardUrl = server.createQueue('e2e-events').queueUrl;
    db = await createTestDatabase({
      destinations: {
        orders: { type: 'sqs', queueUrl: fifoUrl, endpoint, region: 'us-east-1' },
        events: { type: 'sqs', queueUrl: standardUrl, endpoint, region: 'us-east-1' },
      },
      outbox: {
        routes: [
          { topicPattern: 'orders.**', destination: 'orders' },
          { topicPattern: '**', destination: 'events' },
        ],
        pollIntervalMs: 10,
      },
    });
  });
  after(async () => {
    await db.drop();
    await server.stop();
  });

  it('delivers with FIFO group and dedup ids and identity attributes; an oversized payload or too many headers ends dead, nothing else affected', async () => {
    const manyHeaders = Object.fromEntries(Array.from({ length: 8 }, (_, i) => [`x-extra-${i}`, 'v']));
    const ids = await insertOutboxRows(db, [
      { topic: 'orders.created', key: 'o-1', payload: { step: 1 }, headers: { 'X-Correlation-Id': 'c-1' } },
      { topic: 'orders.paid', key: 'o-1', payload: { step: 2 } },
      { topic: 'orders.created', key: 'o-2', payload: { step: 1 } },
      { topic: 'customer.notified', payload: { n: 1 } },
      { topic: 'customer.notified', payload: { blob: 'x'.repeat(1_100_000) } },
      { topic: 'orders.shipped', key: 'o-3', payload: {}, headers: manyHeaders },
      { topic: 'customer.notified', payload: { n: 2 } },
    ]);
    const destinations = createDestinations(db.config, { clientOverrides: { credentials } });
    const fixture = passFixture(db, { destinations: [] });
    const summary = await runOutboxPass({ ...fixture, destinations, router: createRouter(db.config.outbox.routes, Object.fromEntries(destinations)) });

    const rows = await inspectRows(db, ids);
    assert.deepEqual(rows.map((r) => r.state), ['sent', 'sent', 'sent', 'sent', 'dead', 'dead', 'sent']);
    assert.match(rows[4]!.last_error!, /^permanent failure, not retried: destination events \(SQS queue e2e-events\): message is \d+ bytes .*SQS allows 1048576/);
    assert.match(rows[5]!.last_error!, /^permanent failure, not retried: destination orders \(SQS queue e2e-orders\.fifo\): .*10/);
    assert.deepEqual([summary.sent, summary.dead, summary.retried, summary.claimsLost], [5, 2, 0, 0]);

    const reader = new SQSClient({ endpoint, region: 'us-east-1', credentials });
    try {
      const fifo = await receiveAll(reader, fifoUrl);
      assert.deepEqual(fifo.map((m) => m.MessageAttributes?.['X-Message-Id']?.StringValue).sort(), [ids[0], ids[1], ids[2]].sort());
      const o1 = fifo.filter((m) => m.Attributes?.MessageGroupId === 'o-1').map((m) => JSON.parse(m.Body!).step);
      assert.deepEqual(o1, [1, 2], 'the group o-1 arrives in sequence order');
      const first = fifo.find((m) => m.MessageAttributes?.['X-Message-Id']?.StringValue === ids[0])!;
      assert.equal(first.Attributes?.MessageGroupId, 'o-1');
      assert.equal(first.Attributes?.MessageDeduplicationId, ids[0]);
      assert.equal(first.MessageAttributes?.['X-Topic']?.StringValue, 'orders.created');
      assert.equal(first.MessageAttributes?.['X-Attempt']?.StringValue, '0');
      assert.equal(first.MessageAttributes?.['X-Message-Key']?.StringValue, 'o-1');
      assert.equal(first.MessageAttributes?.['X-Correlation-Id']?.StringValue, 'c-1');
      assert.deepEqual(JSON.parse(first.Body!), { step: 1 });
      const standard = await receiveAll(reader, standardUrl);
      assert.deepEqual(standard.map((m) => JSON.parse(m.Body!)).sort((a, b) => a.n - b.n), [{ n: 1 }, { n: 2 }]);
    } finally {
      reader.destroy();
    }
  });
});
