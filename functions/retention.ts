/**
 * Retention function (scheduled). Does nothing unless `retention.enabled`; otherwise deletes
 * finished rows by the configured ages in bounded batches until done or the invocation deadline,
 * counting `queuebox_cleanup_messages_deleted_total{table}`. Never touches pending/processing.
 * Every statement is bounded by the deadline (`operationBudgetMs`): a batch still running then is
 * cancelled by the database, and the run returns as incomplete before the invocation ends.
 * The event is the schedule's, `{}` or none: it takes no options, and any other key is refused
 * naming it before the database is reached (`parseRetentionEvent`).
 */
import type { Context } from 'aws-lambda';
import { throwingRedacted } from '../lib/claims/redact.ts';
import { parseRetentionEvent, runRetention, type RetentionResult } from '../lib/operations/retention.ts';
import { getContainer, passMetrics } from '../lib/runtime/container.ts';
import { withStatementBudget } from '../lib/db/statement-budget.ts';
import { createDeadline, operationBudgetMs } from '../lib/runtime/deadline.ts';

/** The deployed handler; what it throws leaves it redacted (`throwingRedacted`): the runtime logs a thrown error's message and stack. */
export const handler = throwingRedacted(async function retention(event: unknown, context: Context): Promise<RetentionResult & { enabled: boolean }> {
  parseRetentionEvent(event);
  const container = await getContainer(context);
  const { config, driver, logger } = container;
  logger.addContext(context);
  if (!config.retention.enabled) {
    logger.info('retention is disabled (retention.enabled = false)');
    return { enabled: false, deleted: { outbox: 0, inbox: 0 }, complete: true };
  }
  const deadline = createDeadline(context, config.lambda.deadlineMarginMs);
  const metrics = passMetrics(container);
  try {
    const result = await withStatementBudget(operationBudgetMs(context, config.lambda.deadlineMarginMs), () =>
      runRetention({ driver, config, metrics, expired: () => deadline.expired() }),
    );
    logger.info('retention finished', { ...result });
    return { enabled: true, ...result };
  } finally {
    metrics.flush();
  }
});
