/**
 * The HTTP receiver with several containers and both API Gateway payload formats: one key sent
 * concurrently, REST API (payload 1.0) events with base64 bodies, headers in any case and a stage
 * named like the first segment of the path, and HTTP API (payload 2.0) named stages.
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import type { APIGatewayProxyEvent } from 'aws-lambda';
import { createHttpReceiver, type HttpReceiver } from '../../lib/inbox/http-receiver.ts';
import { hmacSignature } from '../../lib/inbox/source-auth.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { apiGatewayV2Event } from '../helpers/api-gateway-event.ts';

const env = { HOOK_SECRET: 'hook-secret-000001', TOKEN: 'token-0000000000001' };
const logger = createLogger({ serviceName: 'test', logLevel: 'SILENT' });
const metrics = () => new QueueBoxMetrics({ namespace: 'QueueBox', serviceName: 'test', write: () => {} });

function v1(path: string, stage: string, body: string, headers: Record<string, string>, isBase64Encoded = false): APIGatewayProxyEvent {
  return {
    resource: '/{proxy+}', path, httpMethod: 'POST', headers,
    multiValueHeaders: Object.fromEntries(Object.entries(headers).map(([k, v]) => [k, [v]])),
    queryStringParameters: null, multiValueQueryStringParameters: null, pathParameters: { proxy: path.slice(1) }, stageVariables: null,
    requestContext: {
      accountId: '000000000000', apiId: 'api', authorizer: {}, protocol: 'HTTP/1.1', httpMethod: 'POST',
      identity: {} as APIGatewayProxyEvent['requestContext']['identity'],
      path: `/${stage}${path}`, stage, requestId: 'r', requestTimeEpoch: 0, resourceId: 'x', resourcePath: '/{proxy+}',
    },
    body, isBase64Encoded,
  };
}

describe('HTTP receiver: concurrent deliveries of one key and the API Gateway payload formats', () => {
  let db: TestDatabase;
  const receivers: HttpReceiver[] = [];
  before(async () => {
    db = await createTestDatabase({
      inbox: {
        basePath: '/webhooks',
        sources: {
          hooks: { type: 'http', path: '/hooks', auth: { type: 'hmac', secretEnv: 'HOOK_SECRET' }, idempotencyKeyPath: '$.id' },
          api: { type: 'http', path: '/api', auth: { type: 'bearer', tokenEnv: 'TOKEN' } },
        },
      },
    });
    for (let i = 0; i < 4; i++) receivers.push(createHttpReceiver({ config: db.config, driver: i === 0 ? db.driver : db.newDriver(), logger, env }));
  });
  beforeEach(async () => db.query(`DELETE FROM "${db.schema}".inbox`));
  after(async () => db.drop());

  const signed = (body: string) => {
    const ts = String(Math.floor(Date.now() / 1000));
    return { 'X-Timestamp': ts, 'X-Signature': `sha256=${hmacSignature('sha256', env.HOOK_SECRET, ts, Buffer.from(body))}` };
  };

  it('40 concurrent requests with one key from 4 containers: stored once, one 202, the rest 200 duplicate with the same id', async () => {
    const answers = await Promise.all(
      Array.from({ length: 40 }, (_, i) => {
        const body = JSON.stringify({ n: i });
        return receivers[i % 4]!(apiGatewayV2Event('/webhooks/api', body, { authorization: `Bearer ${env.TOKEN}`, 'x-idempotency-key': 'same' }), metrics());
      }),
    );
    const statuses = answers.map((a) => a.statusCode).sort();
    assert.deepEqual(statuses, [200, ...Array(38).fill(200), 202].sort());
    const ids = new Set(answers.map((a) => (JSON.parse(a.body!) as { messageId: string }).messageId));
    assert.equal(ids.size, 1);
    assert.equal((await db.query(`SELECT 1 FROM "${db.schema}".inbox`)).length, 1);
  });

  it('REST API (payload 1.0), base64 body, headers in mixed case, stage "prod": stored', async () => {
    const body = '{"id":"b64-1"}';
    const answer = await receivers[0]!(v1('/webhooks/hooks', 'prod', Buffer.from(body).toString('base64'), signed(body), true), metrics());
    assert.equal(answer.statusCode, 202, answer.body);
  });

  it('REST API (payload 1.0) whose stage is named like the base path ("webhooks"): the request is routed, not 404', async () => {
    // REST API proxy events carry the path without the stage in `path` (the stage is in
    // requestContext.path), so `path` is routed as is.
    const body = '{"id":"stage-1"}';
    const answer = await receivers[0]!(v1('/webhooks/hooks', 'webhooks', body, signed(body)), metrics());
    assert.equal(answer.statusCode, 202, answer.body);
  });

  it('HTTP API (payload 2.0) on a named stage: the /<stage> prefix of rawPath is removed before routing, also when the stage is named like the base path', async () => {
    for (const [stage, id] of [['prod', 'v2-1'], ['webhooks', 'v2-2']] as const) {
      const body = JSON.stringify({ id });
      const event = apiGatewayV2Event(`/${stage}/webhooks/hooks`, body, signed(body));
      event.requestContext.stage = stage;
      const answer = await receivers[0]!(event, metrics());
      assert.equal(answer.statusCode, 202, `stage ${stage}: ${answer.body}`);
    }
  });
});
