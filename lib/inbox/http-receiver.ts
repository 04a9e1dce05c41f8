/**
 * The HTTP receiver (API Gateway HTTP API payload 2.0, or REST API payload 1.0):
 * `POST {inbox.basePath}{source.path}`.
 *
 * Checks, in the order of spec §5: route (404/405), body cap (413), auth (401), JSON (400: not
 * UTF-8, not a JSON object, too deep, too many keys, text PostgreSQL cannot store), idempotency
 * key (400), event type / aggregate id / correlation id / delay and their lengths (400), then
 * store. New → 202 `{"messageId"}`, duplicate → 200 `{"status":"duplicate","messageId"}`. A
 * database that cannot be reached → 503 with `Retry-After`. Every error body is
 * `{"error": "<reason>"}`; a refused request stores nothing. The payload is stored as the text
 * sent, so no digit of a large number is lost.
 *
 * On a signed source (hmac, stripe, github) the idempotency key comes from the signed body only:
 * the `idempotencyKeyPath` value, else the SHA-256 of the body. The `X-Idempotency-Key` header is
 * not covered by the signature and is ignored there, so a replayed or re-headed capture of a
 * signed request is a duplicate, never a new message, and cannot squat a future event's key.
 */
import { createHash } from 'node:crypto';
import type { APIGatewayProxyStructuredResultV2 } from 'aws-lambda';
import type { QueueBoxConfig, SourceConfig } from '../config/schema.ts';
import type { Driver } from '../db/driver.ts';
import { TransientDatabaseError } from '../errors.ts';
import type { Logger } from '../observability/logger.ts';
import type { QueueBoxMetrics } from '../observability/metrics.ts';
import { extractMessageFields, type ExternalValues } from './extract-fields.ts';
import { httpRequestOf, type ApiGatewayEvent, type HttpRequest } from './http-request.ts';
import { InboxRejectionError } from './inbox-rejection.ts';
import { parseJsonBody } from './parse-json-body.ts';
import { createAuthenticator, isSigned, type Authenticator } from './source-auth.ts';

/** Seconds a sender is asked to wait before retrying when the database is unavailable. */
export const RETRY_AFTER_SECONDS = 5;

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
  /** Clock for the signature timestamp tolerance (ms since epoch); default `Date.now`. */
  now?: () => number;
}

/** Handles one API Gateway request (either payload format); `metrics` is the invocation's buffer. */
export type HttpReceiver = (event: ApiGatewayEvent, metrics: QueueBoxMetrics) => Promise<APIGatewayProxyStructuredResultV2>;

function json(statusCode: number, body: unknown, headers: Record<string, string> = {}): APIGatewayProxyStructuredResultV2 {
  return { statusCode, headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) };
}

/** The answer when the database cannot be reached now: 503 with `Retry-After`; nothing was stored. */
export function unavailable(): APIGatewayProxyStructuredResultV2 {
  return json(503, { error: 'the message could not be stored now; retry later' }, { 'retry-after': String(RETRY_AFTER_SECONDS) });
}

/** Builds the receiver once per container; throws `ConfigError` when a source's secret is unset. */
export function createHttpReceiver(options: HttpReceiverOptions): HttpReceiver {
  const { config, driver, logger } = options;
  const now = options.now ?? Date.now;
  const routes = new Map<string, HttpSource>();
  for (const [name, source] of Object.entries(config.inbox.sources)) {
    if (source.type !== 'http' || source.path === undefined) continue;
    routes.set(`${config.inbox.basePath}${source.path}`, { name, config: source, authenticate: createAuthenticator(name, source.auth, options.env) });
    if (source.auth?.type === 'none') {
      logger.warn('inbox source accepts unauthenticated requests (auth type none)', { source: name, path: `${config.inbox.basePath}${source.path}` });
    }
  }

  return async (event, metrics) => {
    let path = '(unreadable)';
    try {
      const request = httpRequestOf(event);
      path = request.path;
      return await receive(request, metrics);
    } catch (error) {
      if (!(error instanceof InboxRejectionError)) throw error;
      metrics.count('inboxRejections', 1, { reason: error.reason });
      logger.info('inbox request refused', { reason: error.reason, detail: error.message, path });
      return json(error.status, { error: error.message }, error.reason === 'method_not_allowed' ? { allow: 'POST' } : {});
    }
  };

  async function receive(request: HttpRequest, metrics: QueueBoxMetrics): Promise<APIGatewayProxyStructuredResultV2> {
    const source = routes.get(request.path);
    if (source === undefined) throw new InboxRejectionError('unknown_source', `no inbox source at ${request.path}`);
    if (request.method !== 'POST') throw new InboxRejectionError('method_not_allowed', `method ${request.method} is not allowed: use POST`);
    if (request.body.length > config.inbox.maxBodyBytes) {
      throw new InboxRejectionError('body_too_large', `body of ${request.body.length} bytes exceeds the limit of ${config.inbox.maxBodyBytes} bytes`);
    }
    source.authenticate(request.headers, request.body, now());
    const body = parseJsonBody(request.body);
    const fields = extractMessageFields(source.name, withPresetPaths(source.config), body.value, externalValues(source.config, request));
    let result;
    try {
      result = await driver.inboxInsert({ source: source.name, consumption: source.config.consumption, payload: body.value, payloadText: body.text, headers: {}, ...fields });
    } catch (error) {
      logger.error('inbox store failed', { source: source.name, error: error as Error });
      if (error instanceof TransientDatabaseError) return unavailable();
      return json(500, { error: 'the message could not be stored' });
    }
    metrics.count('inboxMessages', 1, { status: result.duplicate ? 'duplicate' : 'new' });
    return result.duplicate ? json(200, { status: 'duplicate', messageId: result.id }) : json(202, { messageId: result.id });
  }
}

/** The Stripe preset's default paths: an event's `id` is its idempotency key, `type` its event type. */
function withPresetPaths(source: SourceConfig): SourceConfig {
  if (source.auth?.type !== 'stripe') return source;
  return { ...source, idempotencyKeyPath: source.idempotencyKeyPath ?? '$.id', eventTypePath: source.eventTypePath ?? '$.type' };
}

/** Header values a source may use: on signed sources, none that the signature does not cover. */
function externalValues(source: SourceConfig, request: HttpRequest): ExternalValues {
  const correlationId = request.headers('x-correlation-id');
  if (!isSigned(source.auth)) return { idempotencyKey: request.headers('x-idempotency-key'), correlationId };
  const bodyDigest = `sha256:${createHash('sha256').update(request.body).digest('hex')}`;
  if (source.auth?.type === 'github') {
    // GitHub signs the body only. The event name and delivery id headers are metadata; the key
    // stays the body's digest, so a capture replayed under another delivery id is a duplicate.
    return { fallbackIdempotencyKey: bodyDigest, correlationId: request.headers('x-github-delivery'), eventType: request.headers('x-github-event') };
  }
  return { fallbackIdempotencyKey: bodyDigest, correlationId };
}
