/**
 * Reclaim function. Scheduled (`source: aws.events`): reclaims outbox and inbox rows whose lease
 * expired, gated by the shared database throttle. Invoked by hand (`osls invoke -f reclaim`, any
 * event without `source: aws.events`, or `{"force": true}`): reclaims both tables now, ignoring
 * the throttle. Returns `{ outbox, inbox }` — rows returned to `pending`.
 */
import type { Context } from 'aws-lambda';
import { isScheduledEvent, reclaimNow, type ReclaimCounts } from '../lib/operations/reclaim-now.ts';
import { getContainer, passMetrics } from '../lib/runtime/container.ts';

export async function handler(event: unknown, context: Context): Promise<ReclaimCounts & { throttled: boolean }> {
  const container = await getContainer();
  container.logger.addContext(context);
  const throttled = isScheduledEvent(event);
  const metrics = passMetrics(container);
  const counts = await reclaimNow({ driver: container.driver, config: container.config, throttled });
  metrics.count('outboxReclaimed', counts.outbox);
  metrics.flush();
  container.logger.info('reclaim finished', { ...counts, throttled });
  return { ...counts, throttled };
}
