/**
 * Webhook secrets rotate in warm containers: a secret read from SSM (through the real AWS SDK and
 * Powertools Parameters, against a local stand-in speaking the SSM protocol) is read again when it
 * is `secrets.maxAgeSeconds` old and after a refused request — at most once per
 * `secrets.minRefetchSeconds` — so after a rotation the new secret gets 202 and the old one 401,
 * and a flood of forged requests cannot become a flood of SSM calls. The clock is injected.
 */
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, beforeEach, describe, it } from 'node:test';
import { handler as httpHandler } from '../../functions/inbox-http.ts';
import { createHttpReceiver, type HttpReceiver } from '../../lib/inbox/http-receiver.ts';
import { hmacSignature } from '../../lib/inbox/source-auth.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import { setContainer } from '../../lib/runtime/container.ts';
import { loadSourceSecrets } from '../../lib/runtime/source-secrets.ts';
import { apiGatewayV2Event } from '../helpers/api-gateway-event.ts';
import { createTestDatabase, testDatabaseUrl, type TestDatabase } from '../helpers/database.ts';
import { FakeSecretStore } from '../helpers/fake-secret-store.ts';
import { fakeLambdaContext } from '../helpers/lambda-context.ts';

const PATH = '/queuebox/rotation';
const OLD = { HOOK_SECRET: 'old-hook-secret-0001', GITHUB_SECRET: 'old-github-secret-01', CRM_TOKEN: 'old-crm-token-000001' };
const NEW = { HOOK_SECRET: 'new-hook-secret-0002', GITHUB_SECRET: 'new-github-secret-02', CRM_TOKEN: 'new-crm-token-000002' };
const T0 = 1_800_000_000_000;

