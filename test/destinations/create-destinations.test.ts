/**
 * Building destinations from config: one per configured name, with the endpoint and region of
 * its config; and the in-process no-op destination used by the benchmark.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { ReceiveMessageCommand, SQSClient } from '@aws-sdk/client-sqs';
import { startFauxqs, type FauxqsServer } from 'fauxqs';
import { parseConfig } from '../../lib/config/load-config.ts';
import { createDestinations } from '../../lib/destinations/create-destinations.ts';
import { NoopDestination } from '../../lib/destinations/noop-destination.ts';
import { outboundMessage } from '../helpers/outbound-message.ts';

const credentials = { accessKeyId: 'test', secretAccessKey: 'test' };

describe('createDestinations', () => {
  let server: FauxqsServer;
  before(async () => {
    server = await startFauxqs({ port: 0, logger: false });
  });
  after(async () => server.stop());

  it('builds every configured destination under its name, with its type and batch size', () => {
    const config = parseConfig({
      destinations: {
        orders: { type: 'sqs', queueUrl: 'https://sqs.eu-west-1.amazonaws.com/123456789012/orders.fifo', region: 'eu-west-1' },
        events: { type: 'eventbridge', eventBusName: 'arn:aws:events:eu-west-1:123456789012:event-bus/main', source: 'com.example', region: 'eu-west-1' },
      },
    });
    const destinations = createDestinations(config, { clientOverrides: { credentials } });
    assert.deepEqual(
      [...destinations.values()].map((d) => [d.name, d.type, d.maxBatchSize]),
      [
        ['orders', 'sqs', 10],
        ['events', 'eventbridge', 10],
      ],
    );
  });

  it('sends to the endpoint and region named in the destination config', async () => {
    const { queueUrl } = server.createQueue('configured');
    const endpoint = `http://127.0.0.1:${server.port}`;
    const config = parseConfig({ destinations: { local: { type: 'sqs', queueUrl, endpoint, region: 'us-east-1' } } });
    const destination = createDestinations(config, { clientOverrides: { credentials } }).get('local')!;
    const rows = [outboundMessage(), outboundMessage()];
    assert.deepEqual(await destination.publishBatch(rows), rows.map((r) => ({ id: r.id, status: 'sent' })));
    assert.deepEqual(await destination.publishBatch([outboundMessage()]).then((o) => o.map((x) => x.status)), ['sent'], 'the same client serves later calls');

    const reader = new SQSClient({ endpoint, region: 'us-east-1', credentials });
    const { Messages = [] } = await reader.send(new ReceiveMessageCommand({ QueueUrl: queueUrl, MaxNumberOfMessages: 10 }));
    assert.equal(Messages.length, 3);
    reader.destroy();
  });

  it('has a no-op destination that answers every entry sent and counts them', async () => {
    const noop = new NoopDestination('bench');
    const rows = Array.from({ length: 10 }, () => outboundMessage());
    assert.deepEqual(await noop.publishBatch(rows), rows.map((r) => ({ id: r.id, status: 'sent' })));
    assert.equal(noop.sentCount, 10);
    assert.equal(noop.type, 'sqs');
  });
});
