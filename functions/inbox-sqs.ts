/**
 * Lambda entry point of the SQS inbox receiver (SQS trigger with `ReportBatchItemFailures`).
 */
import type { Context, SQSBatchResponse, SQSEvent } from 'aws-lambda';
import { createSqsReceiver } from '../lib/inbox/sqs-receiver.ts';
import { getContainer, passMetrics, perContainer } from '../lib/runtime/container.ts';

const receiverOf = perContainer(createSqsReceiver);

export async function handler(event: SQSEvent, context: Context): Promise<SQSBatchResponse> {
  const container = await getContainer();
  container.logger.addContext(context);
  const receive = receiverOf(container);
  const metrics = passMetrics(container);
  try {
    return await receive(event, metrics);
  } finally {
    metrics.flush();
  }
}
