/**
 * Lambda entry point of the SQS inbox receiver (SQS trigger with `ReportBatchItemFailures`).
 */
import type { SQSBatchResponse, SQSEvent } from 'aws-lambda';
import { createSqsReceiver, type SqsReceiver } from '../lib/inbox/sqs-receiver.ts';
import { getContainer, passMetrics, type Container } from '../lib/runtime/container.ts';

const receivers = new WeakMap<Container, SqsReceiver>();

export async function handler(event: SQSEvent): Promise<SQSBatchResponse> {
  const container = await getContainer();
  let receive = receivers.get(container);
  if (receive === undefined) {
    receive = createSqsReceiver(container);
    receivers.set(container, receive);
  }
  const metrics = passMetrics(container);
  try {
    return await receive(event, metrics);
  } finally {
    metrics.flush();
  }
}
