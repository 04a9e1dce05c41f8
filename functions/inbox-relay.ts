/**
 * Lambda entry point of the scheduled inbox push relay: one pass, bounded by the invocation
 * deadline (`getRemainingTimeInMillis() − lambda.deadlineMarginMs`); records that it finished (the
 * heartbeat: `pass-heartbeat.ts`) and returns the pass summary.
 */
import type { Context } from 'aws-lambda';
import { runRelayPass, type RelaySummary } from '../lib/inbox/relay-pass.ts';
import { getContainer, passMetrics } from '../lib/runtime/container.ts';
import { createDeadline } from '../lib/runtime/deadline.ts';
import { recordPassFinished } from '../lib/runtime/pass-heartbeat.ts';

export async function handler(_event: unknown, context: Context): Promise<RelaySummary> {
  const container = await getContainer();
  container.logger.addContext(context);
  const metrics = passMetrics(container);
  const deadline = createDeadline(context, container.config.lambda.deadlineMarginMs);
  try {
    const summary = await runRelayPass({ ...container, metrics, deadline });
    await recordPassFinished({ driver: container.driver, metrics, logger: container.logger, worker: 'inboxRelay', remainingMs: deadline.invocationRemainingMs });
    container.logger.info('inbox relay pass', { ...summary });
    return summary;
  } finally {
    metrics.flush();
  }
}
