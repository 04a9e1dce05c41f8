/**
 * Lambda entry point of the HTTP inbox receiver (API Gateway HTTP API payload 2.0 or REST API
 * payload 1.0). The receiver (routes, resolved secrets) is built once per container. A database
 * that cannot be reached, at cold start or later, answers 503 with `Retry-After`: the sender
 * retries and nothing is lost. A cold start's own reads (secrets, connection, schema check) end by
 * the invocation's deadline too, so a silent database gets its 503 in time. The store's statement is bounded by the invocation's deadline
 * (`operationBudgetMs`): one still running then is cancelled, nothing is stored, and the answer is
 * a 503 — never a row committed after the invocation has answered or timed out.
 */
import type { APIGatewayProxyStructuredResultV2, Context } from 'aws-lambda';
import { redactError, throwingRedacted } from '../lib/claims/redact.ts';
import { TransientDatabaseError } from '../lib/errors.ts';
import { createHttpReceiver, unavailable } from '../lib/inbox/http-receiver.ts';
import type { ApiGatewayEvent } from '../lib/inbox/http-request.ts';
import { InvocationEndedError, withStatementBudget } from '../lib/db/statement-budget.ts';
import { getContainer, passMetrics, perContainer, type Container } from '../lib/runtime/container.ts';
import { operationBudgetMs } from '../lib/runtime/deadline.ts';

const receiverOf = perContainer(createHttpReceiver);

/** The deployed handler; what it throws leaves it redacted (`throwingRedacted`): the runtime logs a thrown error's message and stack. */
export const handler = throwingRedacted(async function httpInbox(event: ApiGatewayEvent, context?: Context): Promise<APIGatewayProxyStructuredResultV2> {
  let container: Container;
  try {
    container = await getContainer(context);
  } catch (error) {
    if (!(error instanceof TransientDatabaseError || error instanceof InvocationEndedError)) throw error;
    console.error(JSON.stringify({ level: 'ERROR', message: 'inbox receiver cannot reach the database at start-up; answering 503', error: redactError(error) }));
    return unavailable();
  }
  if (context) container.logger.addContext(context);
  const receive = receiverOf(container);
  const metrics = passMetrics(container);
  try {
    if (!context) return await receive(event, metrics);
    return await withStatementBudget(operationBudgetMs(context, container.config.lambda.deadlineMarginMs), () => receive(event, metrics));
  } finally {
    metrics.flush();
  }
});
