/**
 * Factory of `OutboundMessage`s for destination tests: a fresh row id per call, no key, no
 * headers, attempt 0, never replayed, unless `overrides` say otherwise; `payloadText` is the
 * payload stringified unless given.
 */
import { randomUUID } from 'node:crypto';
import type { OutboundMessage } from '../../lib/destinations/destination.ts';

/** A claimed row as the poller would hand it to a destination. */
export function outboundMessage(overrides: Partial<OutboundMessage> = {}): OutboundMessage {
  const payload = overrides.payload ?? { orderId: 'o-1' };
  return {
    id: randomUUID(),
    topic: 'order.paid',
    key: null,
    payload,
    payloadText: JSON.stringify(payload),
    headers: {},
    attempt: 0,
    replayCount: 0,
    ...overrides,
  };
}
