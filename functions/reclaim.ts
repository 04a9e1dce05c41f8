/**
 * Reclaim function. Scheduled (the schedule's event, `source: aws.events`): reclaims outbox and
 * inbox rows whose lease expired, gated by the shared database throttle. Invoked by hand
 * (`osls invoke -f reclaim` with no event or `{}`, or `{"force": true}`): reclaims both tables
 * now, ignoring the throttle; `{"force": false}` keeps to the throttle as the schedule does. Any
 * other key, or a `force` that is not true or false, is refused naming it before the database is
 * reached (`reclaimEventThrottled`). Either way a run that returns records that it finished (the
 * heartbeat: `pass-heartbeat.ts`). Returns `{ outbox, inbox }` — rows returned to `pending` — and
 * `{ outboxDead, inboxDead }`, rows whose last attempt's lease expired (now `dead`, counted in
 * `queuebox_outbox_messages_total` / `queuebox_inbox_messages_total` with `status="dead"`).
 * When one table's reclaim fails the other's rows are counted all the same (they went back or
 * dead), then the invocation fails. Every statement is bounded by the deadline
 * (`operationBudgetMs`), so none runs on after the invocation; a reclaim cancelled there fails
 * saying so (`reclaimCutAtDeadline`), not as a statement timeout. The counts are written as soon
 * as the reclaim answered, before the heartbeat's stamp, which is bounded by the deadline or a
 * short slice past it (`closingBudgetMs`): the handler returns before the invocation ends.
 */
import type { Context } from 'aws-lambda';
import { throwingRedacted } from '../lib/claims/redact.ts';
import { cutAtDeadline, reclaimCutAtDeadline } from '../lib/operations/deadline-cut.ts';
import { ReclaimIncompleteError, reclaimEventThrottled, reclaimNow, type ReclaimCounts } from '../lib/operations/reclaim-now.ts';
import { withStatementBudget } from '../lib/db/statement-budget.ts';
import { closingBudgetMs, operationDeadline } from '../lib/runtime/deadline.ts';
import { getContainer, passMetrics } from '../lib/runtime/container.ts';
import { recordPassFinished } from '../lib/runtime/pass-heartbeat.ts';

/** The deployed handler; what it throws leaves it redacted (`throwingRedacted`): the runtime logs a thrown error's message and stack. */
export const handler = throwingRedacted(async function reclaim(event: unknown, context: Context): Promise<ReclaimCounts & { throttled: boolean }> {
  const throttled = reclaimEventThrottled(event);
  const container = await getContainer(context);
  container.logger.addContext(context);
  const metrics = passMetrics(container);
  const count = (counts: ReclaimCounts) => {
    metrics.count('outboxReclaimed', counts.outbox);
    // Rows whose last attempt's lease expired go dead here as in the passes' own reclaim step (the
    // two share the throttle: whichever runs first takes the expired rows), and are counted and
    // logged alike, so the dead-message alarms see them whichever ran.
    metrics.count('outboxMessages', counts.outboxDead, { status: 'dead' });
    metrics.count('inboxMessages', counts.inboxDead, { status: 'dead' });
    if (counts.outboxDead > 0) container.logger.error('outbox rows dead: the lease of their last attempt expired during the delivery', { count: counts.outboxDead });
    if (counts.inboxDead > 0) container.logger.error('inbox rows dead: the lease of their last attempt expired during the forward', { count: counts.inboxDead });
  };
  const marginMs = container.config.lambda.deadlineMarginMs;
  const deadline = operationDeadline(context, marginMs);
  const budget = () => deadline.remainingMs();
  const hadMs = budget();
  try {
    return await withStatementBudget(budget, async () => {
      let counts: ReclaimCounts;
      try {
        counts = await reclaimNow({ driver: container.driver, config: container.config, throttled });
      } catch (error) {
        if (!(error instanceof ReclaimIncompleteError)) throw error;
        count(error.counts);
        throw cutAtDeadline(error, budget()) ? reclaimCutAtDeadline(error, { dialect: container.driver.dialect, hadMs, marginMs }) : error;
      }
      count(counts);
      // Writes the counts before its stamp, which may wait on the database (the dead-message alarms watch them).
      await recordPassFinished({ driver: container.driver, metrics, logger: container.logger, worker: 'reclaim', remainingMs: closingBudgetMs(deadline) });
      container.logger.info('reclaim finished', { ...counts, throttled });
      return { ...counts, throttled };
    });
  } finally {
    metrics.flush();
  }
});
