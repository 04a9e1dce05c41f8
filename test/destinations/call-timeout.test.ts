/**
 * `destinations.<name>.callTimeoutMs`: one destination call to a peer that accepts the connection
 * and never answers (a half-open connection, a black-holed NAT) is aborted after the timeout, with
 * the real SDK clients, and its rows are retryable. In a pass, the rows of the same claimed batch
 * that another call got accepted are then settled `sent` and their keys move on at once, instead
 * of waiting with the hung call for the deadline.
 */
import assert from 'node:assert/strict';
import { createServer, type Server, type Socket } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { loadConfig, parseConfig } from '../../lib/config/load-config.ts';
import { DEFAULT_CALL_TIMEOUT_MS } from '../../lib/config/schema.ts';
import { createDestinations } from '../../lib/destinations/create-destinations.ts';
import type { EntryOutcome } from '../../lib/destinations/destination.ts';
import { startLocalEventBridge, type LocalEventBridge } from '../../lib/local/local-eventbridge.ts';
import { runOutboxPass } from '../../lib/outbox/outbox-pass.ts';
import { createRouter } from '../../lib/outbox/routes.ts';
import { refusal } from '../helpers/config-refusal.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { outboundMessage } from '../helpers/outbound-message.ts';
import { insertOutboxRows, inspectRows, passFixture } from '../helpers/outbox-pass-fixture.ts';

const credentials = { accessKeyId: 'test', secretAccessKey: 'test' };
const sqs = (extra: Record<string, unknown> = {}) => ({ destinations: { orders: { type: 'sqs', queueUrl: 'https://sqs.eu-west-1.amazonaws.com/123456789012/orders', ...extra } } });

