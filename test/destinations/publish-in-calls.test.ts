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
});
