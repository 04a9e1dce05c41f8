import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import type { APIGatewayProxyEventV2, APIGatewayProxyStructuredResultV2 } from 'aws-lambda';
import { handler } from '../../functions/inbox-http.ts';
import type { Driver } from '../../lib/db/driver.ts';
import { ConfigError } from '../../lib/errors.ts';
import { createHttpReceiver, type HttpReceiver } from '../../lib/inbox/http-receiver.ts';
import { hmacSignature } from '../../lib/inbox/source-auth.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import { setContainer } from '../../lib/runtime/container.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { fakeLambdaContext } from '../helpers/lambda-context.ts';
import { apiGatewayV2Event } from '../helpers/api-gateway-event.ts';

const env = { HOOK_SECRET: 'whsec_test_0000000', API_TOKEN: 'token-123-0000000', SHOP_KEY: 'key-abc-000000000' };
const NOW = 1_800_000_000_000;

const event = apiGatewayV2Event;

function signed(body: string, secret = env.HOOK_SECRET, timestamp = String(NOW / 1000)): Record<string, string> {
  return { 'x-timestamp': timestamp, 'x-signature': `sha256=${hmacSignature('sha256', secret, timestamp, Buffer.from(body))}` };
}

describe('HTTP inbox receiver', () => {
  let db: TestDatabase;
  let receive: HttpReceiver;
  let metrics: QueueBoxMetrics;
  const logger = createLogger({ serviceName: 'test', logLevel: 'SILENT' });
  before(async () => {
    db = await createTestDatabase({
      inbox: {
        maxBodyBytes: 200,
        sources: {
          stripe: { type: 'http', path: '/stripe', auth: { type: 'hmac', secretEnv: 'HOOK_SECRET' }, idempotencyKeyPath: '$.id', eventTypePath: '$.type', aggregateIdPath: '$.customer' },
          crm: { type: 'http', path: '/crm', auth: { type: 'bearer', tokenEnv: 'API_TOKEN' }, correlationIdPath: '$.trace', delayPath: '$.delay' },
          shop: { type: 'http', path: '/shop', consumption: 'pull', auth: { type: 'api-key', keyEnv: 'SHOP_KEY' } },
        },
      },
    });
    receive = createHttpReceiver({ config: db.config, driver: db.driver, logger, env, now: () => NOW });
  });
  after(async () => db.drop());
  beforeEach(async () => {
    await db.query(`TRUNCATE "${db.schema}".inbox`);
    metrics = new QueueBoxMetrics({ namespace: 'QueueBox', serviceName: 'test', write: () => {} });
  });
  const count = async () => Number((await db.query<{ n: string }>(`SELECT count(*) AS n FROM "${db.schema}".inbox`))[0]!.n);
  const parse = (r: APIGatewayProxyStructuredResultV2) => JSON.parse(r.body ?? '') as Record<string, unknown>;

  it('store a signed webhook with fields from JSONPath and answer 202 with its id, then 200 duplicate', async () => {
    const body = JSON.stringify({ id: 'evt_1', type: 'invoice.paid', customer: 'cus_9' });
    const first = await receive(event('/inbox/stripe', body, signed(body)), metrics);
    assert.equal(first.statusCode, 202);
    const { messageId } = parse(first);
    const second = await receive(event('/inbox/stripe', body, signed(body)), metrics);
    assert.equal(second.statusCode, 200);
    assert.deepEqual(parse(second), { status: 'duplicate', messageId });
    const rows = await db.query(`SELECT id, source, idempotency_key, event_type, aggregate_id, consumption, state FROM "${db.schema}".inbox`);
    assert.deepEqual(rows, [{ id: messageId, source: 'stripe', idempotency_key: 'evt_1', event_type: 'invoice.paid', aggregate_id: 'cus_9', consumption: 'push', state: 'pending' }]);
    assert.equal(metrics.value('inboxMessages', { status: 'new' }), 1);
    assert.equal(metrics.value('inboxMessages', { status: 'duplicate' }), 1);
  });

  it('answer ten concurrent deliveries of one message with one 202 and nine 200 duplicates', async () => {
    const body = JSON.stringify({ id: 'evt_race', type: 't' });
    const receivers = Array.from({ length: 10 }, () => createHttpReceiver({ config: db.config, driver: db.newDriver(), logger, env, now: () => NOW }));
    const answers = await Promise.all(receivers.map((r) => r(event('/inbox/stripe', body, signed(body)), metrics)));
    assert.deepEqual(answers.map((a) => a.statusCode).sort(), [200, 200, 200, 200, 200, 200, 200, 200, 200, 202]);
    assert.equal(new Set(answers.map((a) => parse(a).messageId)).size, 1);
    assert.equal(await count(), 1);
  });

  it('take the key and correlation id from headers (any case), the delay from JSONPath, with bearer auth', async () => {
    const body = JSON.stringify({ trace: 'ignored-because-header', delay: 60000 });
    const answer = await receive(event('/inbox/crm', body, { Authorization: 'Bearer token-123-0000000', 'X-Idempotency-Key': 'crm-1', 'X-Correlation-Id': 'corr-1' }), metrics);
    assert.equal(answer.statusCode, 202);
    const [row] = await db.query<{ idempotency_key: string; correlation_id: string; due_in: number }>(
      `SELECT idempotency_key, correlation_id, EXTRACT(EPOCH FROM scheduled_at - clock_timestamp())::float8 AS due_in FROM "${db.schema}".inbox`,
    );
    assert.equal(row!.idempotency_key, 'crm-1');
    assert.equal(row!.correlation_id, 'corr-1');
    assert.ok(row!.due_in > 55 && row!.due_in <= 60, `due in ~60 s, got ${row!.due_in}`);
  });

  for (const [what, delay] of [['a string of digits', '"60000"'], ['a number with an exponent', '6e4'], ['a string holding a JSON number', '"6.0e4"']] as const) {
    it(`take a delay written as ${what} (${delay})`, async () => {
      const answer = await receive(event('/inbox/crm', `{"delay":${delay}}`, { authorization: 'Bearer token-123-0000000', 'x-idempotency-key': `delay-${delay}` }), metrics);
      assert.equal(answer.statusCode, 202);
      const [row] = await db.query<{ due_in: number }>(`SELECT EXTRACT(EPOCH FROM scheduled_at - clock_timestamp())::float8 AS due_in FROM "${db.schema}".inbox`);
      assert.ok(row!.due_in > 55 && row!.due_in <= 60, `due in ~60 s, got ${row!.due_in}`);
    });
  }

  it('accept a base64 body and an api key, storing a pull row', async () => {
    const body = JSON.stringify({ hello: 'world' });
    const answer = await receive(event('/inbox/shop', Buffer.from(body).toString('base64'), { 'x-api-key': 'key-abc-000000000', 'x-idempotency-key': 'shop-1' }, 'POST', true), metrics);
    assert.equal(answer.statusCode, 202);
    const [row] = await db.query(`SELECT payload, consumption FROM "${db.schema}".inbox`);
    assert.deepEqual(row, { payload: { hello: 'world' }, consumption: 'pull' });
  });

  const good = JSON.stringify({ id: 'evt_ok', type: 't' });
  const rejections: Array<[string, () => APIGatewayProxyEventV2, number, string, RegExp]> = [
    ['an unknown path', () => event('/inbox/nope', good, signed(good)), 404, 'unknown_source', /no inbox source at \/inbox\/nope/],
    ['a GET', () => event('/inbox/stripe', good, signed(good), 'GET'), 405, 'method_not_allowed', /use POST/],
    ['a body over maxBodyBytes', () => event('/inbox/stripe', JSON.stringify({ id: 'x'.repeat(300) }), signed(JSON.stringify({ id: 'x'.repeat(300) }))), 413, 'body_too_large', /exceeds the limit of 200 bytes/],
    ['a base64 body that decodes over maxBodyBytes', () => event('/inbox/shop', Buffer.alloc(201, 'a').toString('base64'), { 'x-api-key': 'key-abc-000000000' }, 'POST', true), 413, 'body_too_large', /201 bytes/],
    ['a signature made with a wrong secret', () => event('/inbox/stripe', good, signed(good, 'wrong')), 401, 'unauthorized', /invalid signature/],
    ['a stale timestamp', () => event('/inbox/stripe', good, signed(good, env.HOOK_SECRET, String(NOW / 1000 - 301))), 401, 'unauthorized', /tolerance of 300 seconds/],
    ['a tampered body', () => event('/inbox/stripe', good.replace('evt_ok', 'evt_ko'), signed(good)), 401, 'unauthorized', /invalid signature/],
    ['a missing signature', () => event('/inbox/stripe', good, { 'x-timestamp': String(NOW / 1000) }), 401, 'unauthorized', /missing signature/],
    ['a wrong bearer token', () => event('/inbox/crm', good, { authorization: 'Bearer token-12' }), 401, 'unauthorized', /invalid bearer token/],
    ['a missing api key', () => event('/inbox/shop', good, {}), 401, 'unauthorized', /x-api-key/],
    ['a body that is not JSON', () => event('/inbox/crm', '{"a":', { authorization: 'Bearer token-123-0000000' }), 400, 'invalid_json', /not valid JSON/],
    ['a JSON array', () => event('/inbox/crm', '[1]', { authorization: 'Bearer token-123-0000000' }), 400, 'invalid_json', /JSON object/],
    ['no idempotency key', () => event('/inbox/crm', '{}', { authorization: 'Bearer token-123-0000000' }), 400, 'missing_idempotency_key', /X-Idempotency-Key/],
    ['a key path selecting an object', () => { const b = JSON.stringify({ id: { a: 1 } }); return event('/inbox/stripe', b, signed(b)); }, 400, 'invalid_field', /idempotencyKeyPath \$\.id must select a string or a number/],
    ['an idempotency key over 255 characters', () => event('/inbox/crm', '{}', { authorization: 'Bearer token-123-0000000', 'x-idempotency-key': 'k'.repeat(256) }), 400, 'invalid_field', /idempotency key must be at most 255/],
    ['a correlation id over 128 characters', () => event('/inbox/crm', '{}', { authorization: 'Bearer token-123-0000000', 'x-idempotency-key': 'k', 'x-correlation-id': 'c'.repeat(129) }), 400, 'invalid_field', /correlation id must be at most 128/],
    ['a negative delay', () => event('/inbox/crm', '{"delay":-1}', { authorization: 'Bearer token-123-0000000', 'x-idempotency-key': 'k' }), 400, 'invalid_field', /delay at \$\.delay/],
    ['a delay in hexadecimal', () => event('/inbox/crm', '{"delay":"0x10"}', { authorization: 'Bearer token-123-0000000', 'x-idempotency-key': 'k' }), 400, 'invalid_field', /delay at \$\.delay .*got "0x10"/],
    ['a blank delay', () => event('/inbox/crm', '{"delay":" "}', { authorization: 'Bearer token-123-0000000', 'x-idempotency-key': 'k' }), 400, 'invalid_field', /delay at \$\.delay .*got " "/],
    ['a delay with a sign or blanks around it', () => event('/inbox/crm', '{"delay":"+5 "}', { authorization: 'Bearer token-123-0000000', 'x-idempotency-key': 'k' }), 400, 'invalid_field', /delay at \$\.delay/],
  ];
  for (const [what, make, status, reason, message] of rejections) {
    it(`refuse ${what} with ${status} and a clear JSON error, storing nothing`, async () => {
      const answer = await receive(make(), metrics);
      assert.equal(answer.statusCode, status);
      assert.equal(answer.headers?.['content-type'], 'application/json');
      const body = parse(answer);
      assert.deepEqual(Object.keys(body), ['error']);
      assert.match(String(body.error), message);
      assert.equal(metrics.value('inboxRejections', { reason }), 1);
      assert.equal(await count(), 0);
    });
  }

  it('refuse to start when a source secret is not set, naming the key', () => {
    assert.throws(
      () => createHttpReceiver({ config: db.config, driver: db.driver, logger, env: { HOOK_SECRET: env.HOOK_SECRET, API_TOKEN: env.API_TOKEN }, now: () => NOW }),
      (error: unknown) => error instanceof ConfigError && error.key === 'inbox.sources.shop.auth.keyEnv' && /SHOP_KEY, which is not set/.test(error.message),
    );
  });

  it('serve through the Lambda handler and flush new/duplicate and rejection metrics as EMF', async () => {
    const lines: string[] = [];
    const saved = { ...process.env };
    Object.assign(process.env, env);
    try {
      setContainer({ config: db.config, driver: db.driver, logger, env: process.env, writeMetrics: (line) => lines.push(line) });
      const body = JSON.stringify({ id: 'evt_handler', type: 't' });
      const timestamp = String(Math.floor(Date.now() / 1000));
      const headers = { 'x-timestamp': timestamp, 'x-signature': hmacSignature('sha256', env.HOOK_SECRET, timestamp, Buffer.from(body)) };
      assert.equal((await handler(event('/inbox/stripe', body, headers), fakeLambdaContext({ timeoutMs: 3000 }))).statusCode, 202);
      assert.equal((await handler(event('/inbox/stripe', body, headers), fakeLambdaContext({ timeoutMs: 3000 }))).statusCode, 200);
      assert.equal((await handler(event('/inbox/stripe', '{', headers), fakeLambdaContext({ timeoutMs: 3000 }))).statusCode, 401);
    } finally {
      setContainer(undefined);
      for (const name of Object.keys(env)) if (!(name in saved)) delete process.env[name];
    }
    const emf = lines.map((l) => JSON.parse(l) as Record<string, unknown>);
    const value = (name: string, dim: string, v: string) => emf.filter((e) => e[dim] === v).reduce((sum, e) => sum + Number(e[name] ?? 0), 0);
    assert.equal(value('queuebox_inbox_messages_total', 'status', 'new'), 1);
    assert.equal(value('queuebox_inbox_messages_total', 'status', 'duplicate'), 1);
    assert.equal(value('queuebox_inbox_rejections_total', 'reason', 'unauthorized'), 1);
  });

  it('count a message the database would not store in queuebox_inbox_store_failures_total (answered 500; the handler itself does not fail)', async () => {
    const lines: string[] = [];
    const saved = { ...process.env };
    Object.assign(process.env, env);
    const failing: Driver = Object.create(db.driver, { inboxInsert: { value: async () => Promise.reject(new Error('permission denied for table inbox')) } });
    try {
      setContainer({ config: db.config, driver: failing, logger, env: process.env, writeMetrics: (line) => lines.push(line) });
      const body = JSON.stringify({ id: 'evt_refused', type: 't' });
      const timestamp = String(Math.floor(Date.now() / 1000));
      const headers = { 'x-timestamp': timestamp, 'x-signature': hmacSignature('sha256', env.HOOK_SECRET, timestamp, Buffer.from(body)) };
      assert.equal((await handler(event('/inbox/stripe', body, headers), fakeLambdaContext({ timeoutMs: 3000 }))).statusCode, 500);
    } finally {
      setContainer(undefined);
      for (const name of Object.keys(env)) if (!(name in saved)) delete process.env[name];
    }
    const emf = lines.map((l) => JSON.parse(l) as Record<string, unknown>);
    assert.equal(emf.reduce((sum, e) => sum + Number(e.queuebox_inbox_store_failures_total ?? 0), 0), 1);
  });
});
