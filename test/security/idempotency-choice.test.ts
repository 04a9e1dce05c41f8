/**
 * No legitimate event is dropped as a duplicate: every HTTP source makes an explicit idempotency
 * choice (refused at load otherwise, naming the key), and two identical signed bodies sent as
 * separate deliveries are both stored under `idempotency: none`, deduplicated by the delivery id
 * under `idempotencyKeyHeader`, and one message only under the explicit `body-digest`.
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import { parseConfig } from '../../lib/config/load-config.ts';
import type { ConfigInput } from '../../lib/config/schema.ts';
import { ConfigError } from '../../lib/errors.ts';
import { createHttpReceiver, type HttpReceiver } from '../../lib/inbox/http-receiver.ts';
import { hmacSignature } from '../../lib/inbox/source-auth.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import { apiGatewayV2Event } from '../helpers/api-gateway-event.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';

const env = { HOOK_SECRET: 'hook-secret-0000001' };
const auth = { type: 'hmac', secretEnv: 'HOOK_SECRET' } as const;
const T0 = 1_800_000_000_000;

function refusal(input: ConfigInput): ConfigError {
  try {
    parseConfig(input);
  } catch (error) {
    if (error instanceof ConfigError) return error;
    throw error;
  }
  assert.fail(`accepted: ${JSON.stringify(input)}`);
}

describe('every source chooses how deliveries are told apart', () => {
  let db: TestDatabase;
  let receive: HttpReceiver;
  let clock = T0;
  const metrics = new QueueBoxMetrics({ namespace: 'QueueBox', serviceName: 'test', write: () => {} });
  /** One delivery of `body`, signed now, with extra headers. */
  const deliver = async (path: string, body: string, headers: Record<string, string> = {}) => {
    const ts = String(Math.floor(clock / 1000));
    const answer = await receive(apiGatewayV2Event(path, body, { 'x-timestamp': ts, 'x-signature': hmacSignature('sha256', env.HOOK_SECRET, ts, Buffer.from(body)), ...headers }), metrics);
    return answer.statusCode;
  };
  const stored = async (source: string) => Number((await db.query<{ n: string }>(`SELECT count(*) AS n FROM "${db.schema}".inbox WHERE source = $1`, [source]))[0]!.n);

  before(async () => {
    db = await createTestDatabase({
      inbox: {
        sources: {
          every: { type: 'http', path: '/every', auth, idempotency: 'none' },
          delivered: { type: 'http', path: '/delivered', auth, idempotencyKeyHeader: 'X-Delivery-Id' },
          digest: { type: 'http', path: '/digest', auth, idempotency: 'body-digest' },
        },
      },
    });
    receive = createHttpReceiver({ config: db.config, driver: db.driver, logger: createLogger({ serviceName: 'test', logLevel: 'SILENT' }), env, now: () => clock });
  });
  beforeEach(() => {
    clock = T0;
  });
  after(async () => db.drop());

  it('idempotency: none stores two identical signed bodies sent as separate deliveries (a heartbeat, "stock back to 5")', async () => {
    const body = JSON.stringify({ sku: 'A-1', stock: 5 });
    assert.equal(await deliver('/inbox/every', body), 202);
    clock += 60_000;
    assert.equal(await deliver('/inbox/every', body), 202);
    assert.equal(await stored('every'), 2);
  });

  it('idempotencyKeyHeader: identical bodies under two delivery ids are two messages; a redelivery of one id is a duplicate; no header is 400', async () => {
    const body = JSON.stringify({ status: 'ok' });
    assert.equal(await deliver('/inbox/delivered', body, { 'x-delivery-id': 'd-1' }), 202);
    assert.equal(await deliver('/inbox/delivered', body, { 'x-delivery-id': 'd-2' }), 202);
    assert.equal(await deliver('/inbox/delivered', body, { 'X-Delivery-Id': 'd-1' }), 200);
    assert.equal(await deliver('/inbox/delivered', body), 400);
    const keys = await db.query<{ idempotency_key: string }>(`SELECT idempotency_key FROM "${db.schema}".inbox WHERE source = 'delivered' ORDER BY sequence`);
    assert.deepEqual(keys.map((r) => r.idempotency_key), ['d-1', 'd-2']);
  });

  it('idempotency: body-digest, chosen explicitly, answers a later identical body duplicate', async () => {
    const body = JSON.stringify({ status: 'ok' });
    assert.equal(await deliver('/inbox/digest', body), 202);
    clock += 60_000;
    assert.equal(await deliver('/inbox/digest', body), 200);
    assert.equal(await stored('digest'), 1);
  });

  it('an hmac source without a choice is refused at load, naming the key and the three choices', () => {
    const error = refusal({ inbox: { sources: { hooks: { type: 'http', path: '/hooks', auth } } } });
    assert.equal(error.key, 'inbox.sources.hooks.idempotency');
    assert.match(error.message, /idempotencyKeyPath .*idempotencyKeyHeader .*idempotency: none/);
  });

  it('two choices on one source, or an http-only choice on an sqs source, are refused naming the key', () => {
    const both = refusal({ inbox: { sources: { hooks: { type: 'http', path: '/hooks', auth, idempotencyKeyPath: '$.id', idempotency: 'none' } } } });
    assert.equal(both.key, 'inbox.sources.hooks.idempotency');
    assert.match(both.message, /choose one of idempotencyKeyPath, idempotencyKeyHeader and idempotency/);
    const sqs = refusal({ inbox: { sources: { feed: { type: 'sqs', idempotencyKeyHeader: 'X-Id' } } } });
    assert.equal(sqs.key, 'inbox.sources.feed.idempotencyKeyHeader');
  });

  it('the presets and unsigned schemes load without a choice: their defaults are documented', () => {
    const config = parseConfig({
      inbox: {
        sources: {
          stripe: { type: 'http', path: '/stripe', auth: { type: 'stripe', secretEnv: 'STRIPE_SECRET' } },
          github: { type: 'http', path: '/github', auth: { type: 'github', secretEnv: 'GITHUB_SECRET' } },
          crm: { type: 'http', path: '/crm', auth: { type: 'bearer', tokenEnv: 'CRM_TOKEN' } },
          feed: { type: 'sqs' },
        },
      },
    });
    assert.deepEqual(Object.keys(config.inbox.sources), ['stripe', 'github', 'crm', 'feed']);
  });
});
