/**
 * The HTTP receiver (API Gateway HTTP API payload 2.0, or REST API payload 1.0):
 * `POST {inbox.basePath}{source.path}`.
 *
 * Checks, in the order of spec §5: route (404/405), body cap (413), auth (401), JSON (400: not
 * UTF-8, not a JSON object, too deep, too many keys, text or a number PostgreSQL cannot store,
 * larger than `inbox.maxBodyBytes` once its numbers are written out as stored), idempotency
 * key (400), event type / aggregate id / correlation id / delay and their lengths, and for a push
 * source the length of the topic and outbox key the relay will write (400), then store. New → 202 `{"messageId"}`, duplicate → 200 `{"status":"duplicate","messageId"}`. A
 * database that cannot be reached → 503 with `Retry-After`. Every error body is
 * `{"error": "<reason>"}`; a refused request stores nothing. The payload is stored as
 * lib/inbox/parse-json-body.ts describes (PostgreSQL: `jsonb`, each number's value kept exactly; SQL Server: the
 * text sent). The sender's trace headers (`traceparent`,
 * `tracestate`, `X-Amzn-Trace-Id`) are stored with the row when valid and ignored otherwise.
 *
 * The idempotency key follows the source's choice (lib/inbox/idempotency-choice.ts). On a signed
 * source (hmac, stripe, github) `X-Idempotency-Key` is not covered by the signature and is
 * ignored, so a capture re-sent with another value of it cannot squat a future event's key.
 * GitHub signs only the body: its `X-GitHub-Event` header becomes the event type (unless
 * `eventTypePath` reads one from the body) only when it has the shape of an event name.
 */
import type { APIGatewayProxyStructuredResultV2 } from 'aws-lambda';
import { redactedError } from '../claims/redact.ts';
import type { QueueBoxConfig, SourceConfig } from '../config/schema.ts';
import type { Driver } from '../db/driver.ts';
import { PayloadRejectedError, TransientDatabaseError } from '../errors.ts';
import { InvocationEndedError } from '../db/statement-budget.ts';
import type { Logger } from '../observability/logger.ts';
import type { QueueBoxMetrics } from '../observability/metrics.ts';
import { traceContextOf, type TraceContext } from '../observability/trace-context.ts';
import { extractMessageFields, type ExternalValues } from './extract-fields.ts';
import { httpRequestOf, type ApiGatewayEvent, type HttpRequest } from './http-request.ts';
import { InboxRejectionError } from './inbox-rejection.ts';
import { parseJsonBody } from './parse-json-body.ts';
import { checkRelayable } from './relay-fit.ts';
import { idempotencyChoice, idempotencyKeyOf, type IdempotencyChoice } from './idempotency-choice.ts';
import { createAuthenticator, type Authenticator } from './source-auth.ts';
import { staticSecrets, type SecretLookup } from '../runtime/source-secrets.ts';

/** Seconds a sender is asked to wait before retrying when the database is unavailable. */
export const RETRY_AFTER_SECONDS = 5;

interface HttpSource {
  name: string;
  config: SourceConfig;
  authenticate: Authenticator;
  idempotency: IdempotencyChoice;
}

export interface HttpReceiverOptions {
  config: QueueBoxConfig;
  driver: Driver;
  logger: Logger;
  /** Environment holding the sources' secrets (used when `secrets` is not given). */
  env: Readonly<Record<string, string | undefined>>;
  /** The sources' secrets, kept fresh (lib/runtime/source-secrets.ts); default: fixed values from `env`. */
  secrets?: SecretLookup;
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
  const secrets = options.secrets ?? staticSecrets(options.env);
  const routes = new Map<string, HttpSource>();
  for (const [name, source] of Object.entries(config.inbox.sources)) {
    if (source.type !== 'http' || source.path === undefined) continue;
    const authenticate = createAuthenticator(name, source.auth, secrets);
    routes.set(`${config.inbox.basePath}${source.path}`, { name, config: source, authenticate, idempotency: idempotencyChoice(name, source) });
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
      logger.info('inbox request refused', { reason: error.reason, detail: redactedError(error).message, path });
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
    await source.authenticate(request.headers, request.body, now());
    const body = parseJsonBody(request.body, config.inbox.maxBodyBytes);
    const idempotencyKey = idempotencyKeyOf(source.idempotency, request.headers, body.value, request.body, `inbox.sources.${source.name}.idempotencyKeyPath`);
    const fields = extractMessageFields(source.name, withPresetPaths(source.config), body.value, externalValues(source.config, request, idempotencyKey), driver.dialect);
    checkRelayable(source.name, source.config, config.inbox, fields, driver.dialect);
    let result;
    try {
      result = await driver.inboxInsert({ source: source.name, consumption: source.config.consumption, payload: body.value, payloadText: body.text, headers: {}, ...fields, trace: inboundTrace(request) });
    } catch (error) {
      // The database refused the body's JSON although the checks above passed it: an invalid body.
      if (error instanceof PayloadRejectedError) throw new InboxRejectionError('invalid_json', `body is not valid JSON: ${error.message}`);
      metrics.count('inboxStoreFailures', 1, {});
      logger.error('inbox store failed', { source: source.name, error: redactedError(error) });
      // A store cancelled at the invocation's deadline, or not sent for lack of time, stored nothing.
      if (error instanceof TransientDatabaseError || error instanceof InvocationEndedError) return unavailable();
      return json(500, { error: 'the message could not be stored' });
    }
    metrics.count('inboxMessages', 1, { status: result.duplicate ? 'duplicate' : 'new' });
    return result.duplicate ? json(200, { status: 'duplicate', messageId: result.id }) : json(202, { messageId: result.id });
  }
}

/** The sender's trace context: W3C `traceparent` / `tracestate` and API Gateway's `X-Amzn-Trace-Id`; an invalid header is left out. */
function inboundTrace(request: HttpRequest): TraceContext | null {
  return traceContextOf({ traceparent: request.headers('traceparent'), tracestate: request.headers('tracestate'), awsTraceHeader: request.headers('x-amzn-trace-id') });
}

/** The Stripe preset's default event type path: an event's `type`. */
function withPresetPaths(source: SourceConfig): SourceConfig {
  if (source.auth?.type !== 'stripe') return source;
  return { ...source, eventTypePath: source.eventTypePath ?? '$.type' };
}

/** A GitHub event name (`push`, `pull_request`, `check_run`…): the only shape taken from the unsigned header. */
const GITHUB_EVENT = /^[a-z][a-z_]{0,63}$/;

/** The values from outside the body: the key chosen, the correlation id, GitHub's event header. */
function externalValues(source: SourceConfig, request: HttpRequest, idempotencyKey: string): ExternalValues {
  if (source.auth?.type !== 'github') return { idempotencyKey, correlationId: request.headers('x-correlation-id') };
  const event = request.headers('x-github-event');
  if (event !== undefined && source.eventTypePath === undefined && !GITHUB_EVENT.test(event)) {
    throw new InboxRejectionError('invalid_field', 'X-GitHub-Event must be a GitHub event name (lower-case letters and _)');
  }
  return { idempotencyKey, correlationId: request.headers('x-github-delivery'), eventType: event };
}
