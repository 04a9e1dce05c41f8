/**
 * EventBridge delivery through a real EventBridgeClient whose `PutEvents` answers are replayed with
 * aws-sdk-client-mock: the entries it sends (envelope, source, detail type, bus), the size split,
 * and the per-entry and whole-call outcome mapping.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { EventBridgeClient, EventBridgeServiceException, PutEventsCommand, type PutEventsRequestEntry } from '@aws-sdk/client-eventbridge';
import { mockClient } from 'aws-sdk-client-mock';
import { createDestinations } from '../../lib/destinations/create-destinations.ts';
import type { EntryOutcome } from '../../lib/destinations/destination.ts';
import { EventBridgeDestination } from '../../lib/destinations/eventbridge-destination.ts';
import { outboundMessage } from '../helpers/outbound-message.ts';

interface Delivered {
  entries: PutEventsRequestEntry[][];
}

/** A destination built from config whose client records every call and accepts every entry. */
function acceptingDestination(maxRequestBytes = 262_144): { destination: EventBridgeDestination; delivered: Delivered; mock: ReturnType<typeof mockClient> } {
  const client = new EventBridgeClient({ region: 'eu-west-1', credentials: { accessKeyId: 'test', secretAccessKey: 'test' } });
  const mock = mockClient(client);
  const delivered: Delivered = { entries: [] };
  mock.on(PutEventsCommand).callsFake((input: { Entries: PutEventsRequestEntry[] }) => {
    delivered.entries.push(input.Entries);
    return { FailedEntryCount: 0, Entries: input.Entries.map((_, i) => ({ EventId: `e-${delivered.entries.length}-${i}` })) };
  });
  const destinations = createDestinations(
    { destinations: { bus: { type: 'eventbridge', eventBusName: 'orders-bus', source: 'com.example.orders', callTimeoutMs: 10_000, maxRequestBytes } } },
    { eventBridgeClient: () => client },
  );
  return { destination: destinations.get('bus') as EventBridgeDestination, delivered, mock };
}

const statusAndDeadNow = (o: EntryOutcome) => [o.status, o.status === 'sent' ? undefined : o.deadNow];

