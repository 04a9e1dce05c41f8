/**
 * A row written in plain SQL with `key = ''` is keyless (docs/claims-and-leases.md), and on a FIFO
 * queue a keyless row's MessageGroupId is its id (docs/destinations.md): delivered, not dead with
 * "cannot be a FIFO MessageGroupId". Real SQS (fauxqs) through the real AWS SDK.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { DeleteMessageCommand, ReceiveMessageCommand, SQSClient, type Message } from '@aws-sdk/client-sqs';
import { startFauxqs, type FauxqsServer } from 'fauxqs';
import { createDestinations } from '../../lib/destinations/create-destinations.ts';
import { runOutboxPass } from '../../lib/outbox/outbox-pass.ts';
import { createRouter } from '../../lib/outbox/routes.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { inspectRows, passFixture } from '../helpers/outbox-pass-fixture.ts';

const credentials = { accessKeyId: 'test', secretAccessKey: 'test' };

describe('a plain-SQL row with the empty key on a FIFO queue', () => {
  let server: FauxqsServer;
  let db: TestDatabase;
  let endpoint: string;
  let fifoUrl: string;
  before(async () => {
    server = await startFauxqs({ port: 0, logger: false });
    endpoint = `http://127.0.0.1:${server.port}`;
    fifoUrl = server.createQueue('empty-key.fifo', { attributes: { FifoQueue: 'true' } }).queueUrl;
    db = await createTestDatabase({
      destinations: { orders: { type: 'sqs', queueUrl: fifoUrl, endpoint, region: 'us-east-1' } },
      outbox: { routes: [{ topicPattern: '**', destination: 'orders' }], pollIntervalMs: 10 },
    });
  });
  after(async () => {
    await db.drop();
    await server.stop();
  });

  it('is keyless: delivered with MessageGroupId = row id, not dead-lettered', async () => {
    const [inserted] = await db.query<{ id: string }>(
      `INSERT INTO "${db.schema}".outbox (topic, key, payload) VALUES ('order.paid', '', '{"orderId":"o-1"}'::jsonb) RETURNING id::text AS id`,
    );
    const id = inserted!.id;
    const destinations = createDestinations(db.config, { clientOverrides: { credentials } });
    const fixture = passFixture(db, { destinations: [] });
    await runOutboxPass({ ...fixture, destinations, router: createRouter(db.config.outbox.routes, Object.fromEntries(destinations)) });
    const [row] = await inspectRows(db, [id]);
    assert.deepEqual([row!.state, row!.last_error], ['sent', null]);

    const reader = new SQSClient({ endpoint, region: 'us-east-1', credentials });
    try {
      const { Messages = [] } = await reader.send(new ReceiveMessageCommand({ QueueUrl: fifoUrl, MaxNumberOfMessages: 10, MessageSystemAttributeNames: ['All'] }));
      const got = Messages as Message[];
      assert.equal(got.length, 1);
      assert.equal(got[0]!.Attributes?.MessageGroupId, id);
      await reader.send(new DeleteMessageCommand({ QueueUrl: fifoUrl, ReceiptHandle: got[0]!.ReceiptHandle! }));
    } finally {
      reader.destroy();
    }
  });
});
