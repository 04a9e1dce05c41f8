/**
 * Hostile senders against the real receiver handlers (functions/inbox-http.ts and
 * functions/inbox-sqs.ts) and a real PostgreSQL: replays of signed requests, numbers beyond 2^53,
 * deep nesting, text PostgreSQL cannot store, emoji keys, REST API events, a database that is down.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHash, createHmac } from 'node:crypto';
import { after, before, beforeEach, describe, it } from 'node:test';
import type { APIGatewayProxyEvent, APIGatewayProxyStructuredResultV2, SQSRecord } from 'aws-lambda';
import { handler as httpHandler } from '../../functions/inbox-http.ts';
import { handler as sqsHandler } from '../../functions/inbox-sqs.ts';
import { createDriver } from '../../lib/db/create-driver.ts';
import { createHttpReceiver } from '../../lib/inbox/http-receiver.ts';
import { createAuthenticator, hmacSignature } from '../../lib/inbox/source-auth.ts';
import { headerLookup } from '../../lib/inbox/http-request.ts';
import { InboxRejectionError } from '../../lib/inbox/inbox-rejection.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { setContainer } from '../../lib/runtime/container.ts';
import { staticSecrets } from '../../lib/runtime/source-secrets.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { fakeLambdaContext } from '../helpers/lambda-context.ts';
import { RecordingLogger } from '../helpers/recording-logger.ts';
import { apiGatewayV2Event } from '../helpers/api-gateway-event.ts';

const env = { HOOK_SECRET: 'hook-secret-000001', STRIPE_SECRET: 'stripe-endpoint-secret', GITHUB_SECRET: "It's a Secret to Everybody", CRM_TOKEN: 'crm-token-0000001' };
const ctx = () => fakeLambdaContext({ timeoutMs: 10_000 });
const now = () => String(Math.floor(Date.now() / 1000));

const v2 = (path: string, body: string, headers: Record<string, string> = {}, method = 'POST') => apiGatewayV2Event(path, body, headers, method);

/** A REST API (payload 1.0) event as API Gateway sends it, headers in their original case. */
function v1(path: string, body: string, headers: Record<string, string>, method = 'POST'): APIGatewayProxyEvent {
  return {
    resource: '/{proxy+}',
    path,
    httpMethod: method,
    headers,
    multiValueHeaders: Object.fromEntries(Object.entries(headers).map(([k, v]) => [k, [v]])),
    queryStringParameters: null,
    multiValueQueryStringParameters: null,
    pathParameters: { proxy: path.slice(1) },
    stageVariables: null,
    requestContext: {
      accountId: '000000000000',
      apiId: 'api',
      authorizer: {},
      protocol: 'HTTP/1.1',
      httpMethod: method,
      identity: {} as APIGatewayProxyEvent['requestContext']['identity'],
      path: `/prod${path}`,
      stage: 'prod',
      requestId: 'r',
      requestTimeEpoch: 0,
      resourceId: 'x',
      resourcePath: '/{proxy+}',
    },
    body,
    isBase64Encoded: false,
  };
}

function hmacHeaders(body: string, extra: Record<string, string> = {}): Record<string, string> {
  const ts = now();
  return { 'x-timestamp': ts, 'x-signature': `sha256=${hmacSignature('sha256', env.HOOK_SECRET, ts, Buffer.from(body))}`, ...extra };
}

/** Stripe's documented manual verification: HMAC-SHA256 of `${t}.${payload}`, computed here by openssl. */
function stripeHeader(body: string, secret = env.STRIPE_SECRET, t = now()): string {
  const out = execFileSync('openssl', ['dgst', '-sha256', '-hmac', secret, '-hex'], { input: `${t}.${body}` }).toString();
  return `t=${t},v1=${out.trim().split(/\s+/).pop()}`;
}

function sqsRecord(messageId: string, body: string, queue: string, attributes: Record<string, string> = {}): SQSRecord {
  return {
    messageId,
    receiptHandle: `rh-${messageId}`,
    body,
    attributes: { ApproximateReceiveCount: '1', SentTimestamp: '0', SenderId: 's', ApproximateFirstReceiveTimestamp: '0' },
    messageAttributes: Object.fromEntries(Object.entries(attributes).map(([k, v]) => [k, { stringValue: v, dataType: 'String' }])),
    md5OfBody: '',
    eventSource: 'aws:sqs',
    eventSourceARN: `arn:aws:sqs:eu-west-1:000000000000:${queue}`,
    awsRegion: 'eu-west-1',
  };
}

