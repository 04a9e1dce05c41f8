/**
 * A batch of large messages is split by SQS's 1 MiB request limit into several calls, sent one
 * after another. When the pass stops waiting with one of those calls open, the rows of the calls
 * that answered are settled (a delivered row marked sent, not delivered again after its lease), the
 * rows of the calls never sent are released with no attempt spent, and only the open call's rows
 * are left to their lease. Before, every row of the batch was left `processing`, and each was
 * charged an attempt when its lease ended.
 *
 * Through the real SDK to the SQS emulator, behind a proxy that holds the second request open.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { PurgeQueueCommand, ReceiveMessageCommand, SQSClient } from '@aws-sdk/client-sqs';
import { startFauxqs, type FauxqsServer } from 'fauxqs';
import { SqsDestination } from '../../lib/destinations/sqs-destination.ts';
import { runOutboxPass } from '../../lib/outbox/outbox-pass.ts';
import type { TestDatabase } from '../helpers/database.ts';
import { insertOutboxRows, inspectRows, passFixture, withOutboxDatabase } from '../helpers/outbox-pass-fixture.ts';
import { waitUntil } from '../helpers/wait.ts';

const credentials = { accessKeyId: 'test', secretAccessKey: 'test' };
/** Two of these do not fit in one 1 MiB SendMessageBatch: one call per row. */
const large = 'x'.repeat(600_000);

/**
 * An HTTP proxy to `target` that holds request number `held` (1-based): until `until` resolves,
 * then passes it on; without `until`, until its client gives up.
 */
