/**
 * A batch split into several calls by the service's size limit sends them one after another: a
 * `publishBatch` is one of the pass's `outbox.concurrency` call slots, and the calls it is split
 * into must not each take one (ten rows of 600 KB were ten SQS calls in flight at once with a
 * concurrency of 1).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { EntryOutcome } from '../../lib/destinations/destination.ts';
import { publishInCalls } from '../../lib/destinations/pack-batches.ts';
import { outboundMessage } from '../helpers/outbound-message.ts';

describe('publishInCalls', () => {
  it('sends the calls of a split batch one after another, each message answered in input order', async () => {
    const messages = Array.from({ length: 10 }, (_, i) => outboundMessage({ id: `m${i}` }));
    let inFlight = 0;
    let most = 0;
    const calls: string[][] = [];
    const outcomes = await publishInCalls(
      messages,
      { maxEntries: 10, maxBytes: 1000 },
      (message, index) => ({ index, bytes: 600, id: message.id }),
      async (call) => {
        inFlight++;
        most = Math.max(most, inFlight);
        calls.push(call.map((c) => c.id));
        await new Promise((resolve) => setTimeout(resolve, 20));
        inFlight--;
        return call.map((c): EntryOutcome => ({ id: c.id, status: 'sent' }));
      },
    );
    assert.equal(calls.length, 10, 'one 600-byte entry per 1,000-byte call');
    assert.equal(most, 1, 'never two calls at once');
    assert.deepEqual(outcomes.map((o) => o.id), messages.map((m) => m.id));
  });

  it('stops at a call that fails as a whole: the calls after it are not sent', async () => {
    const messages = Array.from({ length: 3 }, (_, i) => outboundMessage({ id: `m${i}` }));
    let sent = 0;
    await assert.rejects(
      publishInCalls(messages, { maxEntries: 1, maxBytes: 1000 }, (message, index) => ({ index, bytes: 1 }), async () => {
        sent++;
        throw new Error('throttled');
      }),
      /throttled/,
    );
    assert.equal(sent, 1);
  });

  it('tells progress of a split batch as it goes: refused messages first, then each call before it is sent and when it answers', async () => {
    const messages = Array.from({ length: 4 }, (_, i) => outboundMessage({ id: `m${i}` }));
    const events: string[] = [];
    const progress = {
      offering: (indexes: readonly number[]) => {
        events.push(`offering ${indexes.join(',')}`);
        return indexes;
      },
      answered: (indexes: readonly number[], outcomes: readonly EntryOutcome[]) => events.push(`answered ${indexes.join(',')}: ${outcomes.map((o) => `${o.id} ${o.status}`).join(', ')}`),
    };
    await publishInCalls(
      messages,
      { maxEntries: 10, maxBytes: 1000 },
      (message, index) => (index === 1 ? { error: 'too large', errorClass: 'MessageTooLarge' } : { index, bytes: 600 }),
      async (call) => {
        events.push(`send ${call.map((c) => c.index).join(',')}`);
        return call.map((c): EntryOutcome => (c.index === 2 ? { id: `m${c.index}`, status: 'retryable', error: 'throttled' } : { id: `m${c.index}`, status: 'sent' }));
      },
      { progress },
    );
    assert.deepEqual(events, [
      'answered 1: m1 permanent',
      'offering 0',
      'send 0',
      'answered 0: m0 sent',
      'offering 2',
      'send 2',
      'answered 2: m2 retryable',
      'offering 3',
      'send 3',
      'answered 3: m3 sent',
    ]);
  });

  it('tells progress nothing when the batch goes in one call, and offers no call once the signal is aborted', async () => {
    const messages = Array.from({ length: 3 }, (_, i) => outboundMessage({ id: `m${i}` }));
    const told: string[] = [];
    const progress = {
      offering: (indexes: readonly number[]) => {
        told.push('offering');
        return indexes;
      },
      answered: () => told.push('answered'),
    };
    const answer = async (call: Array<{ index: number }>) => call.map((c): EntryOutcome => ({ id: `m${c.index}`, status: 'sent' }));
    await publishInCalls(messages, { maxEntries: 10, maxBytes: 1000 }, (message, index) => ({ index, bytes: 1 }), answer, { progress });
    assert.deepEqual(told, [], 'one call: its answer is the batch answer');

    const stop = new AbortController();
    await publishInCalls(
      messages,
      { maxEntries: 1, maxBytes: 1000 },
      (message, index) => ({ index, bytes: 1 }),
      async (call) => {
        stop.abort();
        return answer(call);
      },
      { signal: stop.signal, progress },
    );
    assert.deepEqual(told, ['offering', 'answered'], 'the calls after the abort are not offered');
  });

  it('leaves out of a later call the messages progress withdraws (their claim was lost), and skips a call left empty', async () => {
    const messages = Array.from({ length: 5 }, (_, i) => outboundMessage({ id: `m${i}` }));
    const sends: number[][] = [];
    const outcomes = await publishInCalls(
      messages,
      { maxEntries: 2, maxBytes: 1000 },
      (message, index) => ({ index, bytes: 1 }),
      async (call) => {
        sends.push(call.map((c) => c.index));
        return call.map((c): EntryOutcome => ({ id: `m${c.index}`, status: 'sent' }));
      },
      { progress: { offering: (indexes) => indexes.filter((i) => i !== 1 && i !== 2 && i !== 3), answered: () => {} } },
    );
    assert.deepEqual(sends, [[0], [4]], 'call two (2, 3) held only withdrawn messages: not sent');
    assert.deepEqual(
      outcomes.map((o) => [o.id, o.status, o.status === 'sent' ? undefined : o.errorClass]),
      [
        ['m0', 'sent', undefined],
        ['m1', 'retryable', 'ClaimLost'],
        ['m2', 'retryable', 'ClaimLost'],
        ['m3', 'retryable', 'ClaimLost'],
        ['m4', 'sent', undefined],
      ],
    );
  });
});