describe('webhook secrets rotate in a warm container', () => {
  const store = new FakeSecretStore();
  const saved = { ...process.env };
  let db: TestDatabase;
  let clock = T0;
  let receive: HttpReceiver;
  let sequence = 0;
  const metrics = new QueueBoxMetrics({ namespace: 'QueueBox', serviceName: 'test', write: () => {} });
  const reads = (name: string) => store.calls.filter((c) => c === `AmazonSSM.GetParameter:${PATH}/${name}`).length;

  const hooks = (secret: string) => {
    const body = JSON.stringify({ id: `evt_${++sequence}` });
    const ts = String(Math.floor(clock / 1000));
    return receive(apiGatewayV2Event('/inbox/hooks', body, { 'x-timestamp': ts, 'x-signature': hmacSignature('sha256', secret, ts, Buffer.from(body)) }), metrics);
  };
  const github = (secret: string) => {
    const body = JSON.stringify({ zen: 'Keep it logically awesome.', n: ++sequence });
    const signature = `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`;
    return receive(apiGatewayV2Event('/inbox/github', body, { 'x-hub-signature-256': signature, 'x-github-event': 'ping', 'x-github-delivery': `d-${sequence}` }), metrics);
  };
  const crm = (token: string) => receive(apiGatewayV2Event('/inbox/crm', '{}', { authorization: `Bearer ${token}`, 'x-idempotency-key': `k-${++sequence}` }), metrics);
  const senders = { HOOK_SECRET: hooks, GITHUB_SECRET: github, CRM_TOKEN: crm } as const;

  before(async () => {
    db = await createTestDatabase({
      inbox: {
        sources: {
          hooks: { type: 'http', path: '/hooks', auth: { type: 'hmac', secretEnv: 'HOOK_SECRET' }, idempotencyKeyPath: '$.id' },
          github: { type: 'http', path: '/github', auth: { type: 'github', secretEnv: 'GITHUB_SECRET' } },
          crm: { type: 'http', path: '/crm', auth: { type: 'bearer', tokenEnv: 'CRM_TOKEN' } },
        },
      },
      secrets: { maxAgeSeconds: 300, minRefetchSeconds: 30 },
    });
    const endpoint = await store.start();
    Object.assign(process.env, { AWS_ENDPOINT_URL: endpoint, AWS_REGION: 'eu-west-1', AWS_ACCESS_KEY_ID: 'test', AWS_SECRET_ACCESS_KEY: 'test' });
  });
  beforeEach(async () => {
    for (const [name, value] of Object.entries(OLD)) store.values.set(`${PATH}/${name}`, value);
    store.calls.length = 0;
    clock = T0;
    const env = { QUEUEBOX_SECRETS_PARAMETER_PATH: PATH };
    const secrets = await loadSourceSecrets({ env, config: db.config, now: () => clock });
    receive = createHttpReceiver({ config: db.config, driver: db.driver, logger: createLogger({ serviceName: 'test', logLevel: 'SILENT' }), env, secrets, now: () => clock });
  });
  after(async () => {
    for (const key of Object.keys(process.env)) if (!(key in saved)) delete process.env[key];
    Object.assign(process.env, saved);
    await store.stop();
    await db.drop();
  });

  for (const name of ['HOOK_SECRET', 'GITHUB_SECRET', 'CRM_TOKEN'] as const) {
    it(`${name}: the first request with the new secret after the refetch interval reads it again; from then on the old one gets 401`, async () => {
      const send = senders[name];
      assert.equal((await send(OLD[name])).statusCode, 202);
      store.values.set(`${PATH}/${name}`, NEW[name]);
      clock += 10_000;
      assert.equal((await send(NEW[name])).statusCode, 401, 'within minRefetchSeconds of the last read, no new read');
      assert.equal(reads(name), 1, 'the refusal 10 s after the cold-start read made no SSM call');
      clock += 21_000;
      assert.equal((await send(NEW[name])).statusCode, 202, 'read again after the refusal: the new secret verifies');
      assert.equal(reads(name), 2);
      assert.equal((await send(OLD[name])).statusCode, 401, 'the old secret is refused (no grace window)');
    });

    it(`${name}: with no request signed with the new secret, the old one is refused once the held value is maxAgeSeconds old`, async () => {
      const send = senders[name];
      store.values.set(`${PATH}/${name}`, NEW[name]);
      clock += 299_000;
      assert.equal((await send(OLD[name])).statusCode, 202, 'the value held is 299 s old');
      assert.equal(reads(name), 1);
      clock += 1_000;
      assert.equal((await send(OLD[name])).statusCode, 401, 'read again at 300 s: the rotated-out secret is refused');
      assert.equal((await send(NEW[name])).statusCode, 202);
      assert.equal(reads(name), 2);
    });
  }

  it('a flood of forged requests reads the secret at most once per minRefetchSeconds', async () => {
    const forged = [];
    for (let second = 0; second < 120; second++) {
      clock = T0 + second * 1000;
      for (let i = 0; i < 5; i++) forged.push((await hooks('forged-secret-00000')).statusCode);
    }
    assert.ok(forged.every((status) => status === 401));
    // Cold start at T0, then refusals at 30 s, 60 s and 90 s: four reads for 600 forged requests.
    assert.equal(reads('HOOK_SECRET'), 4, store.calls.join(' '));
  });

  it('a value read again that is blank or too short is not used: the one held stays', async () => {
    store.values.set(`${PATH}/HOOK_SECRET`, ' ');
    clock += 300_000;
    assert.equal((await hooks(OLD.HOOK_SECRET)).statusCode, 202);
    assert.equal(reads('HOOK_SECRET'), 2);
  });
  it('through the Lambda handler: the container reads the source secret from SSM at cold start, and a rotation takes effect in the warm container', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'queuebox-rotation-'));
    const file = join(dir, 'queuebox.yml');
    writeFileSync(file, 'inbox:\n  sources:\n    crm: { type: http, path: /crm, auth: { type: bearer, tokenEnv: CRM_TOKEN } }\n');
    const env = { QUEUEBOX_CONFIG: file, QUEUEBOX_DATABASE_URL: testDatabaseUrl(), QUEUEBOX_DATABASE__SCHEMA: db.schema, QUEUEBOX_SECRETS_PARAMETER_PATH: PATH, QUEUEBOX_SECRETS__MIN_REFETCH_SECONDS: '1' };
    Object.assign(process.env, env);
    delete process.env.CRM_TOKEN;
    setContainer(undefined);
    const call = async (token: string) =>
      (await httpHandler(apiGatewayV2Event('/inbox/crm', '{}', { authorization: `Bearer ${token}`, 'x-idempotency-key': `h-${++sequence}` }), fakeLambdaContext({ timeoutMs: 10_000 }))).statusCode;
    const earlier = reads('CRM_TOKEN');
    try {
      assert.equal(await call(OLD.CRM_TOKEN), 202);
      store.values.set(`${PATH}/CRM_TOKEN`, NEW.CRM_TOKEN);
      await new Promise((resolve) => setTimeout(resolve, 1100));
      assert.equal(await call(NEW.CRM_TOKEN), 202, 'read again after the refusal, 1 s after the last read');
      assert.equal(await call(OLD.CRM_TOKEN), 401);
      assert.equal(reads('CRM_TOKEN') - earlier, 2, 'the cold-start read and one read after the refusal');
    } finally {
      for (const key of Object.keys(env)) delete process.env[key];
      setContainer(undefined);
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
