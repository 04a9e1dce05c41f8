/**
 * Lambda entry point of the HTTP inbox receiver (API Gateway HTTP API, payload v2).
 * The receiver (routes, resolved secrets) is built once per container.
 */
import type { APIGatewayProxyEventV2, APIGatewayProxyStructuredResultV2, Context } from 'aws-lambda';
import { createHttpReceiver } from '../lib/inbox/http-receiver.ts';
import { getContainer, passMetrics, perContainer } from '../lib/runtime/container.ts';

const receiverOf = perContainer(createHttpReceiver);

export async function handler(event: APIGatewayProxyEventV2, context: Context): Promise<APIGatewayProxyStructuredResultV2> {
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
