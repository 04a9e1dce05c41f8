/**
 * An empty key is no key (docs/claims-and-leases.md: an application that writes `key = ''` in
 * plain SQL gets a keyless row): no `X-Message-Key` on SQS, `"key": null` in the EventBridge
 * envelope, the row id as a FIFO queue's `MessageGroupId` (test/outbox/fifo-empty-key-end-to-end).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { deliveryHeaders, messageKeyOf } from '../../lib/destinations/delivery-metadata.ts';
import { eventEnvelopeJson } from '../../lib/destinations/event-envelope.ts';
import { sqsMessageAttributes } from '../../lib/destinations/sqs-message-attributes.ts';
import { outboundMessage } from '../helpers/outbound-message.ts';

describe('a row with the empty key', () => {
  it('is keyless on every destination: no X-Message-Key, and "key": null in the EventBridge envelope', () => {
    const message = outboundMessage({ key: '' });
    assert.equal(messageKeyOf(message), null);
    assert.ok(!deliveryHeaders(message).some(([name]) => name === 'X-Message-Key'));
    const attributes = sqsMessageAttributes(message);
    assert.ok(attributes.ok && !('X-Message-Key' in attributes.attributes), 'SQS treats it as keyless');
    assert.equal(JSON.parse(eventEnvelopeJson(message)).metadata.key, null);
  });

  it('keeps a real key in the envelope', () => {
    assert.equal(JSON.parse(eventEnvelopeJson(outboundMessage({ key: 'order-7' }))).metadata.key, 'order-7');
    assert.equal(JSON.parse(eventEnvelopeJson(outboundMessage({ key: null }))).metadata.key, null);
  });
});
