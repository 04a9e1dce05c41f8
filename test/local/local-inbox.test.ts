/**
 * The local run exercises the inbox: the demo provider's signed webhooks go through the real HTTP
 * handler, the scheduled relay forwards them to the outbox, and the poller delivers them to the
 * emulator's FIFO queue, where a consumer reads them with the SDK.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, describe, it } from 'node:test';
import { DeleteMessageCommand, ReceiveMessageCommand, SQSClient, type Message } from '@aws-sdk/client-sqs';
import pg from 'pg';
import { runLocal } from '../../lib/local/local-runner.ts';
import { EMULATOR_REGION, startLocalSqsEmulator } from '../../lib/local/local-sqs-emulator.ts';
import { testDatabaseUrl } from '../helpers/database.ts';

async function receiveAll(client: SQSClient, queueUrl: string): Promise<Message[]> {
  const out: Message[] = [];
  for (;;) {
    const { Messages = [] } = await client.send(new ReceiveMessageCommand({ QueueUrl: queueUrl, MaxNumberOfMessages: 10, MessageAttributeNames: ['All'], VisibilityTimeout: 60 }));
    if (Messages.length === 0) return out;
    out.push(...Messages);
    // Deleting releases the next message of a FIFO group.
    for (const m of Messages) await client.send(new DeleteMessageCommand({ QueueUrl: queueUrl, ReceiptHandle: m.ReceiptHandle! }));
  }
}

describe('local run: the demo inbox', () => {
  const schema = `qb_local_inbox_${randomBytes(5).toString('hex')}`;
  const pool = new pg.Pool({ connectionString: testDatabaseUrl(), max: 1 });
  after(async () => {
    await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await pool.end();
  });

  it('stores each signed webhook once, refuses the forged ones, relays the rest and delivers them with x-inbox-id and X-Message-Id; the run then exits drained', async () => {
    const emulator = await startLocalSqsEmulator();
    const lines: string[] = [];
    try {
      const summary = await runLocal({ schema, messages: 10, exitWhenDrained: true, emulator, out: (line) => lines.push(line) });
      assert.equal(summary.stoppedBecause, 'drained', lines.join('\n'));
      // Orders n = 1, 5, 9 are delivered twice; order n = 7 draws a forged webhook.
      assert.deepEqual(summary.webhooks, { received: 10, duplicate: 3, rejected: 1, failed: 0 });
      assert.deepEqual(summary.inbox, { pending: 0, processing: 0, processed: 10, dead: 0 });
      assert.deepEqual(summary.counts, { pending: 0, processing: 0, sent: 20, dead: 0 });
      assert.ok(lines.some((l) => /webhooks: received 10 · duplicate 3 · rejected 1 \| inbox: .*processed 10/.test(l)), 'progress shows the inbox');

      const inbox = await pool.query<{ id: string; idempotency_key: string; aggregate_id: string; event_type: string; state: string }>(
        `SELECT id, idempotency_key, aggregate_id, event_type, state FROM "${schema}".inbox`,
      );
      const orders = await pool.query<{ id: string }>(`SELECT id FROM "${schema}".queuebox_demo_orders`);
      assert.deepEqual(inbox.rows.map((r) => r.idempotency_key).sort(), orders.rows.map((r) => `pay_${r.id}`).sort(), 'one row per order, none for the forgery');
      assert.ok(inbox.rows.every((r) => r.state === 'processed' && `pay_${r.aggregate_id}` === r.idempotency_key && r.event_type.startsWith('payment.')));
      const relayed = await pool.query<{ id: string; inbox_id: string; topic: string; key: string }>(
        `SELECT id, headers->>'x-inbox-id' AS inbox_id, topic, key FROM "${schema}".outbox WHERE headers ? 'x-inbox-id'`,
      );
      assert.equal(relayed.rows.length, 10, 'each inbox row reached the outbox once');

      const client = new SQSClient({ endpoint: emulator.endpoint, region: EMULATOR_REGION, credentials: { accessKeyId: 'local', secretAccessKey: 'local' } });
      try {
        const delivered = (await receiveAll(client, emulator.fifoQueueUrl)).filter((m) => m.MessageAttributes?.['x-inbox-id'] !== undefined);
        assert.equal(delivered.length, 10, 'every relayed webhook is in the FIFO queue once');
        const outboxByInbox = new Map(relayed.rows.map((r) => [r.inbox_id, r]));
        const inboxById = new Map(inbox.rows.map((r) => [r.id, r]));
        for (const message of delivered) {
          const attributes = message.MessageAttributes!;
          const inboxId = attributes['x-inbox-id']!.StringValue!;
          const row = outboxByInbox.get(inboxId);
          const stored = inboxById.get(inboxId);
          assert.ok(row && stored, `x-inbox-id ${inboxId} names a relayed inbox row`);
          assert.equal(attributes['X-Message-Id']?.StringValue, row.id, 'X-Message-Id is the outbox row id');
          assert.equal(attributes['x-source']?.StringValue, 'payments');
          assert.equal(attributes['x-idempotency-key']?.StringValue, stored.idempotency_key);
          assert.equal(attributes['X-Topic']?.StringValue, `payments.${stored.event_type}`);
          assert.equal(row.key, `payments:${stored.aggregate_id}`, 'keyed by the source and the order');
          assert.equal((JSON.parse(message.Body!) as { orderId: string }).orderId, stored.aggregate_id);
        }
      } finally {
        client.destroy();
      }
    } finally {
      await emulator.stop();
    }
  });
});
