/**
 * Lambda entry point of the HTTP inbox receiver (API Gateway HTTP API, payload v2).
 * The receiver (routes, resolved secrets) is built once per container.
 */
import type { APIGatewayProxyEventV2, APIGatewayProxyStructuredResultV2 } from 'aws-lambda';
import { createHttpReceiver, type HttpReceiver } from '../lib/inbox/http-receiver.ts';
import { getContainer, passMetrics, type Container } from '../lib/runtime/container.ts';

const receivers = new WeakMap<Container, HttpReceiver>();

export async function handler(event: APIGatewayProxyEventV2): Promise<APIGatewayProxyStructuredResultV2> {
  const container = await getContainer();
  let receive = receivers.get(container);
  if (receive === undefined) {
    receive = createHttpReceiver(container);
    receivers.set(container, receive);
  }
  const metrics = passMetrics(container);
  try {
    return await receive(event, metrics);
  } finally {
    metrics.flush();
  }
}
