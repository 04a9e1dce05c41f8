/**
 * Type-checked only (test/data-layers/strict-types.test.ts, Drizzle's own check), never run:
 * `queuebox/drizzle`'s `enqueue` takes an `EnqueueMessage`, without `payloadText` or `trace`.
 */
import { enqueue, type DrizzleTransaction, type EnqueueMessage } from '../../../lib/data-layers/drizzle.ts';

const message: EnqueueMessage = { topic: 'order.paid', payload: { orderId: 'o-1' } };

export async function drizzleMessages(tx: DrizzleTransaction): Promise<void> {
  await enqueue(tx, message);
  // @ts-expect-error payloadText is QueueBox's, not the application's
  await enqueue(tx, { topic: 't', payload: {}, payloadText: '{}' });
  // @ts-expect-error trace is captured by enqueue, not given
  await enqueue(tx, { topic: 't', payload: {}, trace: null });
}