async function startHoldingProxy(target: string, held: number, until?: Promise<void>): Promise<{ url: string; requests: () => number; close: () => Promise<void> }> {
  let requests = 0;
  const upstream = new URL(target);
  const server = http.createServer((request, response) => {
    requests++;
    if (requests === held && until === undefined) {
      request.resume();
      return; // never answered: the SDK's abort closes it
    }
    const forward = () => {
      const call = http.request(
        { host: upstream.hostname, port: upstream.port, method: request.method, path: request.url, headers: request.headers },
        (answer) => {
          response.writeHead(answer.statusCode ?? 502, answer.headers);
          answer.pipe(response);
        },
      );
      call.on('error', () => response.destroy());
      return call;
    };
    if (requests === held) {
      // Read the body now, send it once released.
      const body: Buffer[] = [];
      request.on('data', (chunk: Buffer) => body.push(chunk));
      request.on('end', () => void until!.then(() => forward().end(Buffer.concat(body))));
      return;
    }
    request.pipe(forward());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    requests: () => requests,
    close: () => {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}

describe('a pass that stops with a later call of a size-split batch open', () => {
  let db: TestDatabase;
  let sqs: FauxqsServer;
  let queueUrl: string;
  let reader: SQSClient;
  withOutboxDatabase((d) => {
    db = d;
  });
  before(async () => {
    sqs = await startFauxqs({ port: 0, logger: false });
    queueUrl = sqs.createQueue('split-calls').queueUrl;
    reader = new SQSClient({ endpoint: `http://127.0.0.1:${sqs.port}`, region: 'us-east-1', credentials });
  });
  after(async () => {
    reader.destroy();
    await sqs.stop();
  });

  /** Runs one pass whose second SendMessageBatch hangs, stopped while it is open. */
  async function passStoppedInSecondCall(outbox: Record<string, unknown>): Promise<void> {
    await reader.send(new PurgeQueueCommand({ QueueUrl: queueUrl }));
    const proxy = await startHoldingProxy(`http://127.0.0.1:${sqs.port}`, 2);
    const client = new SQSClient({ endpoint: proxy.url, region: 'us-east-1', credentials, maxAttempts: 1 });
    try {
      const destination = new SqsDestination({ name: 'main', queueUrl, client, callTimeoutMs: 60_000 });
      const stop = new AbortController();
      const fixture = passFixture(db, { destinations: [destination], outbox: { shutdownTimeoutMs: 200, concurrency: 1, ...outbox }, mode: 'deadline', timeoutMs: 30_000, signal: stop.signal });
      const pass = runOutboxPass(fixture);
      await waitUntil('the second call is open', () => proxy.requests() === 2);
      stop.abort();
      await pass;
    } finally {
      client.destroy();
      await proxy.close();
    }
  }

  async function delivered(): Promise<string[]> {
    const { Messages = [] } = await reader.send(new ReceiveMessageCommand({ QueueUrl: queueUrl, MaxNumberOfMessages: 10, MessageAttributeNames: ['All'] }));
    return Messages.map((m) => m.MessageAttributes?.['X-Message-Id']?.StringValue ?? '?');
  }

  async function endLeasesAndReclaim(): Promise<void> {
    await db.query(`UPDATE "${db.schema}".outbox SET lease_expires_at = clock_timestamp() - interval '1 second' WHERE state = 'processing'`);
    await db.driver.outboxReclaimExpired({});
  }

  it('settles the call that answered, releases the call never sent, and leaves only the open call to its lease', async () => {
    const ids = await insertOutboxRows(db, [
      { topic: 'orders.paid', payload: { n: 1, large } },
      { topic: 'orders.paid', payload: { n: 2, large } },
      { topic: 'orders.paid', payload: { n: 3, large } },
    ]);
    await passStoppedInSecondCall({ batchSize: 3 });
    assert.deepEqual(await delivered(), [ids[0]], 'only the first call reached the queue');
    assert.deepEqual(
      (await inspectRows(db, ids)).map((r) => [r.state, r.attempt]),
      [
        ['sent', 0],
        ['processing', 0],
        ['pending', 0],
      ],
      'delivered: sent; in the open call: processing; never offered: released',
    );
    await endLeasesAndReclaim();
    assert.deepEqual(
      (await inspectRows(db, ids)).map((r) => [r.state, r.attempt]),
      [
        ['sent', 0],
        ['pending', 1],
        ['pending', 0],
      ],
      'only the row whose call was open is charged an attempt',
    );
  });

  it('leaves out of a later call a row whose claim was lost while an earlier call was open (another claim may have published it)', async () => {
    await reader.send(new PurgeQueueCommand({ QueueUrl: queueUrl }));
    const ids = await insertOutboxRows(db, [
      { topic: 'orders.paid', payload: { n: 1, large } },
      { topic: 'orders.paid', payload: { n: 2, large } },
      { topic: 'orders.paid', payload: { n: 3, large } },
    ]);
    let release!: () => void;
    const proxy = await startHoldingProxy(`http://127.0.0.1:${sqs.port}`, 1, new Promise((resolve) => (release = resolve)));
    const client = new SQSClient({ endpoint: proxy.url, region: 'us-east-1', credentials, maxAttempts: 1 });
    try {
      const destination = new SqsDestination({ name: 'main', queueUrl, client, callTimeoutMs: 60_000 });
      // Renewals every 400 ms (a third of the lease).
      const pass = runOutboxPass(passFixture(db, { destinations: [destination], outbox: { batchSize: 3, concurrency: 1, claimTimeoutMs: 1200 }, timeoutMs: 30_000 }));
      await waitUntil('the first call is open', () => proxy.requests() === 1);
      // Another claim takes the third row (its lease ended in a freeze, say).
      await db.query(`UPDATE "${db.schema}".outbox SET claim_token = gen_random_uuid() WHERE id = $1`, [ids[2]]);
      const [taken] = await db.query<{ claim_token: string }>(`SELECT claim_token FROM "${db.schema}".outbox WHERE id = $1`, [ids[2]]);
      await new Promise((resolve) => setTimeout(resolve, 1000)); // a renewal finds it lost
      release();
      const summary = await pass;
      assert.equal(proxy.requests(), 2, 'the first call, then the second; no third');
      assert.deepEqual([summary.sent, summary.claimsLost, summary.publishCalls], [2, 1, 2]);
      assert.deepEqual((await delivered()).sort(), [ids[0], ids[1]].sort(), 'the lost row was not sent by this pass');
      const rows = await inspectRows(db, ids);
      assert.deepEqual(
        rows.map((r) => [r.state, r.claim_token === taken!.claim_token]),
        [
          ['sent', false],
          ['sent', false],
          ['processing', true],
        ],
        'the lost row is untouched, under the other claim',
      );
    } finally {
      client.destroy();
      await proxy.close();
    }
  });

  it('does the same for a batch holding several rows of a key (outbox.rowsPerKey)', async () => {
    const ids = await insertOutboxRows(db, [
      { topic: 'orders.paid', key: 'a', payload: { n: 1, large } },
      { topic: 'orders.paid', key: 'b', payload: { n: 1, large } },
      { topic: 'orders.paid', key: 'c', payload: { n: 1, large } },
      { topic: 'orders.paid', key: 'a', payload: { n: 2 } },
      { topic: 'orders.paid', key: 'b', payload: { n: 2 } },
      { topic: 'orders.paid', key: 'c', payload: { n: 2 } },
    ]);
    await passStoppedInSecondCall({ batchSize: 6, rowsPerKey: 2 });
    assert.deepEqual(await delivered(), [ids[0]], 'only the first call reached the queue');
    const rows = await inspectRows(db, ids);
    assert.deepEqual(
      rows.map((r) => [r.key, r.state, r.attempt]),
      [
        ['a', 'sent', 0],
        ['b', 'processing', 0],
        ['c', 'pending', 0],
        ['a', 'pending', 0],
        ['b', 'pending', 0],
        ['c', 'pending', 0],
      ],
    );
    await endLeasesAndReclaim();
    assert.deepEqual(
      (await inspectRows(db, ids)).map((r) => r.attempt),
      [0, 1, 0, 0, 0, 0],
      'only b, whose call was open, is charged an attempt',
    );
  });
});
