/**
 * The payment provider of `queuebox local`: for each demo order it delivers a signed payment
 * webhook to the demo HTTP inbox source, by invoking the real `functions/inbox-http.ts` handler
 * with the API Gateway HTTP API (payload v2) event that API Gateway would pass for
 * `POST {inbox.basePath}/payments`.
 *
 * Like a real provider it misbehaves now and then, so the run shows the inbox's answers: the
 * webhook of every fourth order (`n % 4 === 1`) is delivered twice with the same
 * `X-Idempotency-Key` (the second answer is 200 duplicate), and every tenth order (`n % 10 === 7`)
 * also draws a forged webhook signed with a wrong secret (401, nothing stored). A 5xx answer or a
 * failed invocation is retried up to `MAX_TRIES` times, as providers retry.
 */
import { randomUUID } from 'node:crypto';
import type { APIGatewayProxyEventV2, APIGatewayProxyStructuredResultV2, Context } from 'aws-lambda';
import type { SourceConfig } from '../config/schema.ts';
import { hmacSignature } from '../inbox/source-auth.ts';
import type { InvocationScope } from './invocation-scope.ts';
import { createInvocationContext } from '../runtime/invocation-context.ts';
import type { DemoOrder } from './local-demo-feed.ts';

/** Deliveries of one webhook tried before it counts as failed. */
export const MAX_TRIES = 3;

/** Answers the demo provider received, counted per delivery (a duplicate delivery counts once, as `duplicate`). */
export interface WebhookTally {
  /** 202: stored. */
  received: number;
  /** 200 duplicate: already stored under the same idempotency key. */
  duplicate: number;
  /** 4xx: refused, nothing stored. */
  rejected: number;
  /** No 2xx/4xx answer after `MAX_TRIES` deliveries. */
  failed: number;
}

export interface DemoWebhooksOptions {
  /** The request path: `{inbox.basePath}{source.path}`. */
  path: string;
  /** The source's settings (hmac algorithm and header names). */
  source: SourceConfig;
  /** The shared secret the source verifies with. */
  secret: string;
  /** Reports a failed delivery. */
  out: (line: string) => void;
  /** Runs each handler call as its own invocation (the local runner's scope). */
  scope?: InvocationScope;
}

type HttpHandler = (event: APIGatewayProxyEventV2, context: Context) => Promise<APIGatewayProxyStructuredResultV2>;

/** Delivers the demo payment webhooks; `tally` counts the answers. */
export class DemoWebhooks {
  readonly tally: WebhookTally = { received: 0, duplicate: 0, rejected: 0, failed: 0 };
  readonly #options: DemoWebhooksOptions;
  #handler: Promise<HttpHandler> | undefined;

  constructor(options: DemoWebhooksOptions) {
    this.#options = options;
  }

  /** Delivers the payment webhook of `order` (twice, or with a forged sibling, as described above). */
  async deliverFor(order: DemoOrder): Promise<void> {
    const key = `pay_${order.orderId}`;
    const body = JSON.stringify({
      id: key,
      type: order.n % 5 === 4 ? 'payment.failed' : 'payment.succeeded',
      orderId: order.orderId,
      customer: order.customer,
      amountCents: order.amountCents,
    });
    await this.#deliver(body, key, `demo-${order.n}`, this.#options.secret);
    if (order.n % 4 === 1) await this.#deliver(body, key, `demo-${order.n}`, this.#options.secret);
    if (order.n % 10 === 7) {
      const forged = JSON.stringify({ id: `forged_${order.orderId}`, type: 'payment.refunded', orderId: order.orderId, amountCents: 99_999 });
      await this.#deliver(forged, `forged_${order.orderId}`, `demo-${order.n}`, `${this.#options.secret}-forged`);
    }
  }

  async #deliver(body: string, idempotencyKey: string, correlationId: string, secret: string): Promise<void> {
    this.#handler ??= import('../../functions/inbox-http.ts').then((m) => m.handler);
    const handler = await this.#handler;
    let last = '';
    for (let attempt = 1; attempt <= MAX_TRIES; attempt++) {
      try {
        const event = this.#event(body, idempotencyKey, correlationId, secret);
        const context = createInvocationContext({ functionName: 'queuebox-local-inboxHttp', timeoutMs: 10_000 });
        const scope = this.#options.scope;
        const answer = await (scope ? scope(context, () => handler(event, context)) : handler(event, context));
        const status = answer.statusCode ?? 0;
        if (status === 202) return void this.tally.received++;
        if (status === 200) return void this.tally.duplicate++;
        if (status >= 400 && status < 500) return void this.tally.rejected++;
        last = `${status} ${answer.body ?? ''}`;
      } catch (error) {
        last = error instanceof Error ? error.message : String(error);
      }
    }
    this.tally.failed++;
    this.#options.out(`demo webhook ${idempotencyKey} failed after ${MAX_TRIES} deliveries: ${last}`);
  }

  /** The v2 event of `POST {path}` with the hmac headers the source checks. */
  #event(body: string, idempotencyKey: string, correlationId: string, secret: string): APIGatewayProxyEventV2 {
    const { path, source } = this.#options;
    const auth = source.auth?.type === 'hmac' ? source.auth : undefined;
    const timestamp = String(Math.floor(Date.now() / 1000));
    const headers: Record<string, string> = {
      'content-type': 'application/json',
      'content-length': String(Buffer.byteLength(body)),
      host: 'localhost',
      'user-agent': 'queuebox-demo-payments/1.0',
      'x-idempotency-key': idempotencyKey,
      'x-correlation-id': correlationId,
    };
    if (auth !== undefined) {
      headers[auth.timestampHeader.toLowerCase()] = timestamp;
      headers[auth.signatureHeader.toLowerCase()] = `${auth.algorithm}=${hmacSignature(auth.algorithm, secret, timestamp, Buffer.from(body))}`;
    }
    return apiGatewayPostEvent(path, body, headers);
  }
}

/** The API Gateway HTTP API (payload v2) event of `POST {path}` with `headers` (lower-case names), as API Gateway passes it. */
export function apiGatewayPostEvent(path: string, body: string, headers: Record<string, string>): APIGatewayProxyEventV2 {
  const now = new Date();
  const routeKey = `POST ${path}`;
  return {
    version: '2.0',
    routeKey,
    rawPath: path,
    rawQueryString: '',
    headers,
    requestContext: {
      accountId: '000000000000',
      apiId: 'local',
      domainName: 'localhost',
      domainPrefix: 'localhost',
      http: { method: 'POST', path, protocol: 'HTTP/1.1', sourceIp: '127.0.0.1', userAgent: headers['user-agent'] ?? 'queuebox-local' },
      requestId: randomUUID(),
      routeKey,
      stage: '$default',
      time: apiGatewayTime(now),
      timeEpoch: now.getTime(),
    },
    body,
    isBase64Encoded: false,
  };
}

const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];

/** `requestContext.time` as API Gateway writes it: `12/Mar/2020:19:03:58 +0000`. */
function apiGatewayTime(at: Date): string {
  const two = (n: number) => String(n).padStart(2, '0');
  return `${two(at.getUTCDate())}/${MONTHS[at.getUTCMonth()]}/${at.getUTCFullYear()}:${two(at.getUTCHours())}:${two(at.getUTCMinutes())}:${two(at.getUTCSeconds())} +0000`;
}
