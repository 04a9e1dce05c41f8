/**
 * Number tokens of a message body: exactly RFC 8259's grammar, only as values, and only numbers
 * PostgreSQL's `numeric` can store (131,072 digits before the decimal point, 16,383 after).
 * Anything else is an invalid body: HTTP answers 400 `invalid_json` with the reason, SQS stores
 * the record `dead` with the reason and the rest of its batch is unaffected (FIFO included). A
 * body the database itself still refuses as JSON is treated the same way.
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import type { APIGatewayProxyStructuredResultV2, SQSRecord } from 'aws-lambda';
import { handler as httpHandler } from '../../functions/inbox-http.ts';
import { handler as sqsHandler } from '../../functions/inbox-sqs.ts';
import type { Driver } from '../../lib/db/driver.ts';
import { PayloadRejectedError } from '../../lib/errors.ts';
import { createHttpReceiver } from '../../lib/inbox/http-receiver.ts';
import { InboxRejectionError } from '../../lib/inbox/inbox-rejection.ts';
import { JsonNumberText } from '../../lib/inbox/json-number-text.ts';
import { MAX_NUMBER_FRACTION_DIGITS, MAX_NUMBER_INTEGER_DIGITS, parseJsonBody } from '../../lib/inbox/parse-json-body.ts';
import { hmacSignature } from '../../lib/inbox/source-auth.ts';
import { createSqsReceiver } from '../../lib/inbox/sqs-receiver.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import { setContainer } from '../../lib/runtime/container.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { fakeLambdaContext } from '../helpers/lambda-context.ts';
import { apiGatewayV2Event } from '../helpers/api-gateway-event.ts';

const env = { HOOK_SECRET: 'hook-secret-000001' };
const ctx = () => fakeLambdaContext({ timeoutMs: 10_000 });
const logger = createLogger({ serviceName: 'test', logLevel: 'SILENT' });
const metrics = () => new QueueBoxMetrics({ namespace: 'QueueBox', serviceName: 'test', write: () => {} });

function hmacHeaders(body: string): Record<string, string> {
  const ts = String(Math.floor(Date.now() / 1000));
  return { 'x-timestamp': ts, 'x-signature': `sha256=${hmacSignature('sha256', env.HOOK_SECRET, ts, Buffer.from(body))}` };
}

function sqsRecord(messageId: string, body: string, queue: string): SQSRecord {
  return {
    messageId,
    receiptHandle: `rh-${messageId}`,
    body,
    attributes: { ApproximateReceiveCount: '1', SentTimestamp: '0', SenderId: 's', ApproximateFirstReceiveTimestamp: '0' },
    messageAttributes: {},
    md5OfBody: '',
    eventSource: 'aws:sqs',
    eventSourceARN: `arn:aws:sqs:eu-west-1:000000000000:${queue}`,
    awsRegion: 'eu-west-1',
  };
}

const INVALID_BODIES: Array<[string, string, RegExp]> = [
  ['a number with leading zeros (not JSON)', '{"id":"lz-1","n":007}', /007 at position \d+ is not a JSON number/],
  ['a number as an object key (not JSON)', '{"id":"uk-1",12345678901234567890:1}', /number 12345678901234567890 at position \d+ is not where a value may stand/],
  ['a number of 140,000 digits before the decimal point', `{"id":"big-1","n":${'9'.repeat(140_000)}}`, /140000 digits before the decimal point, PostgreSQL stores at most 131072/],
  ['a number of 17,000 digits after the decimal point', `{"id":"frac-1","n":0.${'1'.repeat(17_000)}}`, /17000 digits after the decimal point, PostgreSQL stores at most 16383/],
];

describe('body number tokens', () => {
  let db: TestDatabase;
  const parse = (r: APIGatewayProxyStructuredResultV2) => JSON.parse(r.body ?? '') as { error?: string };
  const rows = (source: string) =>
    db.query<{ idempotency_key: string; state: string; last_error: string | null }>(
      `SELECT idempotency_key, state, last_error FROM "${db.schema}".inbox WHERE source = $1 ORDER BY sequence`,
      [source],
    );

  before(async () => {
    db = await createTestDatabase({
      inbox: {
        sources: {
          hooks: { type: 'http', path: '/hooks', auth: { type: 'hmac', secretEnv: 'HOOK_SECRET' }, idempotencyKeyPath: '$.id' },
          feed: { type: 'sqs', queueName: 'feed', idempotencyKeyPath: '$.id' },
          ordered: { type: 'sqs', queueName: 'ordered.fifo', idempotencyKeyPath: '$.id' },
        },
      },
    });
  });
  beforeEach(async () => {
    setContainer({ config: db.config, driver: db.driver, logger, env, writeMetrics: () => {} });
    await db.query(`DELETE FROM "${db.schema}".inbox`);
  });
  after(async () => {
    setContainer(undefined);
    await db.drop();
  });

  for (const [what, body, reason] of INVALID_BODIES) {
    it(`HTTP: ${what} is refused with 400 invalid_json and the reason; nothing is stored`, async () => {
      assert.ok(Buffer.byteLength(body) < db.config.inbox.maxBodyBytes);
      const answer = await httpHandler(apiGatewayV2Event('/inbox/hooks', body, hmacHeaders(body)), ctx());
      assert.equal(answer.statusCode, 400, `status ${answer.statusCode}: ${answer.body}`);
      assert.match(parse(answer).error ?? '', reason);
      assert.equal((await rows('hooks')).length, 0);
    });

    it(`SQS: ${what} is stored dead with the reason; the next record of the batch is stored`, async () => {
      const result = await sqsHandler({ Records: [sqsRecord('bad-1', body, 'feed'), sqsRecord('good-1', '{"id":"good-1"}', 'feed')] }, ctx());
      assert.deepEqual(result.batchItemFailures, []);
      const stored = await rows('feed');
      assert.deepEqual(stored.map((r) => [r.idempotency_key, r.state]), [['rejected:bad-1', 'dead'], ['good-1', 'pending']]);
      assert.match(stored[0]!.last_error ?? '', reason);
    });
  }

  it('SQS FIFO: a record with an invalid number is stored dead and the later records of its batch are stored, in order', async () => {
    const records = [
      sqsRecord('f-bad', '{"id":"f-bad","n":007}', 'ordered.fifo'),
      sqsRecord('f-2', '{"id":"f-2"}', 'ordered.fifo'),
      sqsRecord('f-3', '{"id":"f-3"}', 'ordered.fifo'),
    ];
    const result = await sqsHandler({ Records: records }, ctx());
    assert.deepEqual(result.batchItemFailures, []);
    assert.deepEqual((await rows('ordered')).map((r) => [r.idempotency_key, r.state]), [['rejected:f-bad', 'dead'], ['f-2', 'pending'], ['f-3', 'pending']]);
  });

  it('valid numbers are stored with their values: beyond 2^53, 1.0, -0, exponents, and the largest PostgreSQL holds', async () => {
    const n = `[12345678901234567890, 1.0, -0, 1e3, -1.5E-7, 0.0e-1000, ${'9'.repeat(MAX_NUMBER_INTEGER_DIGITS)}, 0.${'1'.repeat(MAX_NUMBER_FRACTION_DIGITS)}]`;
    const body = `{"id":"ok-1","n":${n},"k":{"1":2}}`;
    const answer = await httpHandler(apiGatewayV2Event('/inbox/hooks', body, hmacHeaders(body)), ctx());
    assert.equal(answer.statusCode, 202, answer.body);
    const [row] = await db.query<{ same: boolean }>(`SELECT payload = $1::jsonb AS same FROM "${db.schema}".inbox WHERE source = 'hooks'`, [body]);
    assert.equal(row?.same, true);
  });

  it('the scanner agrees with PostgreSQL at the numeric limits (it never passes what jsonb refuses)', async () => {
    const cases = [
      '9'.repeat(MAX_NUMBER_INTEGER_DIGITS),
      '9'.repeat(MAX_NUMBER_INTEGER_DIGITS + 1),
      `0.${'0'.repeat(MAX_NUMBER_FRACTION_DIGITS)}`,
      `1.${'0'.repeat(MAX_NUMBER_FRACTION_DIGITS + 1)}`,
      `0.${'1'.repeat(MAX_NUMBER_FRACTION_DIGITS - 1000)}e-1000`,
      `0.${'1'.repeat(MAX_NUMBER_FRACTION_DIGITS - 999)}e-1000`,
      `${'9'.repeat(MAX_NUMBER_INTEGER_DIGITS - 1000)}e1000`,
      `${'9'.repeat(MAX_NUMBER_INTEGER_DIGITS - 999)}e1000`,
      `0.00${'1'.repeat(100)}e1000`,
    ];
    for (const n of cases) {
      const body = `{"n":${n}}`;
      let database = true;
      try {
        await db.query('SELECT $1::jsonb', [body]);
      } catch {
        database = false;
      }
      let scanner = true;
      try {
        parseJsonBody(body);
      } catch (error) {
        assert.ok(error instanceof InboxRejectionError && error.reason === 'invalid_json');
        scanner = false;
      }
      assert.equal(scanner, database, `${n.slice(0, 20)}… (${n.length} characters): scanner ${scanner}, PostgreSQL ${database}`);
    }
  });

  it('numbers JavaScript would change are kept as sent, wherever they stand; the rest of the tree is as JSON.parse makes it', () => {
    const { value } = parseJsonBody('{"a": 1.0, "b": [1, -0, {"c": 1e3, "__proto__": 20.50}], "d": "1.0", "e": 12345678901234567890, "a": 2.0, "f": 1.5}');
    const texts = (v: unknown): unknown => (v instanceof JsonNumberText ? `#${v.text}` : Array.isArray(v) ? v.map(texts) : typeof v === 'object' && v !== null ? Object.fromEntries(Object.entries(v).map(([k, e]) => [k, texts(e)])) : v);
    assert.deepEqual(texts(value), { a: '#2.0', b: [1, '#-0', { c: '#1e3', ['__proto__']: '#20.50' }], d: '1.0', e: '#12345678901234567890', f: 1.5 });
    // The sender's "__proto__" is an own key, as JSON.parse makes it, not the object's prototype.
    const inner = (value.b as unknown[])[2] as object;
    assert.equal(Object.getPrototypeOf(inner), Object.prototype);
    assert.ok(Object.hasOwn(inner, '__proto__'));
  });

  it('a body with such numbers and a syntax error is refused with the position in the body as sent', () => {
    assert.throws(() => parseJsonBody('{"a":1.0,}'), (error: unknown) => error instanceof InboxRejectionError && /^body is not valid JSON: .*position 9 \(line 1 column 10\)$/.test(error.message));
    assert.throws(() => parseJsonBody('{"a":[1.0,,2]}'), (error: unknown) => error instanceof InboxRejectionError && error.message.includes('"{"a":[1.0,,2]}" is not valid JSON'));
  });

  it('invalid number tokens are refused before JSON.parse, wherever they stand', () => {
    for (const body of ['{"a":01}', '{"a":1.}', '{"a":-}', '{"a":1e}', '{"a":1.5e+}', '{"a":--1}', '{"a":[1,2,0x1]}', '{"1":{2:3}}', '{"a":1 2}', '{"a":"x" 12345678901234567890}']) {
      assert.throws(() => parseJsonBody(body), (e: unknown) => e instanceof InboxRejectionError && e.reason === 'invalid_json', body);
    }
    const value = parseJsonBody('{"a":[12345678901234567890,{"b":1.10}]}').value as { a: [JsonNumberText, { b: JsonNumberText }] };
    assert.equal(value.a[0].text, '12345678901234567890');
    assert.equal(value.a[1].b.text, '1.10');
  });

  it('PostgreSQL: the insert\'s refusal of a payload as JSON (22P02) or as a number out of range (22003) is PayloadRejectedError', async () => {
    const message = { source: 'hooks', idempotencyKey: 'direct-1', consumption: 'push' as const, payload: {} };
    await assert.rejects(db.driver.inboxInsert({ ...message, payloadText: '{"n":007}' }), (e: unknown) => e instanceof PayloadRejectedError && e.code === '22P02');
    await assert.rejects(db.driver.inboxInsert({ ...message, payloadText: `{"n":${'9'.repeat(140_000)}}` }), (e: unknown) => e instanceof PayloadRejectedError && e.code === '22003');
    assert.equal((await rows('hooks')).length, 0);
  });

  describe('a body the database refuses as JSON after the checks passed it', () => {
    /** The test database's driver, except that it refuses every body that is not stored dead. */
    const refusing = (): Driver => {
      const driver = Object.create(db.driver) as Driver;
      driver.inboxInsert = async (m, tx) => {
        if (m.deadReason === undefined) throw new PayloadRejectedError('the database refused the message\'s JSON: invalid input syntax for type json', '22P02');
        return db.driver.inboxInsert(m, tx);
      };
      return driver;
    };

    it('HTTP: 400 invalid_json with the database\'s reason, not a 500', async () => {
      const receive = createHttpReceiver({ config: db.config, driver: refusing(), logger, env });
      const body = '{"id":"refused-1"}';
      const answer = await receive(apiGatewayV2Event('/inbox/hooks', body, hmacHeaders(body)), metrics());
      assert.equal(answer.statusCode, 400, answer.body);
      assert.match(parse(answer).error ?? '', /^body is not valid JSON: the database refused the message's JSON/);
    });

    it('SQS: stored dead with the reason, not redelivered; the next record is tried', async () => {
      const receive = createSqsReceiver({ config: db.config, driver: refusing(), logger });
      const result = await receive({ Records: [sqsRecord('r-1', '{"id":"r-1"}', 'ordered.fifo'), sqsRecord('r-2', '{"id":"r-2"}', 'ordered.fifo')] }, metrics());
      assert.deepEqual(result.batchItemFailures, []);
      const stored = await rows('ordered');
      assert.deepEqual(stored.map((r) => [r.idempotency_key, r.state]), [['rejected:r-1', 'dead'], ['rejected:r-2', 'dead']]);
      assert.match(stored[0]!.last_error ?? '', /body is not valid JSON: the database refused the message's JSON/);
    });
  });
});
