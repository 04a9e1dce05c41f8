/**
 * SQS delivery through the real @aws-sdk/client-sqs against the fauxqs emulator: what arrives in
 * the queue (body, attributes, FIFO ids), how batches are split, and which rows die at once.
 */
import assert from 'node:assert/strict';
import { createServer, type Server, type Socket } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { DeleteMessageBatchCommand, ReceiveMessageCommand, SQSClient, type Message } from '@aws-sdk/client-sqs';
import { startFauxqs, type FauxqsServer } from 'fauxqs';
import { createDestinations } from '../../lib/destinations/create-destinations.ts';
import type { EntryOutcome } from '../../lib/destinations/destination.ts';
import { SqsDestination } from '../../lib/destinations/sqs-destination.ts';
import { outboundMessage } from '../helpers/outbound-message.ts';

const credentials = { accessKeyId: 'test', secretAccessKey: 'test' };

describe('SQS destination (fauxqs)', () => {
  let server: FauxqsServer;
  let endpoint: string;
  let client: SQSClient;
  let queueCount = 0;

  before(async () => {
    server = await startFauxqs({ port: 0, logger: false });
    endpoint = `http://127.0.0.1:${server.port}`;
    client = new SQSClient({ endpoint, region: 'us-east-1', credentials });
  });
  after(async () => {
    client.destroy();
    await server.stop();
  });

  /** A new queue for one test, and a destination built from config as the poller builds it. */
  function newQueue(fifo = false): { queueUrl: string; destination: SqsDestination } {
    const name = `q${++queueCount}${fifo ? '.fifo' : ''}`;
    const { queueUrl } = server.createQueue(name, fifo ? { attributes: { FifoQueue: 'true' } } : {});
    const destinations = createDestinations(
      { destinations: { [name.replace('.', '_')]: { type: 'sqs', queueUrl, callTimeoutMs: 10_000 } } },
      { clientOverrides: { endpoint, region: 'us-east-1', credentials } },
    );
    return { queueUrl, destination: destinations.get(name.replace('.', '_')) as SqsDestination };
  }

  /** Receives (and deletes) everything in the queue. */
  async function drain(queueUrl: string): Promise<Message[]> {
    const all: Message[] = [];
    for (;;) {
      const { Messages = [] } = await client.send(
        new ReceiveMessageCommand({ QueueUrl: queueUrl, MaxNumberOfMessages: 10, MessageAttributeNames: ['All'], MessageSystemAttributeNames: ['All'] }),
      );
      if (Messages.length === 0) return all;
      all.push(...Messages);
      await client.send(new DeleteMessageBatchCommand({ QueueUrl: queueUrl, Entries: Messages.map((m, i) => ({ Id: String(i), ReceiptHandle: m.ReceiptHandle! })) }));
    }
  }

  const attributesOf = (message: Message) => Object.fromEntries(Object.entries(message.MessageAttributes ?? {}).map(([name, value]) => [name, value.StringValue]));
  const sentAll = (outcomes: EntryOutcome[]) => assert.deepEqual(outcomes.map((o) => o.status), outcomes.map(() => 'sent'));

  it('delivers a payload holding U+FFFE or U+FFFF (which SQS refuses raw) with them escaped: the same JSON value', async () => {
    const { queueUrl, destination } = newQueue();
    // JSON.stringify leaves both raw, as PostgreSQL's jsonb output does.
    const payload = { note: 'a\uFFFFb\uFFFEc', n: 1 };
    assert.ok(JSON.stringify(payload).includes('\uFFFF'));
    sentAll(await destination.publishBatch([outboundMessage({ payload })]));
    const [message] = await drain(queueUrl);
    assert.equal(message?.Body, '{"note":"a\\uffffb\\ufffec","n":1}');
    assert.deepEqual(JSON.parse(message!.Body!), payload);
  });

  it('delivers the JSON payload with the delivery headers as message attributes', async () => {
    const { queueUrl, destination } = newQueue();
    const keyed = outboundMessage({ key: 'order-7', attempt: 2, payload: { orderId: 'o-7', total: 12.5 }, headers: { 'x-correlation-id': 'corr-1', 'x-source': 'stripe' } });
    const plain = outboundMessage({ topic: 'customer.created', payload: { name: 'Zoë' } });
    const outcomes = await destination.publishBatch([keyed, plain]);
    assert.deepEqual(outcomes, [
      { id: keyed.id, status: 'sent' },
      { id: plain.id, status: 'sent' },
    ]);
    const received = new Map((await drain(queueUrl)).map((m) => [attributesOf(m)['X-Message-Id'], m]));
    assert.equal(received.size, 2);
    assert.deepEqual(JSON.parse(received.get(keyed.id)!.Body!), { orderId: 'o-7', total: 12.5 });
    assert.deepEqual(attributesOf(received.get(keyed.id)!), {
      'X-Message-Id': keyed.id,
      'X-Topic': 'order.paid',
      'X-Attempt': '2',
      'X-Message-Key': 'order-7',
      'X-Correlation-Id': 'corr-1',
      'x-source': 'stripe',
    });
    assert.deepEqual(JSON.parse(received.get(plain.id)!.Body!), { name: 'Zoë' });
    assert.deepEqual(attributesOf(received.get(plain.id)!), { 'X-Message-Id': plain.id, 'X-Topic': 'customer.created', 'X-Attempt': '0' });
  });

  it('sets the FIFO group id to the key (the row id without a key) and the deduplication id to the row id', async () => {
    const { queueUrl, destination } = newQueue(true);
    const keyed = outboundMessage({ key: 'customer-42' });
    const keyless = outboundMessage();
    sentAll(await destination.publishBatch([keyed, keyless]));
    const received = await drain(queueUrl);
    const system = new Map(received.map((m) => [attributesOf(m)['X-Message-Id'], m.Attributes]));
    assert.equal(system.get(keyed.id)?.MessageGroupId, 'customer-42');
    assert.equal(system.get(keyed.id)?.MessageDeduplicationId, keyed.id);
    assert.equal(system.get(keyless.id)?.MessageGroupId, keyless.id);
    assert.equal(system.get(keyless.id)?.MessageDeduplicationId, keyless.id);
  });

  it('lets SQS absorb a duplicate publish of the same row, and delivers a replayed row again', async () => {
    const { queueUrl, destination } = newQueue(true);
    const row = outboundMessage({ key: 'order-1' });
    sentAll(await destination.publishBatch([row]));
    sentAll(await destination.publishBatch([{ ...row, attempt: 1 }]));
    const first = await drain(queueUrl);
    assert.equal(first.length, 1, 'the second publish within the deduplication window is absorbed');

    sentAll(await destination.publishBatch([{ ...row, replayCount: 1 }]));
    const replayed = await drain(queueUrl);
    assert.equal(replayed.length, 1, 'the replay is delivered');
    assert.equal(attributesOf(replayed[0]!)['X-Message-Id'], row.id);
    assert.equal(replayed[0]!.Attributes?.MessageDeduplicationId, `${row.id}:r1`);
  });

  it('splits more than 10 messages into several calls and delivers them all', async () => {
    const { queueUrl, destination } = newQueue();
    const rows = Array.from({ length: 23 }, (_, i) => outboundMessage({ payload: { n: i } }));
    const outcomes = await destination.publishBatch(rows);
    assert.deepEqual(outcomes, rows.map((r) => ({ id: r.id, status: 'sent' })));
    const received = await drain(queueUrl);
    assert.deepEqual(received.map((m) => JSON.parse(m.Body!).n).sort((a, b) => a - b), rows.map((_, i) => i));
  });

  it('splits a batch over 1 MiB into calls under 1 MiB (fauxqs rejects a larger request)', async () => {
    const { queueUrl, destination } = newQueue();
    const rows = Array.from({ length: 5 }, (_, i) => outboundMessage({ payload: { n: i, blob: 'x'.repeat(300_000) } }));
    sentAll(await destination.publishBatch(rows));
    assert.equal((await drain(queueUrl)).length, 5);
  });

  it('dead-letters at once the rows SQS can never accept, and still sends the rest of the batch', async () => {
    const { queueUrl, destination } = newQueue();
    const eightHeaders = Object.fromEntries(Array.from({ length: 8 }, (_, i) => [`h${i}`, 'v']));
    const good = outboundMessage();
    const tenAttributes = outboundMessage({ headers: Object.fromEntries(Object.entries(eightHeaders).slice(0, 7)) });
    const tooMany = outboundMessage({ headers: eightHeaders });
    const spaced = outboundMessage({ headers: { 'bad name': 'v' } });
    const reserved = outboundMessage({ headers: { 'AWS.Trace': 'v' } });
    const huge = outboundMessage({ payload: { blob: 'x'.repeat(1_048_576) } });
    const outcomes = await destination.publishBatch([good, tenAttributes, tooMany, spaced, reserved, huge]);

    assert.deepEqual(outcomes.slice(0, 2), [
      { id: good.id, status: 'sent' },
      { id: tenAttributes.id, status: 'sent' },
    ]);
    const [many, space, aws, big] = outcomes.slice(2);
    assert.deepEqual({ ...many, error: undefined }, { id: tooMany.id, status: 'permanent', deadNow: true, error: undefined, errorClass: 'InvalidMessageAttributes' });
    assert.match((many as { error: string }).error, /needs 11 message attributes \(3 QueueBox headers \+ 8 row headers\); SQS allows at most 10/);
    assert.equal(space?.status, 'permanent');
    assert.equal(space?.status === 'permanent' && space.deadNow, true);
    assert.match((space as { error: string }).error, /header name "bad name" is not a valid SQS message attribute name/);
    assert.match((aws as { error: string }).error, /"AWS\.Trace".*reserved by AWS/);
    assert.equal(aws?.status === 'permanent' && aws.deadNow, true);
    assert.match((big as { error: string }).error, /^message is 10\d{5} bytes \(body and attributes\); SQS allows 1048576$/);
    assert.equal(big?.status === 'permanent' && big.deadNow, true);

    const received = await drain(queueUrl);
    assert.deepEqual(received.map((m) => attributesOf(m)['X-Message-Id']).sort(), [good.id, tenAttributes.id].sort());
  });

  it('dead-letters at once a FIFO row whose key cannot be a MessageGroupId', async () => {
    const { queueUrl, destination } = newQueue(true);
    const spaced = outboundMessage({ key: 'customer 42' });
    const long = outboundMessage({ key: 'k'.repeat(129) });
    const fine = outboundMessage({ key: 'k'.repeat(128) });
    const outcomes = await destination.publishBatch([spaced, long, fine]);
    assert.deepEqual(outcomes.map((o) => [o.status, o.status === 'sent' ? undefined : o.deadNow]), [['permanent', true], ['permanent', true], ['sent', undefined]]);
    assert.match((outcomes[0] as { error: string }).error, /key "customer 42" cannot be a FIFO MessageGroupId/);
    assert.equal((await drain(queueUrl)).length, 1);
  });

  it('dead-letters at once a row over a queue\'s smaller MaximumMessageSize, keeping SQS\'s reason, and sends the rest', async () => {
    for (const fifo of [false, true]) {
      const name = `small${fifo ? '.fifo' : ''}`;
      const { queueUrl } = server.createQueue(name, { attributes: { MaximumMessageSize: '262144', ...(fifo ? { FifoQueue: 'true' } : {}) } });
      const destination = new SqsDestination({ name, queueUrl, client });
      const large = outboundMessage({ key: 'k-1', payload: { blob: 'x'.repeat(300_000) } });
      const small = outboundMessage({ key: 'k-2' });
      const outcomes = await destination.publishBatch([large, small]);
      assert.deepEqual(outcomes.map((o) => [o.status, o.status === 'sent' ? undefined : o.deadNow]), [['permanent', true], ['sent', undefined]], name);
      assert.deepEqual({ ...outcomes[0], error: undefined }, { id: large.id, status: 'permanent', deadNow: true, errorClass: 'InvalidParameterValue', error: undefined });
      assert.match((outcomes[0] as { error: string }).error, /^SQS SendMessageBatch entry failed: InvalidParameterValue \(sender fault\): .*Message must be shorter than 262144 bytes/);
      assert.deepEqual((await drain(queueUrl)).map((m) => attributesOf(m)['X-Message-Id']), [small.id]);
    }
  });

  it('reports a missing queue as permanent for every entry, without dead-lettering at once', async () => {
    const { queueUrl } = newQueue();
    const missing = new SqsDestination({ name: 'missing', queueUrl: `${queueUrl}-gone`, client });
    const rows = [outboundMessage(), outboundMessage()];
    const outcomes = await missing.publishBatch(rows);
    for (const [i, outcome] of outcomes.entries()) {
      assert.equal(outcome.id, rows[i]!.id);
      assert.equal(outcome.status, 'permanent');
      assert.equal(outcome.status === 'permanent' && outcome.deadNow, undefined);
      assert.match((outcome as { error: string }).error, /QueueDoesNotExist \(AWS\.SimpleQueueService\.NonExistentQueue\) HTTP 400/);
    }
  });

  it('answers retryable "aborted" when the signal is already aborted, and sends nothing', async () => {
    const { queueUrl, destination } = newQueue();
    const row = outboundMessage();
    const outcomes = await destination.publishBatch([row], AbortSignal.abort());
    assert.deepEqual(outcomes, [{ id: row.id, status: 'retryable', error: 'aborted', errorClass: 'Aborted' }]);
    assert.equal((await drain(queueUrl)).length, 0);
  });

  describe('against an endpoint that never answers or refuses', () => {
    let hanging: Server;
    const sockets: Socket[] = [];
    before(async () => {
      hanging = createServer((socket) => sockets.push(socket));
      await new Promise<void>((resolve) => hanging.listen(0, '127.0.0.1', resolve));
    });
    after(async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => hanging.close(resolve));
    });

    it('aborts an in-flight call when the signal fires and answers retryable "aborted"', async () => {
      const port = (hanging.address() as { port: number }).port;
      const stuck = new SQSClient({ endpoint: `http://127.0.0.1:${port}`, region: 'us-east-1', credentials, maxAttempts: 1 });
      const destination = new SqsDestination({ name: 'stuck', queueUrl: `http://127.0.0.1:${port}/000000000000/q`, client: stuck });
      const row = outboundMessage();
      const controller = new AbortController();
      const pending = destination.publishBatch([row], controller.signal);
      setTimeout(() => controller.abort(), 50);
      assert.deepEqual(await pending, [{ id: row.id, status: 'retryable', error: 'aborted', errorClass: 'Aborted' }]);
      stuck.destroy();
    });

    it('answers a refused connection as retryable for every entry', async () => {
      const closed = createServer();
      await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
      const port = (closed.address() as { port: number }).port;
      await new Promise((resolve) => closed.close(resolve));
      const refused = new SQSClient({ endpoint: `http://127.0.0.1:${port}`, region: 'us-east-1', credentials, maxAttempts: 1 });
      const destination = new SqsDestination({ name: 'refused', queueUrl: `http://127.0.0.1:${port}/000000000000/q`, client: refused });
      const rows = [outboundMessage(), outboundMessage()];
      const outcomes = await destination.publishBatch(rows);
      assert.deepEqual(outcomes.map((o) => [o.id, o.status]), rows.map((r) => [r.id, 'retryable']));
      assert.match((outcomes[0] as { error: string }).error, /ECONNREFUSED/);
      assert.equal((outcomes[0] as { errorClass: string }).errorClass, 'ECONNREFUSED', 'a bare Error is classed by its code');
      refused.destroy();
    });
  });
});