/** A TCP server that accepts every connection, reads the request and never answers. */
async function blackhole(): Promise<{ server: Server; endpoint: string; sockets: Socket[]; closed: () => number }> {
  const sockets: Socket[] = [];
  let closed = 0;
  const server = createServer((socket) => {
    sockets.push(socket);
    socket.on('data', () => {});
    socket.on('close', () => closed++);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const endpoint = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  return { server, endpoint, sockets, closed: () => closed };
}

function stop(hole: { server: Server; sockets: Socket[] }): void {
  for (const socket of hole.sockets) socket.destroy();
  hole.server.close();
}

describe('destinations.<name>.callTimeoutMs: configuration', () => {
  it('defaults to 10 s on both destination types and takes a whole number of ms from 100 to 900000', () => {
    const config = parseConfig({
      destinations: {
        orders: { type: 'sqs', queueUrl: 'https://sqs.eu-west-1.amazonaws.com/123456789012/orders' },
        events: { type: 'eventbridge', eventBusName: 'bus', source: 'src', callTimeoutMs: 100 },
        slow: { type: 'sqs', queueUrl: 'https://sqs.eu-west-1.amazonaws.com/123456789012/slow', callTimeoutMs: 900_000 },
      },
    });
    assert.equal(DEFAULT_CALL_TIMEOUT_MS, 10_000);
    assert.equal(config.destinations.orders!.callTimeoutMs, 10_000);
    assert.equal(config.destinations.events!.callTimeoutMs, 100);
    assert.equal(config.destinations.slow!.callTimeoutMs, 900_000);
    const destinations = createDestinations(config, { clientOverrides: { credentials } });
    assert.deepEqual(
      [...destinations.values()].map((d) => [d.name, (d as unknown as { callTimeoutMs: number }).callTimeoutMs]),
      [
        ['orders', 10_000],
        ['events', 100],
        ['slow', 900_000],
      ],
    );
  });

  for (const value of [99, 0, -1, 900_001, 1.5, '5000']) {
    it(`refuses ${JSON.stringify(value)}, naming the key`, () => {
      const error = refusal(() => parseConfig(sqs({ callTimeoutMs: value })));
      assert.equal(error.key, 'destinations.orders.callTimeoutMs', error.message);
      assert.match(error.message, /destinations\.orders\.callTimeoutMs/);
      if (typeof value === 'number') assert.match(error.issues[0]!.message, /whole number of ms from 100 to 900000/);
    });
  }

  it('is set from the environment like any number key, and refused there naming the variable', () => {
    const env = { QUEUEBOX_DESTINATIONS__ORDERS__CALL_TIMEOUT_MS: '2500' };
    const config = loadConfig({ input: sqs() as never, env });
    assert.equal(config.destinations.orders!.callTimeoutMs, 2500);
    const error = refusal(() => loadConfig({ input: sqs() as never, env: { QUEUEBOX_DESTINATIONS__ORDERS__CALL_TIMEOUT_MS: '50' } }));
    assert.equal(error.key, 'destinations.orders.callTimeoutMs');
    assert.match(error.message, /QUEUEBOX_DESTINATIONS__ORDERS__CALL_TIMEOUT_MS/);
  });
});

describe('destinations.<name>.callTimeoutMs: a call to a peer that never answers', () => {
  let hole: Awaited<ReturnType<typeof blackhole>>;
  before(async () => {
    hole = await blackhole();
  });
  after(() => stop(hole));

  for (const type of ['sqs', 'eventbridge'] as const) {
    it(`${type}: the real SDK client's call is aborted after callTimeoutMs, its entries retryable, its connection closed`, { timeout: 30_000 }, async () => {
      const config = parseConfig({
        destinations: {
          stuck:
            type === 'sqs'
              ? { type: 'sqs', queueUrl: `${hole.endpoint}/000000000000/stuck`, endpoint: hole.endpoint, region: 'us-east-1', callTimeoutMs: 300 }
              : { type: 'eventbridge', eventBusName: 'b', source: 'src', endpoint: hole.endpoint, region: 'us-east-1', callTimeoutMs: 300 },
        },
      });
      const destination = createDestinations(config, { clientOverrides: { credentials } }).get('stuck')!;
      const messages = [outboundMessage(), outboundMessage()];
      const closedBefore = hole.closed();
      const started = performance.now();
      const outcomes = await destination.publishBatch(messages, new AbortController().signal);
      const elapsed = performance.now() - started;
      assert.ok(elapsed >= 290 && elapsed < 2000, `the call ended after ${Math.round(elapsed)} ms`);
      const operation = type === 'sqs' ? 'SQS SendMessageBatch' : 'EventBridge PutEvents';
      assert.deepEqual(
        outcomes,
        messages.map((m): EntryOutcome => ({
          id: m.id,
          status: 'retryable',
          error: `${operation} timed out after 300 ms without an answer (destinations.stuck.callTimeoutMs); the call was aborted`,
          errorClass: 'CallTimeout',
        })),
      );
      // The SDK ended the request: its socket is closed, not left open on the peer.
      const deadline = Date.now() + 2000;
      while (hole.closed() === closedBefore && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      assert.ok(hole.closed() > closedBefore, 'the aborted call closed its connection');
    });
  }

  it('a call the caller aborts first is still "aborted", not a timeout', { timeout: 30_000 }, async () => {
    const config = parseConfig({ destinations: { stuck: { type: 'sqs', queueUrl: `${hole.endpoint}/000000000000/stuck`, endpoint: hole.endpoint, region: 'us-east-1', callTimeoutMs: 5000 } } });
    const destination = createDestinations(config, { clientOverrides: { credentials } }).get('stuck')!;
    const controller = new AbortController();
    setTimeout(() => controller.abort(new Error('claim lost')), 200);
    const started = performance.now();
    const [outcome] = await destination.publishBatch([outboundMessage()], controller.signal);
    assert.ok(performance.now() - started < 2000);
    assert.deepEqual({ ...outcome, id: undefined }, { id: undefined, status: 'retryable', error: 'aborted', errorClass: 'Aborted' });
  });
});

describe('destinations.<name>.callTimeoutMs: a hung call in a claimed batch', () => {
  const TIMEOUT_MS = 500;
  let bus: LocalEventBridge;
  let db: TestDatabase;
  let hole: Awaited<ReturnType<typeof blackhole>>;
  before(async () => {
    bus = await startLocalEventBridge({ buses: ['b'] });
    hole = await blackhole();
    db = await createTestDatabase({
      destinations: {
        events: { type: 'eventbridge', eventBusName: 'b', source: 'src', endpoint: bus.endpoint, region: 'us-east-1' },
        stuck: { type: 'sqs', queueUrl: `${hole.endpoint}/000000000000/stuck`, endpoint: hole.endpoint, region: 'us-east-1', callTimeoutMs: TIMEOUT_MS },
      },
      // A long retry delay: the timed-out row is not due again within the pass.
      outbox: { routes: [{ topicPattern: 'stuck', destination: 'stuck' }, { topicPattern: '**', destination: 'events' }], pollIntervalMs: 10, retryBaseDelayMs: 60_000 },
    });
  });
  after(async () => {
    await db.drop();
    await bus.stop();
    stop(hole);
  });

  it('aborts the hung call after callTimeoutMs: its row is retried, the rest of the batch is sent and the keys move on in the same pass', { timeout: 60_000 }, async () => {
    const [stuck, ...rest] = await insertOutboxRows(db, [
      { topic: 'stuck', payload: { n: 0 } },
      ...Array.from({ length: 5 }, (_, i) => ({ topic: 'ok', key: `k${i}`, payload: { n: i + 1 } })),
      ...Array.from({ length: 5 }, (_, i) => ({ topic: 'ok', key: `k${i}`, payload: { n: i + 6 } })),
    ]);
    const destinations = createDestinations(db.config, { clientOverrides: { credentials } });
    // One row of a key per claim: the first claim is the hung row and the heads of the five keys,
    // delivered at once and settled as one batch; the keys' next rows need that settle.
    const fixture = passFixture(db, { destinations: [], timeoutMs: 20_000, mode: 'drain', outbox: { rowsPerKey: 1 } });
    const started = performance.now();
    const summary = await runOutboxPass({ ...fixture, destinations, router: createRouter(db.config.outbox.routes, Object.fromEntries(destinations)) });
    const elapsed = performance.now() - started;

    assert.equal(summary.stoppedBecause, 'drained', JSON.stringify(summary));
    assert.ok(elapsed >= TIMEOUT_MS && elapsed < TIMEOUT_MS + 4000, `the pass ended ${Math.round(elapsed)} ms after it started, not at its deadline`);
    assert.deepEqual(
      bus.events('b').map((e) => (e.detail as { data: { n: number } }).data.n),
      [1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
      "every key's second row went out in the same pass, after its first",
    );
    const rows = await inspectRows(db, rest);
    assert.deepEqual(rows.map((r) => r.state), Array(10).fill('sent'));
    const [row] = await inspectRows(db, [stuck!]);
    assert.equal(row!.state, 'pending', 'the timed-out row is back, retryable');
    assert.equal(row!.attempt, 1, 'the timed-out call spent an attempt');
    assert.ok(row!.dueInMs > 10_000, 'with backoff');
    assert.equal(
      row!.last_error,
      `destination stuck (SQS queue stuck): SQS SendMessageBatch timed out after ${TIMEOUT_MS} ms without an answer (destinations.stuck.callTimeoutMs); the call was aborted`,
    );
  });
});
