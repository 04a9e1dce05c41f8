/**
 * Lambda entry point of the scheduled inbox push relay: one pass, bounded by the invocation
 * deadline (`getRemainingTimeInMillis() − lambda.deadlineMarginMs`); returns the pass summary.
 */
import type { Context } from 'aws-lambda';
import { runRelayPass, type RelaySummary } from '../lib/inbox/relay-pass.ts';
import { getContainer, passMetrics } from '../lib/runtime/container.ts';
import { createDeadline } from '../lib/runtime/deadline.ts';

export async function handler(_event: unknown, context: Context): Promise<RelaySummary> {
  const container = await getContainer();
  container.logger.addContext(context);
  const metrics = passMetrics(container);
  try {
    const summary = await runRelayPass({
      ...container,
      metrics,
      deadline: createDeadline(context, container.config.lambda.deadlineMarginMs),
    });
    container.logger.info('inbox relay pass', { ...summary });
    return summary;
  } finally {
    metrics.flush();
  }
}
