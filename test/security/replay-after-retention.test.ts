/**
 * A captured signed request replayed after retention ran (the real retention pass against a real
 * PostgreSQL) is not stored again: on GitHub sources (no signed timestamp) retention keeps the
 * rows for `retention.inboxReplayHorizonHours`, so the replay is a duplicate; on hmac and Stripe
 * sources the signed timestamp is long outside the tolerance, so the replay is refused.
 */
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { after, before, beforeEach, describe, it } from 'node:test';
import { createHttpReceiver, type HttpReceiver } from '../../lib/inbox/http-receiver.ts';
import { hmacSignature } from '../../lib/inbox/source-auth.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import { parseConfig } from '../../lib/config/load-config.ts';
import { runRetention } from '../../lib/operations/retention.ts';
import { apiGatewayV2Event } from '../helpers/api-gateway-event.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';

const env = { HOOK_SECRET: 'hook-secret-0000001', STRIPE_SECRET: 'whsec_stripe_000001', GITHUB_SECRET: 'github-secret-00001' };
const HOUR = 3_600_000;

describe('replay of a captured signed request after retention deleted old rows', () => {
  let db: TestDatabase;
  let receive: HttpReceiver;
  let clock = Date.now();
  const metrics = new QueueBoxMetrics({ namespace: 'QueueBox', serviceName: 'test', write: () => {} });
  const status = async (path: string, body: string, headers: Record<string, string>) => (await receive(apiGatewayV2Event(path, body, headers), metrics)).statusCode;
  const keys = async (source: string) => (await db.query<{ idempotency_key: string }>(`SELECT idempotency_key FROM "${db.schema}".inbox WHERE source = $1 ORDER BY sequence`, [source])).map((r) => r.idempotency_key);
  /** Every row processed and created `hours` ago, as after the relay ran that long ago. */
  const age = (hours: number) => db.query(`UPDATE "${db.schema}".inbox SET state = 'processed', processed_at = now(), created_at = now() - make_interval(hours => $1)`, [hours]);
  const retention = () => runRetention({ driver: db.driver, config: db.config });

  const github = (body: string, delivery: string) => ({
    'x-github-event': 'issues',
    'x-github-delivery': delivery,
    'x-hub-signature-256': `sha256=${createHmac('sha256', env.GITHUB_SECRET).update(body).digest('hex')}`,
  });
  const hmac = (body: string, ts: string) => ({ 'x-timestamp': ts, 'x-signature': hmacSignature('sha256', env.HOOK_SECRET, ts, Buffer.from(body)) });
  const stripe = (body: string, ts: string) => ({ 'stripe-signature': `t=${ts},v1=${hmacSignature('sha256', env.STRIPE_SECRET, ts, Buffer.from(body))}` });

  before(async () => {
    db = await createTestDatabase({
      inbox: {
        sources: {
          github: { type: 'http', path: '/github', auth: { type: 'github', secretEnv: 'GITHUB_SECRET' } },
          ghbody: { type: 'http', path: '/ghbody', auth: { type: 'github', secretEnv: 'GITHUB_SECRET' }, idempotency: 'body-digest' },
          hooks: { type: 'http', path: '/hooks', auth: { type: 'hmac', secretEnv: 'HOOK_SECRET' }, idempotencyKeyPath: '$.id' },
          stripe: { type: 'http', path: '/stripe', auth: { type: 'stripe', secretEnv: 'STRIPE_SECRET' } },
        },
      },
      retention: { enabled: true, inboxProcessedAfterHours: 168, inboxReplayHorizonHours: 720 },
    });
    receive = createHttpReceiver({ config: db.config, driver: db.driver, logger: createLogger({ serviceName: 'test', logLevel: 'SILENT' }), env, now: () => clock });
  });
  beforeEach(async () => {
    clock = Date.now();
    await db.query(`DELETE FROM "${db.schema}".inbox`);
  });
  after(async () => db.drop());

  it('github: the same delivery replayed after retention deleted the other sources’ rows is a duplicate (kept for the replay horizon)', async () => {
    const body = JSON.stringify({ action: 'opened', issue: { number: 1 } });
    assert.equal(await status('/inbox/github', body, github(body, 'delivery-1')), 202);
    assert.equal(await status('/inbox/ghbody', body, github(body, 'delivery-1')), 202);
    const ts = String(Math.floor(clock / 1000));
    const hooksBody = JSON.stringify({ id: 'evt_h' });
    assert.equal(await status('/inbox/hooks', hooksBody, hmac(hooksBody, ts)), 202);
    await age(200);
    const result = await retention();
    assert.equal(result.deleted.inbox, 1, 'the hmac row, 200 h old, is deleted; the github rows are within the 720 h horizon');
    assert.equal(await status('/inbox/github', body, github(body, 'delivery-1')), 200, 'replay of the same request: duplicate');
    assert.equal(await status('/inbox/ghbody', body, github(body, 'delivery-2')), 200, 'body-digest: even under a new delivery id');
    assert.deepEqual(await keys('github'), ['delivery-1']);
  });

  it('github: beyond the replay horizon the rows are deleted, and a replay is stored again (documented limit)', async () => {
    const body = JSON.stringify({ action: 'closed', issue: { number: 2 } });
    assert.equal(await status('/inbox/github', body, github(body, 'delivery-9')), 202);
    await age(721);
    assert.equal((await retention()).deleted.inbox, 1);
    assert.equal(await status('/inbox/github', body, github(body, 'delivery-9')), 202);
  });

  it('hmac and stripe: the replayed request, 200 h later, is refused on its signed timestamp although retention deleted its row', async () => {
    const ts = String(Math.floor(clock / 1000));
    const hooksBody = JSON.stringify({ id: 'evt_1' });
    const stripeBody = JSON.stringify({ id: 'evt_s1', type: 'invoice.paid' });
    assert.equal(await status('/inbox/hooks', hooksBody, hmac(hooksBody, ts)), 202);
    assert.equal(await status('/inbox/stripe', stripeBody, stripe(stripeBody, ts)), 202);
    await age(200);
    assert.equal((await retention()).deleted.inbox, 2);
    clock += 200 * HOUR;
    assert.equal(await status('/inbox/hooks', hooksBody, hmac(hooksBody, ts)), 401);
    assert.equal(await status('/inbox/stripe', stripeBody, stripe(stripeBody, ts)), 401);
    assert.deepEqual([...(await keys('hooks')), ...(await keys('stripe'))], []);
  });

  it('a replay horizon (or age) past what the database can subtract is refused at load; the largest accepted runs', async () => {
    for (const key of ['inboxReplayHorizonHours', 'inboxProcessedAfterHours', 'inboxDeadAfterHours', 'outboxSentAfterHours', 'outboxDeadAfterHours']) {
      assert.throws(() => parseConfig({ retention: { [key]: 100_000_000 } }), (error: Error) => error.name === 'ConfigError' && error.message.includes(`retention.${key}: must be at most 87600 hours`));
    }
    const longest = 87_600;
    const config = parseConfig({
      ...db.config,
      retention: { enabled: true, outboxSentAfterHours: longest, outboxDeadAfterHours: longest, inboxProcessedAfterHours: longest, inboxDeadAfterHours: longest, inboxReplayHorizonHours: longest },
    });
    await status('/inbox/github', '{"n":1}', github('{"n":1}', 'kept-1'));
    await age(24);
    assert.deepEqual((await runRetention({ driver: db.driver, config })).deleted, { outbox: 0, inbox: 0 });
  });
});
