/**
 * Lambda entry point of the SQS inbox receiver (SQS trigger with `ReportBatchItemFailures`).
 * Every store is bounded by the invocation's deadline (`operationBudgetMs`): a record whose store
 * is cancelled then, or not sent because no time is left, is reported as a batch item failure and
 * SQS delivers it again — never a row committed after the invocation has ended.
 */
import type { Context, SQSBatchResponse, SQSEvent } from 'aws-lambda';
import { throwingRedacted } from '../lib/claims/redact.ts';
import { createSqsReceiver } from '../lib/inbox/sqs-receiver.ts';
import { withStatementBudget } from '../lib/db/statement-budget.ts';
import { getContainer, passMetrics, perContainer } from '../lib/runtime/container.ts';
import { operationBudgetMs } from '../lib/runtime/deadline.ts';

const receiverOf = perContainer(createSqsReceiver);

/** The deployed handler; what it throws leaves it redacted (`throwingRedacted`): the runtime logs a thrown error's message and stack. */
export const handler = throwingRedacted(async function sqsInbox(event: SQSEvent, context: Context): Promise<SQSBatchResponse> {
  const container = await getContainer(context);
  container.logger.addContext(context);
  const receive = receiverOf(container);
  const metrics = passMetrics(container);
  try {
    return await withStatementBudget(operationBudgetMs(context, container.config.lambda.deadlineMarginMs), () => receive(event, metrics));
  } finally {
    metrics.flush();
  }
});
