/**
 * A secret store that stops answering (a blackholed SSM or Secrets Manager endpoint) must not turn
 * into timeouts for legitimate senders: a re-read of a source secret or of the database secret is
 * bounded, and the value held keeps verifying and connecting. Real AWS SDK and Powertools against
 * a local stand-in that accepts requests and never answers them; real PostgreSQL.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { handler as httpHandler } from '../../functions/inbox-http.ts';
import { handler as reclaimHandler } from '../../functions/reclaim.ts';
import { createHttpReceiver } from '../../lib/inbox/http-receiver.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import { setContainer } from '../../lib/runtime/container.ts';
import { SECRET_REQUEST_TIMEOUT_MS } from '../../lib/runtime/secrets.ts';
import { loadSourceSecrets } from '../../lib/runtime/source-secrets.ts';
import { apiGatewayV2Event } from '../helpers/api-gateway-event.ts';
import { createTestDatabase, testDatabaseUrl, type TestDatabase } from '../helpers/database.ts';
import { FakeSecretStore } from '../helpers/fake-secret-store.ts';
import { fakeLambdaContext } from '../helpers/lambda-context.ts';
import { waitUntil } from '../helpers/wait.ts';

const TOKEN = 'held-crm-token-00001';

describe('a secret store that does not answer', () => {
  const store = new FakeSecretStore();
  const saved = { ...process.env };
  let db: TestDatabase;
  const metrics = new QueueBoxMetrics({ namespace: 'QueueBox', serviceName: 'test', write: () => {} });

  before(async () => {
    db = await createTestDatabase({ inbox: { sources: { crm: { type: 'http', path: '/crm', auth: { type: 'bearer', tokenEnv: 'CRM_TOKEN' } } } } });
    const endpoint = await store.start();
    Object.assign(process.env, { AWS_ENDPOINT_URL: endpoint, AWS_REGION: 'eu-west-1', AWS_ACCESS_KEY_ID: 'test', AWS_SECRET_ACCESS_KEY: 'test' });
  });
  after(async () => {
    for (const key of Object.keys(process.env)) if (!(key in saved)) delete process.env[key];
    Object.assign(process.env, saved);
    setContainer(undefined);
    await store.stop();
    await db.drop();
  });

  it('a source secret due for a re-read: the request is answered with the value held, and refusals make no second hanging read', { timeout: 30_000 }, async () => {
    store.hang = false;
    store.values.set('/outage/CRM_TOKEN', TOKEN);
    let clock = 1_800_000_000_000;
    const env = { QUEUEBOX_SECRETS_PARAMETER_PATH: '/outage' };
    const secrets = await loadSourceSecrets({ env, config: db.config, now: () => clock });
    const receive = createHttpReceiver({ config: db.config, driver: db.driver, logger: createLogger({ serviceName: 'test', logLevel: 'SILENT' }), env, secrets, now: () => clock });
    const send = (token: string, key: string) => receive(apiGatewayV2Event('/inbox/crm', '{}', { authorization: `Bearer ${token}`, 'x-idempotency-key': key }), metrics);
    store.hang = true;
    clock += 300_000;
    const reads = () => store.calls.filter((c) => c.endsWith('/outage/CRM_TOKEN')).length;
    assert.equal((await send(TOKEN, 'a')).statusCode, 202, 'the re-read did not answer: the value held verifies');
    assert.equal(reads(), 2);
    assert.equal((await send('forged-token-0000000', 'b')).statusCode, 401);
    assert.equal((await send(TOKEN, 'c')).statusCode, 202);
    assert.equal(reads(), 2, 'the unanswered read counts as a read: no new one within minRefetchSeconds');
    store.hang = false;
  });

  it('a store that answers after the bound: the request is answered with the value held, and the late answer still rotates the secret', { timeout: 30_000 }, async () => {
    store.hang = false;
    store.values.set('/slow/CRM_TOKEN', TOKEN);
    let clock = 1_800_000_000_000;
    const env = { QUEUEBOX_SECRETS_PARAMETER_PATH: '/slow' };
    const secrets = await loadSourceSecrets({ env, config: db.config, now: () => clock });
    const receive = createHttpReceiver({ config: db.config, driver: db.driver, logger: createLogger({ serviceName: 'test', logLevel: 'SILENT' }), env, secrets, now: () => clock });
    const send = (token: string, key: string) => receive(apiGatewayV2Event('/inbox/crm', '{}', { authorization: `Bearer ${token}`, 'x-idempotency-key': key }), metrics);
    const rotated = 'rotated-crm-token-002';
    store.values.set('/slow/CRM_TOKEN', rotated);
    store.delayMs = 3_000;
    clock += 300_000;
    try {
      assert.equal((await send(TOKEN, 'slow-a')).statusCode, 202, 'answered with the value held before the read came back');
      await new Promise((resolve) => setTimeout(resolve, 2_000));
      assert.equal((await send(rotated, 'slow-b')).statusCode, 202, 'the late answer replaced the value held');
      assert.equal((await send(TOKEN, 'slow-c')).statusCode, 401);
      assert.equal(store.calls.filter((c) => c.endsWith('/slow/CRM_TOKEN')).length, 2, 'the cold-start read and one re-read');
    } finally {
      store.delayMs = 0;
    }
  });

  it("a cold start whose database secret gets no answer: the HTTP receiver answers 503 before the invocation's end", { timeout: 30_000 }, async () => {
    store.hang = true;
    delete process.env.QUEUEBOX_DATABASE_URL;
    delete process.env.DATABASE_URL;
    Object.assign(process.env, { QUEUEBOX_DATABASE_SECRET_ID: 'outage/cold-db', QUEUEBOX_DATABASE__SCHEMA: db.schema, QUEUEBOX_LAMBDA__DEADLINE_MARGIN_MS: '1000' });
    setContainer(undefined);
    try {
      const context = fakeLambdaContext({ timeoutMs: 3000 });
      let timer: NodeJS.Timeout | undefined;
      const ended = new Promise<undefined>((resolve) => (timer = setTimeout(() => resolve(undefined), context.getRemainingTimeInMillis())));
      const answered = await Promise.race([httpHandler(apiGatewayV2Event('/inbox/crm', '{}', { authorization: `Bearer ${TOKEN}` }), context).then((response) => ({ response, remainingMs: context.getRemainingTimeInMillis() })), ended]);
      clearTimeout(timer);
      assert.ok(answered !== undefined, 'answered before the invocation ended');
      assert.ok(answered.remainingMs > 0, `answered with ${answered.remainingMs} ms left`);
      assert.equal(answered.response.statusCode, 503, 'the sender is told to retry');
      assert.equal(store.calls.filter((c) => c.endsWith(':outage/cold-db')).length, 1, 'the secret was asked for once');
      // The read QueueBox stopped waiting for is ended by the SDK client, not left holding one of
      // its 50 sockets: 50 such cold starts would leave every later read waiting for a socket.
      const endedBefore = store.endedByClient.length;
      await waitUntil('the client ended the unanswered request', () => store.endedByClient.length > endedBefore, SECRET_REQUEST_TIMEOUT_MS + 3000);
      assert.ok(store.endedByClient.at(-1)! <= SECRET_REQUEST_TIMEOUT_MS + 1000, `held ${store.endedByClient.at(-1)} ms`);
    } finally {
      store.hang = false;
      for (const key of ['QUEUEBOX_DATABASE_SECRET_ID', 'QUEUEBOX_DATABASE__SCHEMA', 'QUEUEBOX_LAMBDA__DEADLINE_MARGIN_MS']) delete process.env[key];
      process.env.DATABASE_URL = saved.DATABASE_URL;
      setContainer(undefined);
    }
  });

  it('the database secret due for a re-read: the invocation runs on the connection held', { timeout: 30_000 }, async () => {
    store.hang = false;
    store.values.set('outage/db', testDatabaseUrl());
    delete process.env.QUEUEBOX_DATABASE_URL;
    delete process.env.DATABASE_URL;
    Object.assign(process.env, { QUEUEBOX_DATABASE_SECRET_ID: 'outage/db', QUEUEBOX_DATABASE__SCHEMA: db.schema, QUEUEBOX_SECRETS__MAX_AGE_SECONDS: '1' });
    setContainer(undefined);
    try {
      await reclaimHandler({}, fakeLambdaContext({ timeoutMs: 10_000 }));
      store.hang = true;
      await new Promise((resolve) => setTimeout(resolve, 1100));
      await reclaimHandler({}, fakeLambdaContext({ timeoutMs: 10_000 }));
      assert.equal(store.calls.filter((c) => c.endsWith(':outage/db')).length, 2, 'the secret was due and read again');
    } finally {
      store.hang = false;
      for (const key of ['QUEUEBOX_DATABASE_SECRET_ID', 'QUEUEBOX_DATABASE__SCHEMA', 'QUEUEBOX_SECRETS__MAX_AGE_SECONDS']) delete process.env[key];
      process.env.DATABASE_URL = saved.DATABASE_URL;
      setContainer(undefined);
    }
  });
});