describe('hostile senders against the real receiver handlers', () => {
  let db: TestDatabase;
  const parse = (r: APIGatewayProxyStructuredResultV2) => JSON.parse(r.body ?? '') as { error?: string; messageId?: string; status?: string };
  const rows = (source: string) =>
    db.query<{ idempotency_key: string; event_type: string | null; state: string; last_error: string | null; payload_text: string; correlation_id: string | null }>(
      `SELECT idempotency_key, event_type, state, last_error, payload::text AS payload_text, correlation_id FROM "${db.schema}".inbox WHERE source = $1 ORDER BY sequence`,
      [source],
    );

  before(async () => {
    db = await createTestDatabase({
      inbox: {
        sources: {
          hooks: { type: 'http', path: '/hooks', auth: { type: 'hmac', secretEnv: 'HOOK_SECRET' }, idempotencyKeyPath: '$.id', eventTypePath: '$.type' },
          nokey: { type: 'http', path: '/nokey', auth: { type: 'hmac', secretEnv: 'HOOK_SECRET' }, idempotency: 'body-digest' },
          deep: { type: 'http', path: '/deep', auth: { type: 'hmac', secretEnv: 'HOOK_SECRET' }, idempotencyKeyPath: '$..id' },
          stripe: { type: 'http', path: '/stripe', auth: { type: 'stripe', secretEnv: 'STRIPE_SECRET' } },
          github: { type: 'http', path: '/github', auth: { type: 'github', secretEnv: 'GITHUB_SECRET' } },
          crm: { type: 'http', path: '/crm', auth: { type: 'bearer', tokenEnv: 'CRM_TOKEN' } },
          feed: { type: 'sqs', queueName: 'feed', idempotencyKeyPath: '$.id' },
          crawl: { type: 'sqs', queueName: 'crawl', idempotencyKeyPath: '$..id' },
        },
      },
    });
  });
  beforeEach(async () => {
    setContainer({ config: db.config, driver: db.driver, logger: createLogger({ serviceName: 'test', logLevel: 'SILENT' }), env, writeMetrics: () => {} });
    await db.query(`DELETE FROM "${db.schema}".inbox`);
  });
  after(async () => {
    setContainer(undefined);
    await db.drop();
  });

  it('a signed request replayed with another X-Idempotency-Key is a duplicate: the key comes from the signed body', async () => {
    const body = JSON.stringify({ id: 'evt_1', type: 'paid' });
    const first = await httpHandler(v2('/inbox/hooks', body, hmacHeaders(body, { 'x-idempotency-key': 'replay-a' })), ctx());
    const replay = await httpHandler(v2('/inbox/hooks', body, hmacHeaders(body, { 'x-idempotency-key': 'replay-b' })), ctx());
    assert.deepEqual([first.statusCode, replay.statusCode, parse(replay).status], [202, 200, 'duplicate']);
    assert.deepEqual((await rows('hooks')).map((r) => r.idempotency_key), ['evt_1']);
  });

  it('a signed request cannot squat the key of a future event through the unsigned header', async () => {
    const captured = JSON.stringify({ id: 'evt_old', type: 'paid' });
    assert.equal((await httpHandler(v2('/inbox/hooks', captured, hmacHeaders(captured, { 'x-idempotency-key': 'evt_future' })), ctx())).statusCode, 202);
    const future = JSON.stringify({ id: 'evt_future', type: 'refunded' });
    const answer = await httpHandler(v2('/inbox/hooks', future, hmacHeaders(future)), ctx());
    assert.equal(answer.statusCode, 202, 'the future event is stored, not answered as a duplicate');
    assert.deepEqual((await rows('hooks')).map((r) => [r.idempotency_key, r.event_type]), [['evt_old', 'paid'], ['evt_future', 'refunded']]);
  });

  it('a signed source with idempotency: body-digest keys on the SHA-256 of the signed body', async () => {
    const body = JSON.stringify({ n: 1 });
    await httpHandler(v2('/inbox/nokey', body, hmacHeaders(body, { 'x-idempotency-key': 'a' })), ctx());
    const replay = await httpHandler(v2('/inbox/nokey', body, hmacHeaders(body, { 'x-idempotency-key': 'b' })), ctx());
    assert.equal(replay.statusCode, 200);
    assert.deepEqual((await rows('nokey')).map((r) => r.idempotency_key), [`sha256:${createHash('sha256').update(body).digest('hex')}`]);
  });

  it('ids beyond 2^53 stay distinct and the stored payload keeps every digit (HTTP and SQS)', async () => {
    const a = '{"id":12345678901234567890,"type":"t","amount":1.10}';
    const b = '{"id":12345678901234567891,"type":"t","amount":1.10}';
    for (const body of [a, b]) assert.equal((await httpHandler(v2('/inbox/hooks', body, hmacHeaders(body)), ctx())).statusCode, 202);
    const stored = await rows('hooks');
    assert.deepEqual(stored.map((r) => r.idempotency_key), ['12345678901234567890', '12345678901234567891']);
    assert.match(stored[0]!.payload_text, /"id": 12345678901234567890\b/);
    assert.match(stored[0]!.payload_text, /"amount": 1\.10\b/);
    const result = await sqsHandler({ Records: [sqsRecord('m1', '{"id":98765432109876543210}', 'feed'), sqsRecord('m2', '{"id":98765432109876543211}', 'feed')] }, ctx());
    assert.deepEqual(result.batchItemFailures, []);
    assert.deepEqual((await rows('feed')).map((r) => [r.idempotency_key, r.state]), [['98765432109876543210', 'pending'], ['98765432109876543211', 'pending']]);
  });

  it('deeply nested or key-heavy bodies are refused with 400 before any JSONPath runs, with or without $..', async () => {
    const nested = `{"id":"x","a":${'['.repeat(5000)}${']'.repeat(5000)}}`;
    for (const path of ['/inbox/hooks', '/inbox/deep']) {
      const answer = await httpHandler(v2(path, nested, hmacHeaders(nested)), ctx());
      assert.equal(answer.statusCode, 400, path);
      assert.match(parse(answer).error!, /nests deeper than 64 levels/);
    }
    const wide = JSON.stringify(Object.fromEntries(Array.from({ length: 20_001 }, (_, i) => [`k${i}`, 1])));
    const answer = await httpHandler(v2('/inbox/deep', wide, hmacHeaders(wide)), ctx());
    assert.equal(answer.statusCode, 400);
    assert.match(parse(answer).error!, /more than 20000 keys/);
    assert.equal((await rows('deep')).length + (await rows('hooks')).length, 0);
  });

  it('SQS: a nested record is stored dead with the reason; the good records of the batch are stored and the batch does not fail', async () => {
    const nested = `{"id":"n","a":${'{"b":'.repeat(3000)}1${'}'.repeat(3000)}}`;
    const result = await sqsHandler(
      { Records: [sqsRecord('g1', '{"id":"good-1"}', 'crawl'), sqsRecord('bad', nested, 'crawl'), sqsRecord('g2', '{"id":"good-2"}', 'crawl')] },
      ctx(),
    );
    assert.deepEqual(result.batchItemFailures, []);
    const stored = await rows('crawl');
    assert.deepEqual(stored.map((r) => [r.idempotency_key, r.state]), [['good-1', 'pending'], ['rejected:bad', 'dead'], ['good-2', 'pending']]);
    assert.match(stored[1]!.last_error!, /nests deeper than 64 levels/);
  });

  it('lone surrogates are refused (400) or stored dead (SQS); the text \\\\u0000 and real emoji pass', async () => {
    for (const body of ['{"id":"s1","x":"\\ud83d"}', '{"id":"s2","x":"\\udc00 tail"}', '{"id":"s3","x":"\\u0000"}']) {
      const answer = await httpHandler(v2('/inbox/hooks', body, hmacHeaders(body)), ctx());
      assert.equal(answer.statusCode, 400, body);
      assert.match(parse(answer).error!, /surrogate|NUL/);
    }
    const fine = ['{"id":"ok1","x":"\\\\u0000"}', '{"id":"ok2","x":"\\ud83d\\ude00 and 😀"}'];
    for (const body of fine) assert.equal((await httpHandler(v2('/inbox/hooks', body, hmacHeaders(body)), ctx())).statusCode, 202, body);
    const stored = await rows('hooks');
    assert.deepEqual(stored.map((r) => r.idempotency_key), ['ok1', 'ok2']);
    assert.match(stored[0]!.payload_text, /\\\\u0000/, 'the backslash text is stored as sent');
    const result = await sqsHandler({ Records: [sqsRecord('e1', '{"id":"e1","x":"\\ud83d"}', 'feed'), sqsRecord('e2', '{"id":"e2","x":"\uD83D raw"}', 'feed')] }, ctx());
    assert.deepEqual(result.batchItemFailures, []);
    const dead = await rows('feed');
    assert.deepEqual(dead.map((r) => [r.idempotency_key, r.state]), [['rejected:e1', 'dead'], ['rejected:e2', 'dead']]);
    assert.match(dead[0]!.last_error!, /surrogate/);
    assert.match(dead[1]!.last_error!, /replaced by U\+FFFD/);
    assert.ok(dead[1]!.payload_text.includes('\uFFFD raw'));
  });

  it('lengths count characters (code points): 255 emoji fit a key, 256 do not', async () => {
    const fits = await httpHandler(v2('/inbox/crm', '{}', { authorization: 'Bearer crm-token-0000001', 'x-idempotency-key': '😀'.repeat(255) }), ctx());
    assert.equal(fits.statusCode, 202, fits.body);
    const over = await httpHandler(v2('/inbox/crm', '{}', { authorization: 'Bearer crm-token-0000001', 'x-idempotency-key': '😀'.repeat(256) }), ctx());
    assert.equal(over.statusCode, 400);
    assert.match(parse(over).error!, /at most 255 characters \(got 256\)/);
  });

  it('REST API (payload 1.0) events are received like HTTP API ones: routed, method-checked, stored', async () => {
    const body = JSON.stringify({ id: 'evt_rest', type: 'paid' });
    const headers = { 'Content-Type': 'application/json', 'X-Timestamp': '', 'X-Signature': '' };
    Object.assign(headers, Object.fromEntries(Object.entries(hmacHeaders(body)).map(([k, v]) => [k.replace(/^x-(\w)/, (_, c: string) => `X-${c.toUpperCase()}`), v])));
    const stored = await httpHandler(v1('/inbox/hooks', body, headers), ctx());
    assert.equal(stored.statusCode, 202, stored.body);
    assert.equal((await httpHandler(v1('/inbox/hooks', body, headers, 'GET'), ctx())).statusCode, 405);
    assert.equal((await httpHandler(v1('/inbox/missing', body, headers), ctx())).statusCode, 404);
    assert.deepEqual((await rows('hooks')).map((r) => r.idempotency_key), ['evt_rest']);
  });

  it('a database that is down answers 503 with Retry-After, during a request and at cold start', async () => {
    const down = await createDriver({ ...db.config, database: { ...db.config.database, url: 'postgres://postgres@127.0.0.1:1/test', connectTimeoutMs: 2000 } }, {});
    setContainer({ config: db.config, driver: down, logger: createLogger({ serviceName: 'test', logLevel: 'SILENT' }), env, writeMetrics: () => {} });
    const body = JSON.stringify({ id: 'evt_down', type: 'paid' });
    const answer = await httpHandler(v2('/inbox/hooks', body, hmacHeaders(body)), ctx());
    await down.close();
    assert.equal(answer.statusCode, 503);
    assert.equal(answer.headers?.['retry-after'], '5');
    setContainer(undefined);
    const saved = { ...process.env };
    Object.assign(process.env, env, { QUEUEBOX_DATABASE_URL: 'postgres://postgres@127.0.0.1:1/test', QUEUEBOX_CONFIG: '' });
    try {
      const cold = await httpHandler(v2('/inbox/hooks', body, hmacHeaders(body)), ctx());
      assert.equal(cold.statusCode, 503);
      assert.equal(cold.headers?.['retry-after'], '5');
      assert.match(parse(cold).error!, /retry later/);
    } finally {
      for (const key of Object.keys(process.env)) if (!(key in saved)) delete process.env[key];
      Object.assign(process.env, saved);
      setContainer(undefined);
    }
  });

  it('stripe: a real Stripe-Signature (t=…,v1=… over `${t}.${body}`) is accepted, keyed by the event id, typed by its type; a replay is a duplicate', async () => {
    const body = '{\n  "id": "evt_1NG8Du2eZvKYlo2CUI79vXWy",\n  "object": "event",\n  "type": "customer.created",\n  "data": {"object": {"id": "cus_NffrFeUfNV2Hib"}}\n}';
    const first = await httpHandler(v2('/inbox/stripe', body, { 'stripe-signature': stripeHeader(body) }), ctx());
    assert.equal(first.statusCode, 202, first.body);
    const t = now(); // one timestamp for both signatures of the header
    const rotated = `${stripeHeader(body, 'an-old-secret', t)},v1=${stripeHeader(body, env.STRIPE_SECRET, t).split('v1=')[1]}`;
    assert.equal((await httpHandler(v2('/inbox/stripe', body, { 'Stripe-Signature': rotated, 'x-idempotency-key': 'other' }), ctx())).statusCode, 200, 'any v1 may match; a replay is a duplicate');
    const refusals: Array<[string, RegExp]> = [
      [stripeHeader(body, 'wrong-secret'), /invalid signature/],
      [stripeHeader(body, env.STRIPE_SECRET, String(Number(now()) - 301)), /tolerance of 300 seconds/],
      [stripeHeader(body).replace('v1=', 'v0='), /no v1 signature/],
      ['v1=abc', /one t=/],
    ];
    for (const [header, reason] of refusals) {
      const answer = await httpHandler(v2('/inbox/stripe', body, { 'stripe-signature': header }), ctx());
      assert.equal(answer.statusCode, 401, header);
      assert.match(parse(answer).error!, reason);
    }
    assert.deepEqual((await rows('stripe')).map((r) => [r.idempotency_key, r.event_type]), [['evt_1NG8Du2eZvKYlo2CUI79vXWy', 'customer.created']]);
  });

  it("github: GitHub's documented test vector verifies, and a changed body does not", async () => {
    const check = createAuthenticator('github', { type: 'github', secretEnv: 'GITHUB_SECRET' }, staticSecrets(env));
    const documented = headerLookup({ 'X-Hub-Signature-256': 'sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17' });
    await assert.doesNotReject(() => check(documented, Buffer.from('Hello, World!'), Date.now()));
    await assert.rejects(() => check(documented, Buffer.from('Hello, World?'), Date.now()), (e: unknown) => e instanceof InboxRejectionError && e.reason === 'unauthorized');
  });

  it('github: keyed by X-GitHub-Delivery (a redelivery is a duplicate, an identical body under a new delivery id is stored), typed by a well-formed X-GitHub-Event', async () => {
    const body = JSON.stringify({ action: 'opened', number: 7, repository: { id: 123 } });
    const signature = `sha256=${createHmac('sha256', env.GITHUB_SECRET).update(body).digest('hex')}`;
    const headers = (delivery: string, event = 'pull_request') => ({ 'X-GitHub-Event': event, 'X-GitHub-Delivery': delivery, 'X-Hub-Signature-256': signature });
    assert.equal((await httpHandler(v2('/inbox/github', body, headers('d-1')), ctx())).statusCode, 202);
    assert.equal((await httpHandler(v2('/inbox/github', body, headers('d-1')), ctx())).statusCode, 200, 'a redelivery keeps its delivery id');
    assert.equal((await httpHandler(v2('/inbox/github', body, headers('d-2')), ctx())).statusCode, 202, 'a later identical body is a new delivery');
    assert.equal((await httpHandler(v2('/inbox/github', body, { ...headers('d-3'), 'X-Hub-Signature-256': 'sha256=00' }), ctx())).statusCode, 401);
    const oddEvent = await httpHandler(v2('/inbox/github', body, headers('d-4', 'x.y{{')), ctx());
    assert.equal(oddEvent.statusCode, 400);
    assert.match(parse(oddEvent).error!, /X-GitHub-Event must be a GitHub event name/);
    const noDelivery = await httpHandler(v2('/inbox/github', body, { 'X-GitHub-Event': 'push', 'X-Hub-Signature-256': signature }), ctx());
    assert.equal(noDelivery.statusCode, 400);
    assert.match(parse(noDelivery).error!, /send the X-GitHub-Delivery header/);
    assert.deepEqual((await rows('github')).map((r) => [r.idempotency_key, r.event_type, r.correlation_id]), [['d-1', 'pull_request', 'd-1'], ['d-2', 'pull_request', 'd-2']]);
  });

  it('a source with auth type none is logged as a warning when the receiver is built (every cold start)', () => {
    const logger = new RecordingLogger();
    const config = { ...db.config, inbox: { ...db.config.inbox, sources: { open: { type: 'http' as const, path: '/open', consumption: 'push' as const, auth: { type: 'none' as const } } } } };
    createHttpReceiver({ config, driver: db.driver, logger: logger as never, env });
    assert.deepEqual(logger.at('warn').map((e) => [e.message, e.extra.source]), [['inbox source accepts unauthenticated requests (auth type none)', 'open']]);
  });
});
