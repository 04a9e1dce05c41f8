/**
 * The inbox receivers log the errors they meet redacted. A store that fails for a reason the
 * receiver did not expect is logged with its error as an error (name, code, message, stack), the
 * message and the stack redacted as `redactError` redacts; a refusal's detail and a dead-at-receipt
 * reason can quote the body (`JSON.parse` does), and are redacted too — the reason in `last_error`
 * as well, as every other `last_error` is. Before, the error went to the logger whole, and the
 * quoted body to the log line and the row.
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import type { Driver } from '../../lib/db/driver.ts';
import { createHttpReceiver } from '../../lib/inbox/http-receiver.ts';
import { createSqsReceiver } from '../../lib/inbox/sqs-receiver.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import { apiGatewayV2Event } from '../helpers/api-gateway-event.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { sqsRecord } from '../helpers/sqs-record.ts';
import { captureStdout } from '../helpers/stdout-capture.ts';

const SECRETS = /hunter2|s3cr3t/;

/** A driver's error whose message carries a connection string with its password and a `password=` pair. */
function leakyError(): Error {
  return Object.assign(new Error('connection to server failed: postgres://u:hunter2@h/db password=s3cr3t; is the server running?'), { code: '08001' });
}

type Line = Record<string, unknown>;

/** The JSON lines the real Powertools Logger writes while `work` runs. */
async function logged<T>(work: () => Promise<T>): Promise<{ result: T; lines: Line[] }> {
  const { result, lines } = await captureStdout(work, { stderr: true });
  return { result, lines: lines.filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Line) };
}

/** The line's `error` is the error as Powertools writes one — name, code, message, stack with its frames — with no secret in it. */
function assertLoggedError(line: Line | undefined): void {
  assert.ok(line !== undefined, 'the failure is logged');
  assert.doesNotMatch(JSON.stringify(line), SECRETS, 'no secret anywhere in the line');
  const error = line.error as Record<string, unknown>;
  assert.equal(error.name, 'Error');
  assert.equal(error.code, '08001');
  assert.equal(error.message, 'connection to server failed: postgres://***@h/db password=***; is the server running?');
  assert.match(String(error.stack), /^Error: connection to server failed: postgres:\/\/\*\*\*@h\/db password=\*\*\*; is the server running\?\n {4}at /);
}

describe('inbox receivers: the errors they log are redacted', () => {
  let db: TestDatabase;
  let metrics: QueueBoxMetrics;
  const logger = createLogger({ serviceName: 'test', logLevel: 'INFO' });
  before(async () => {
    db = await createTestDatabase({
      inbox: {
        sources: {
          shop: { type: 'http', path: '/shop', auth: { type: 'none' } },
          orders: { type: 'sqs', queueName: 'orders-queue' },
        },
      },
    });
  });
  after(async () => db.drop());
  beforeEach(async () => {
    await db.query(`TRUNCATE "${db.schema}".inbox`);
    metrics = new QueueBoxMetrics({ namespace: 'QueueBox', serviceName: 'test', write: () => {} });
  });
  const failingStore = (): Driver => Object.create(db.driver, { inboxInsert: { value: () => Promise.reject(leakyError()) } });

  it('HTTP: a store that fails unexpectedly answers 500 and logs its error redacted', async () => {
    const receive = createHttpReceiver({ config: db.config, driver: failingStore(), logger, env: {} });
    const { result, lines } = await logged(() => receive(apiGatewayV2Event('/inbox/shop', '{"n":1}', { 'x-idempotency-key': 'k-1' }), metrics));
    assert.equal(result.statusCode, 500);
    assertLoggedError(lines.find((l) => l.message === 'inbox store failed'));
  });

  it('HTTP: a refusal whose detail quotes the body logs it redacted; the sender is answered as before', async () => {
    const receive = createHttpReceiver({ config: db.config, driver: db.driver, logger, env: {} });
    // JSON.parse quotes the body in its message (`Unexpected token 'p', "password=hunterTwo" is not valid JSON`).
    const { result, lines } = await logged(() => receive(apiGatewayV2Event('/inbox/shop', 'password=hunterTwo', { 'x-idempotency-key': 'k-2' }), metrics));
    assert.equal(result.statusCode, 400);
    const line = lines.find((l) => l.message === 'inbox request refused');
    assert.ok(line, 'the refusal is logged');
    assert.match(String(line.detail), /^body is not valid JSON: .*password=\*\*\*/);
    assert.doesNotMatch(JSON.stringify(line), /hunterTwo/);
  });

  it('SQS: a store that fails is logged redacted and the record reported for redelivery', async () => {
    const receive = createSqsReceiver({ config: db.config, driver: failingStore(), logger });
    const { result, lines } = await logged(() => receive({ Records: [sqsRecord('m-1', '{"n":1}', 'orders-queue')] }, metrics));
    assert.deepEqual(result, { batchItemFailures: [{ itemIdentifier: 'm-1' }] });
    assertLoggedError(lines.find((l) => l.message === 'inbox store failed; SQS will redeliver the record'));
  });

  it('SQS: a body stored dead at receipt keeps its text, and its reason, which quotes it, is redacted in last_error and in the log line', async () => {
    const receive = createSqsReceiver({ config: db.config, driver: db.driver, logger });
    const { lines } = await logged(() => receive({ Records: [sqsRecord('m-2', 'password=hunterTwo', 'orders-queue')] }, metrics));
    const [row] = await db.query<{ state: string; last_error: string; payload: unknown }>(`SELECT state, last_error, payload FROM "${db.schema}".inbox`);
    assert.equal(row?.state, 'dead');
    assert.match(row.last_error, /^body is not valid JSON: .*password=\*\*\*/);
    assert.doesNotMatch(row.last_error, /hunterTwo/);
    assert.equal(row.payload, 'password=hunterTwo', 'the body itself is stored as sent: a dead row keeps what arrived');
    const line = lines.find((l) => l.message === 'sqs message stored dead at receipt');
    assert.ok(line, 'the dead row is logged');
    assert.doesNotMatch(JSON.stringify(line), /hunterTwo/);
  });
});
