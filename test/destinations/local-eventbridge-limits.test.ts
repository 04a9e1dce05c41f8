/**
 * The local EventBridge endpoint enforces the limits `PutEvents` documents, through the real
 * `@aws-sdk/client-eventbridge` client: entries must add up to less than 256 KB (refused whole),
 * and a `Detail` with an integer outside the signed 64-bit range or nested deeper than 1,000
 * levels is refused per entry (`MalformedDetail`; AWS documents no code for these).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { EventBridgeClient, PutEventsCommand, type PutEventsRequestEntry } from '@aws-sdk/client-eventbridge';
import { startLocalEventBridge, type LocalEventBridge } from '../../lib/local/local-eventbridge.ts';

const credentials = { accessKeyId: 'test', secretAccessKey: 'test' };

describe('local EventBridge endpoint: PutEvents limits', () => {
  let bus: LocalEventBridge;
  let client: EventBridgeClient;
  before(async () => {
    bus = await startLocalEventBridge();
    client = new EventBridgeClient({ endpoint: bus.endpoint, region: 'us-east-1', credentials, maxAttempts: 1 });
  });
  after(async () => {
    client.destroy();
    await bus.stop();
  });

  const entry = (Detail: string): PutEventsRequestEntry => ({ Source: 'shop', DetailType: 't', Detail });

  it('refuses a request of 256 KB or more whole, unless started with a higher maxRequestBytes (a bus that takes 1 MB events)', async () => {
    const large = entry(JSON.stringify({ blob: 'x'.repeat(300_000) }));
    await assert.rejects(client.send(new PutEventsCommand({ Entries: [large] })), (error: Error) => error.name === 'ValidationException' && /must be less than 262144/.test(error.message));
    const roomy = await startLocalEventBridge({ maxRequestBytes: 1_048_576 });
    const roomyClient = new EventBridgeClient({ endpoint: roomy.endpoint, region: 'us-east-1', credentials, maxAttempts: 1 });
    try {
      const output = await roomyClient.send(new PutEventsCommand({ Entries: [large] }));
      assert.equal(output.FailedEntryCount, 0);
      assert.equal(roomy.events().length, 1);
    } finally {
      roomyClient.destroy();
      await roomy.stop();
    }
  });

  it('accepts integers within 64 bits with every digit and refuses one outside, per entry', async () => {
    const within = '{"a": 9007199254740993, "b": -9223372036854775808, "c": 9223372036854775807, "d": 12345678901234567890.5, "s": "12345678901234567890123"}';
    const output = await client.send(
      new PutEventsCommand({ Entries: [entry(within), entry('{"n": 12345678901234567890123}'), entry('{"n": [-9223372036854775809]}'), entry('{"n": 9223372036854775808}')] }),
    );
    assert.equal(output.FailedEntryCount, 3);
    assert.ok(output.Entries?.[0]?.EventId);
    assert.deepEqual(output.Entries?.slice(1).map((e) => e.ErrorCode), ['MalformedDetail', 'MalformedDetail', 'MalformedDetail']);
    assert.deepEqual(bus.events().map((e) => e.detailText), [within]);
  });

  it('accepts a Detail nested 1,000 levels deep and refuses 1,001, per entry', async () => {
    let deep = '1';
    for (let i = 0; i < 999; i++) deep = `[${deep}]`;
    const output = await client.send(new PutEventsCommand({ Entries: [entry(`{"d": ${deep}}`), entry(`{"d": [${deep}]}`)] }));
    assert.ok(output.Entries?.[0]?.EventId, 'Detail of 1,000 levels');
    assert.equal(output.Entries?.[1]?.ErrorCode, 'MalformedDetail', 'Detail of 1,001 levels');
  });

  it('refuses a request whose entries add up to 262,144 bytes and takes one of 262,143', async () => {
    const ofSize = (bytes: number) => entry(JSON.stringify({ x: 'y'.repeat(bytes - 'shop'.length - 't'.length - '{"x":""}'.length) }));
    const sizeOf = (e: PutEventsRequestEntry) => Buffer.byteLength(e.Source!) + Buffer.byteLength(e.DetailType!) + Buffer.byteLength(e.Detail!);
    assert.equal(sizeOf(ofSize(262_144)), 262_144);
    await assert.rejects(client.send(new PutEventsCommand({ Entries: [ofSize(262_144)] })), (error: Error) => error.name === 'ValidationException');
    await assert.rejects(client.send(new PutEventsCommand({ Entries: [ofSize(131_072), ofSize(131_072)] })), (error: Error) => error.name === 'ValidationException');
    const output = await client.send(new PutEventsCommand({ Entries: [ofSize(262_143)] }));
    assert.equal(output.FailedEntryCount, 0);
  });
});
