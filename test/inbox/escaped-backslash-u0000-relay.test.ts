/**
 * docs/inbox.md: "The text `\\u0000` (an escaped backslash) holds no NUL and is stored as sent",
 * and "the relay can forward every message answered 202 to the outbox". A body holding a backslash
 * followed by `u0000` is accepted, and the relay forwards it: the outbox's check for NUL looks
 * for the character, not for the six characters `\u0000` in the payload's JSON text.
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import { handler as httpHandler } from '../../functions/inbox-http.ts';
import { runRelayPass } from '../../lib/inbox/relay-pass.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import { validateOutboxMessage } from '../../lib/outbox/validate-message.ts';
import { setContainer } from '../../lib/runtime/container.ts';
import { createDeadline } from '../../lib/runtime/deadline.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { fakeLambdaContext } from '../helpers/lambda-context.ts';
import { apiGatewayV2Event } from '../helpers/api-gateway-event.ts';

const env = { SHOP_TOKEN: 'shop-token-00000001' };
const logger = createLogger({ serviceName: 'test', logLevel: 'SILENT' });

describe('the text \\\\u0000 (escaped backslash, no NUL) from receipt to the outbox', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({ inbox: { sources: { shop: { type: 'http', path: '/shop', auth: { type: 'bearer', tokenEnv: 'SHOP_TOKEN' }, eventTypePath: '$.type' } } } });
  });
  beforeEach(async () => {
    setContainer({ config: db.config, driver: db.driver, logger, env, writeMetrics: () => {} });
    await db.query(`TRUNCATE "${db.schema}".inbox, "${db.schema}".outbox, "${db.schema}".queuebox_maintenance`);
  });
  after(async () => {
    setContainer(undefined);
    await db.drop();
  });

  it('a body holding the string \\\\u0000 is accepted (202) and then forwarded by the relay, not made dead', async () => {
    const body = '{"type":"path","windows":"C:\\\\u0000\\\\file"}'; // the JSON text has \\u0000: a backslash, then u0000
    assert.ok(!body.includes('\u0000'));
    const answer = await httpHandler(apiGatewayV2Event('/inbox/shop', body, { authorization: `Bearer ${env.SHOP_TOKEN}`, 'x-idempotency-key': 'bs-1' }), fakeLambdaContext({ timeoutMs: 10_000 }));
    assert.equal(answer.statusCode, 202, answer.body);
    await runRelayPass({
      config: db.config,
      driver: db.driver,
      logger,
      metrics: new QueueBoxMetrics({ namespace: 'QueueBox', serviceName: 'test', write: () => {} }),
      deadline: createDeadline(fakeLambdaContext({ timeoutMs: 20_000 }), db.config.lambda.deadlineMarginMs),
      mode: 'drain',
    });
    const rows = await db.query<{ state: string; last_error: string | null }>(`SELECT state, last_error FROM "${db.schema}".inbox`);
    assert.deepEqual(rows.map((r) => [r.state, r.last_error]), [['processed', null]]);
    const outbox = await db.query<{ payload: { windows: string } }>(`SELECT payload FROM "${db.schema}".outbox`);
    assert.equal(outbox[0]?.payload.windows, 'C:\\u0000\\file');
  });

  it('validateOutboxMessage accepts a payload string holding a backslash followed by u0000 (no NUL)', () => {
    const payload = { windows: 'C:\\u0000\\file' };
    assert.ok(!payload.windows.includes('\u0000'));
    assert.doesNotThrow(() => validateOutboxMessage({ topic: 't', payload }));
  });
});
