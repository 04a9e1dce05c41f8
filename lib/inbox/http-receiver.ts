/**
 * The HTTP receiver (API Gateway HTTP API, payload v2): `POST {inbox.basePath}{source.path}`.
 *
 * Checks, in the order of spec §5: route (404/405), body cap (413), auth (401), JSON (400),
 * idempotency key (400), event type / aggregate id / correlation id / delay and their lengths
 * (400), then store. New → 202 `{"messageId"}`, duplicate → 200
 * `{"status":"duplicate","messageId"}`. Every error body is `{"error": "<reason>"}`; a refused
 * request stores nothing.
 */
import type { APIGatewayProxyEventV2, APIGatewayProxyStructuredResultV2 } from 'aws-lambda';
import type { QueueBoxConfig, SourceConfig } from '../config/schema.ts';
import type { Driver } from '../db/driver.ts';
import { TransientDatabaseError } from '../errors.ts';
import type { Logger } from '../observability/logger.ts';
import type { QueueBoxMetrics } from '../observability/metrics.ts';
import { extractMessageFields } from './extract-fields.ts';
import { parseJsonObject } from './parse-json-object.ts';
import { InboxRejectionError } from './inbox-rejection.ts';
import { createAuthenticator, type Authenticator, type HeaderLookup } from './source-auth.ts';

interface HttpSource {
  name: string;
  config: SourceConfig;
  authenticate: Authenticator;
}

export interface HttpReceiverOptions {
  config: QueueBoxConfig;
  driver: Driver;
  logger: Logger;
  /** Environment holding the sources' secrets. */
  env: Readonly<Record<string, string | undefined>>;
  /** Clock for the hmac timestamp tolerance (ms since epoch); default `Date.now`. */
  now?: () => number;
}

/** Handles one API Gateway request; `metrics` is the invocation's buffer. */
export type HttpReceiver = (event: APIGatewayProxyEventV2, metrics: QueueBoxMetrics) => Promise<APIGatewayProxyStructuredResultV2>;

function json(statusCode: number, body: unknown, headers: Record<string, string> = {}): APIGatewayProxyStructuredResultV2 {
  return { statusCode, headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) };
}

/** Builds the receiver once per container; throws `ConfigError` when a source's secret is unset. */
export function createHttpReceiver(options: HttpReceiverOptions): HttpReceiver {
  const { config, driver, logger } = options;
  const now = options.now ?? Date.now;
  const routes = new Map<string, HttpSource>();
  for (const [name, source] of Object.entries(config.inbox.sources)) {
    if (source.type !== 'http' || source.path === undefined) continue;
    routes.set(`${config.inbox.basePath}${source.path}`, { name, config: source, authenticate: createAuthenticator(name, source.auth, options.env) });
  }

  return async (event, metrics) => {
    try {
      return await receive(event, metrics);
    } catch (error) {
      if (!(error instanceof InboxRejectionError)) throw error;
      metrics.count('inboxRejections', 1, { reason: error.reason });
      logger.info('inbox request refused', { reason: error.reason, detail: error.message, path: event.rawPath });
      return json(error.status, { error: error.message }, error.reason === 'method_not_allowed' ? { allow: 'POST' } : {});
    }
  };

  async function receive(event: APIGatewayProxyEventV2, metrics: QueueBoxMetrics): Promise<APIGatewayProxyStructuredResultV2> {
    const source = routes.get(requestPath(event));
    if (source === undefined) throw new InboxRejectionError('unknown_source', `no inbox source at ${event.rawPath}`);
    if (event.requestContext.http.method.toUpperCase() !== 'POST') {
      throw new InboxRejectionError('method_not_allowed', `method ${event.requestContext.http.method} is not allowed: use POST`);
    }
    const rawBody = Buffer.from(event.body ?? '', event.isBase64Encoded ? 'base64' : 'utf8');
    if (rawBody.length > config.inbox.maxBodyBytes) {
      throw new InboxRejectionError('body_too_large', `body of ${rawBody.length} bytes exceeds the limit of ${config.inbox.maxBodyBytes} bytes`);
    }
    const headers = headerLookup(event.headers);
    source.authenticate(headers, rawBody, now());
    const body = parseJsonObject(rawBody);
    const fields = extractMessageFields(source.name, source.config, body, {
      idempotencyKey: headers('x-idempotency-key'),
      correlationId: headers('x-correlation-id'),
    });
    let result;
    try {
      result = await driver.inboxInsert({ source: source.name, consumption: source.config.consumption, payload: body, headers: {}, ...fields });
    } catch (error) {
      logger.error('inbox store failed', { source: source.name, error: error as Error });
      const transient = error instanceof TransientDatabaseError;
      return json(transient ? 503 : 500, { error: transient ? 'the message could not be stored now; retry later' : 'the message could not be stored' });
    }
    metrics.count('inboxMessages', 1, { status: result.duplicate ? 'duplicate' : 'new' });
    return result.duplicate ? json(200, { status: 'duplicate', messageId: result.id }) : json(202, { messageId: result.id });
  }
}

/** The request path without the stage prefix of a named (non-`$default`) stage. */
function requestPath(event: APIGatewayProxyEventV2): string {
  const path = event.rawPath ?? event.requestContext.http.path;
  const stage = event.requestContext.stage;
  if (stage && stage !== '$default' && path.startsWith(`/${stage}/`)) return path.slice(stage.length + 1);
  return path;
}

/** Case-insensitive lookup over API Gateway headers (HTTP APIs lower-case them; tests may not). */
export function headerLookup(headers: Readonly<Record<string, string | undefined>> | undefined): HeaderLookup {
  const lower = new Map<string, string>();
  for (const [name, value] of Object.entries(headers ?? {})) if (value !== undefined) lower.set(name.toLowerCase(), value);
  return (name) => lower.get(name.toLowerCase());
}