describe('EventBridge destination', () => {
  it('sends each row as an entry with the configured source and bus, the topic as detail type and the documented envelope', async () => {
    const { destination, delivered } = acceptingDestination();
    const row = outboundMessage({ topic: 'order.paid', key: 'order-7', attempt: 1, payload: { orderId: 'o-7' }, headers: { 'X-Correlation-Id': 'corr-9', 'x-source': 'shop' } });
    const keyless = outboundMessage({ topic: 'customer.created', payload: { name: 'Zoë' } });
    const outcomes = await destination.publishBatch([row, keyless]);
    assert.deepEqual(outcomes, [
      { id: row.id, status: 'sent' },
      { id: keyless.id, status: 'sent' },
    ]);
    const [first, second] = delivered.entries.flat();
    assert.equal(first?.Source, 'com.example.orders');
    assert.equal(first?.EventBusName, 'orders-bus');
    assert.equal(first?.DetailType, 'order.paid');
    assert.deepEqual(JSON.parse(first!.Detail!), {
      metadata: {
        version: 1,
        messageId: row.id,
        topic: 'order.paid',
        key: 'order-7',
        attempt: 1,
        correlationId: 'corr-9',
        headers: { 'X-Correlation-Id': 'corr-9', 'x-source': 'shop' },
      },
      data: { orderId: 'o-7' },
    });
    assert.deepEqual(JSON.parse(second!.Detail!).metadata, {
      version: 1,
      messageId: keyless.id,
      topic: 'customer.created',
      key: null,
      attempt: 0,
      correlationId: null,
      headers: {},
    });
  });

  it('splits batches over 10 entries or 256 KB into several calls, each within both limits', async () => {
    const { destination, delivered } = acceptingDestination();
    const small = Array.from({ length: 13 }, () => outboundMessage());
    const large = Array.from({ length: 4 }, () => outboundMessage({ payload: { blob: 'x'.repeat(100_000) } }));
    const outcomes = await destination.publishBatch([...small, ...large]);
    assert.deepEqual(outcomes.map((o) => o.status), outcomes.map(() => 'sent'));
    const size = (e: PutEventsRequestEntry) => Buffer.byteLength(e.Source!) + Buffer.byteLength(e.DetailType!) + Buffer.byteLength(e.Detail!);
    for (const call of delivered.entries) {
      assert.ok(call.length <= 10, `a call has ${call.length} entries`);
      assert.ok(call.map(size).reduce((a, b) => a + b, 0) < 262_144, 'a call stays below 256 KB');
    }
    const ids = delivered.entries.flat().map((e) => JSON.parse(e.Detail!).metadata.messageId);
    assert.deepEqual(ids.sort(), [...small, ...large].map((r) => r.id).sort(), 'every row is sent exactly once');
  });

  it('dead-letters at once an entry over 256 KB or a topic too long for a detail type, and sends the rest', async () => {
    const { destination, delivered } = acceptingDestination();
    const huge = outboundMessage({ payload: { blob: 'x'.repeat(262_144) } });
    const longTopic = outboundMessage({ topic: `t.${'x'.repeat(127)}` });
    const ok = outboundMessage();
    const outcomes = await destination.publishBatch([huge, longTopic, ok]);
    assert.deepEqual(outcomes.map(statusAndDeadNow), [['permanent', true], ['permanent', true], ['sent', undefined]]);
    assert.match((outcomes[0] as { error: string }).error, /^event entry is 262\d{3} bytes \(source, detail type and detail\); EventBridge allows less than 262144 \(destinations\.bus\.maxRequestBytes\)$/);
    assert.match((outcomes[1] as { error: string }).error, /topic is 129 characters; EventBridge allows a DetailType of at most 128/);
    assert.deepEqual(delivered.entries.flat().map((e) => JSON.parse(e.Detail!).metadata.messageId), [ok.id]);
  });

  /** The size of an entry as AWS counts it (Source + DetailType + Detail, UTF-8). */
  const entrySize = (e: PutEventsRequestEntry) => Buffer.byteLength(e.Source!) + Buffer.byteLength(e.DetailType!) + Buffer.byteLength(e.Detail!);

  /** A row whose entry is exactly `bytes` bytes, as the destination builds it. */
  function rowOfEntrySize(bytes: number) {
    const row = outboundMessage({ payload: { blob: '' } });
    const base = Buffer.byteLength('com.example.orders') + Buffer.byteLength(row.topic) + Buffer.byteLength(`{"metadata":${JSON.stringify({ version: 1, messageId: row.id, topic: row.topic, key: null, attempt: 0, correlationId: null, headers: {} })},"data":${row.payloadText}}`);
    const payload = { blob: 'x'.repeat(bytes - base) };
    return { ...row, payload, payloadText: JSON.stringify(payload) };
  }

  it('takes an entry below 262,144 bytes and refuses one of exactly 262,144 (the total "must be less than 256KB")', async () => {
    const { destination, delivered } = acceptingDestination();
    const below = rowOfEntrySize(262_143);
    const exactly = rowOfEntrySize(262_144);
    const outcomes = await destination.publishBatch([below, exactly]);
    assert.deepEqual(outcomes.map(statusAndDeadNow), [['sent', undefined], ['permanent', true]]);
    assert.equal((outcomes[1] as { error: string }).error, 'event entry is 262144 bytes (source, detail type and detail); EventBridge allows less than 262144 (destinations.bus.maxRequestBytes)');
    assert.deepEqual(delivered.entries.map((call) => call.map(entrySize)), [[262_143]]);
  });

  it('splits two entries that add up to exactly 262,144 bytes into two calls', async () => {
    const { destination, delivered } = acceptingDestination();
    const outcomes = await destination.publishBatch([rowOfEntrySize(131_072), rowOfEntrySize(131_072)]);
    assert.deepEqual(outcomes.map((o) => o.status), ['sent', 'sent']);
    assert.deepEqual(delivered.entries.map((call) => call.map(entrySize)), [[131_072], [131_072]]);
  });

  it('takes entries up to maxRequestBytes when it is raised (EventBridge took payloads up to 1 MB in 2026), and packs calls by it', async () => {
    const { destination, delivered } = acceptingDestination(1_048_576);
    const outcomes = await destination.publishBatch([rowOfEntrySize(300_000), rowOfEntrySize(200_000), rowOfEntrySize(200_000), rowOfEntrySize(1_048_576)]);
    assert.deepEqual(outcomes.map(statusAndDeadNow), [['sent', undefined], ['sent', undefined], ['sent', undefined], ['permanent', true]]);
    assert.match((outcomes[3] as { error: string }).error, /allows less than 1048576 \(destinations\.bus\.maxRequestBytes\)$/);
    assert.deepEqual(delivered.entries.map((call) => call.map(entrySize)), [[300_000, 200_000, 200_000]], 'one call below 1 MiB');
  });

  it('dead-letters at once a row with an empty topic (plain SQL can write one): PutEvents requires a DetailType', async () => {
    const { destination, delivered } = acceptingDestination();
    const outcomes = await destination.publishBatch([outboundMessage({ topic: '' }), outboundMessage({ topic: 'order.paid' })]);
    assert.deepEqual(outcomes.map(statusAndDeadNow), [['permanent', true], ['sent', undefined]]);
    assert.deepEqual([(outcomes[0] as { errorClass?: string }).errorClass, (outcomes[0] as { error: string }).error], ['DetailTypeEmpty', 'topic is empty; EventBridge requires a DetailType']);
    assert.deepEqual(delivered.entries.map((call) => call.map((e) => e.DetailType)), [['order.paid']]);
  });

  it('counts a topic\'s characters as Unicode code points: 128 emoji are a valid detail type, 129 are not', async () => {
    const { destination, delivered } = acceptingDestination();
    const fits = outboundMessage({ topic: '😀'.repeat(128) });
    const tooLong = outboundMessage({ topic: `${'😀'.repeat(128)}x` });
    const outcomes = await destination.publishBatch([fits, tooLong]);
    assert.deepEqual(outcomes.map(statusAndDeadNow), [['sent', undefined], ['permanent', true]]);
    assert.equal((outcomes[1] as { error: string; errorClass: string }).error, 'topic is 129 characters; EventBridge allows a DetailType of at most 128');
    assert.equal((outcomes[1] as { errorClass: string }).errorClass, 'DetailTypeTooLong');
    assert.deepEqual(delivered.entries.flat().map((e) => e.DetailType), [fits.topic]);
  });

  it('dead-letters at once a payload with an integer outside 64 bits or nested past 1,000 levels of Detail, and sends the rest with every digit', async () => {
    const { destination, delivered } = acceptingDestination();
    const text = (payloadText: string) => outboundMessage({ payload: {}, payloadText });
    const within = text('{"a": 9007199254740993, "b": -9223372036854775808, "c": 9223372036854775807, "d": 12345678901234567890.5}');
    const big = text('{"amount": 12345678901234567890123}');
    const negative = text('{"n": [-9223372036854775809]}');
    let deep = '1';
    for (let i = 0; i < 999; i++) deep = `{"d": ${deep}}`;
    const deepest = text(deep); // 999 levels, 1,000 in the envelope
    const tooDeep = text(`[${deep}]`); // 1,000 levels, 1,001 in the envelope
    const outcomes = await destination.publishBatch([within, big, negative, deepest, tooDeep]);
    assert.deepEqual(outcomes.map(statusAndDeadNow), [['sent', undefined], ['permanent', true], ['permanent', true], ['sent', undefined], ['permanent', true]]);
    assert.deepEqual(outcomes.map((o) => (o.status === 'sent' ? undefined : o.errorClass)), [undefined, 'IntegerOutOfRange', 'IntegerOutOfRange', undefined, 'DetailTooDeep']);
    assert.equal(
      (outcomes[1] as { error: string }).error,
      'event detail has the integer 12345678901234567890123, outside the signed 64-bit range EventBridge PutEvents accepts (-9223372036854775808 to 9223372036854775807)',
    );
    assert.match((outcomes[4] as { error: string }).error, /^event detail nests deeper than 1000 levels/);
    const sent = delivered.entries.flat();
    assert.deepEqual(sent.map((e) => JSON.parse(e.Detail!).metadata.messageId), [within.id, deepest.id]);
    assert.ok(sent[0]!.Detail!.endsWith(`"data":${within.payloadText}}`), 'the digits are sent as stored');
  });

  it('maps each failed entry by its error code', async () => {
    const { destination, mock } = acceptingDestination();
    mock.on(PutEventsCommand).resolves({
      FailedEntryCount: 5,
      Entries: [
        { EventId: 'e-1' },
        { ErrorCode: 'InternalFailure', ErrorMessage: 'internal' },
        { ErrorCode: 'ThrottlingException', ErrorMessage: 'slow down' },
        { ErrorCode: 'MalformedDetail', ErrorMessage: 'bad detail' },
        { ErrorCode: 'InvalidArgument', ErrorMessage: 'bad argument' },
        { ErrorCode: 'AccessDeniedException', ErrorMessage: 'denied' },
      ],
    });
    const rows = Array.from({ length: 7 }, () => outboundMessage());
    const outcomes = await destination.publishBatch(rows);
    assert.deepEqual(outcomes.map((o) => o.id), rows.map((r) => r.id));
    assert.deepEqual(outcomes.map(statusAndDeadNow), [
      ['sent', undefined],
      ['retryable', undefined],
      ['retryable', undefined],
      ['permanent', true],
      ['permanent', true],
      ['permanent', undefined],
      ['retryable', undefined],
    ]);
    assert.equal((outcomes[3] as { error: string }).error, 'EventBridge PutEvents entry failed: MalformedDetail: bad detail');
    assert.equal((outcomes[6] as { error: string }).error, 'EventBridge PutEvents returned no result for this entry');
  });

  const wholeCall: Array<[string, number, 'retryable' | 'permanent']> = [
    ['ThrottlingException', 400, 'retryable'],
    ['InternalException', 500, 'retryable'],
    ['ServiceUnavailable', 503, 'retryable'],
    ['ResourceNotFoundException', 400, 'permanent'],
    ['AccessDeniedException', 400, 'permanent'],
  ];
  for (const [name, httpStatusCode, status] of wholeCall) {
    it(`classifies ${name} (HTTP ${httpStatusCode}) on the whole call as ${status} for every entry`, async () => {
      const { destination, mock } = acceptingDestination();
      mock.on(PutEventsCommand).rejects(new EventBridgeServiceException({ name, $fault: httpStatusCode >= 500 ? 'server' : 'client', $metadata: { httpStatusCode }, message: 'nope' }));
      const rows = [outboundMessage(), outboundMessage()];
      const outcomes = await destination.publishBatch(rows);
      assert.deepEqual(outcomes.map((o) => [o.id, ...statusAndDeadNow(o)]), rows.map((r) => [r.id, status, undefined]));
      assert.match((outcomes[0] as { error: string }).error, new RegExp(`^EventBridge PutEvents failed: ${name} HTTP ${httpStatusCode}: nope$`));
    });
  }

  it('answers retryable "aborted" for an aborted signal and sends nothing', async () => {
    const { destination, delivered } = acceptingDestination();
    const row = outboundMessage();
    assert.deepEqual(await destination.publishBatch([row], AbortSignal.abort()), [{ id: row.id, status: 'retryable', error: 'aborted', errorClass: 'Aborted' }]);
    assert.equal(delivered.entries.length, 0);
  });
});
