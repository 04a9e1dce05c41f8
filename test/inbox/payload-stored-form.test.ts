/**
 * What the inbox stores as a message's payload on PostgreSQL (docs/inbox.md, "What is stored"):
 * the body as `jsonb`, which keeps every value exactly but writes it in its own form — numbers
 * without an exponent (`1e3` is `1000`, `1.5E-7` is `0.00000015`), `-0` as `0`, the digits after
 * the point kept (`1.10`), the last of duplicate keys, keys sorted and one space after `:` and `,`.
 * Since a number written out can be far longer than as sent (`1e1000` is 1,001 characters), a body
 * whose numbers, as stored, make it larger than `inbox.maxBodyBytes` is refused (HTTP 400
 * `invalid_json`; SQS: stored `dead` with the reason). A number is refused only for what
 * PostgreSQL's `numeric` itself refuses: too many digits before or after the point once the
 * exponent is applied, or an exponent beyond ±1,073,741,822 — not an exponent beyond ±1000.
 * A leading byte order mark is ignored by both receivers.
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import type { SQSRecord } from 'aws-lambda';
import { handler as httpHandler } from '../../functions/inbox-http.ts';
import { handler as sqsHandler } from '../../functions/inbox-sqs.ts';
import { InboxRejectionError } from '../../lib/inbox/inbox-rejection.ts';
import { MAX_NUMBER_EXPONENT, parseJsonBody } from '../../lib/inbox/parse-json-body.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { setContainer } from '../../lib/runtime/container.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { fakeLambdaContext } from '../helpers/lambda-context.ts';
import { apiGatewayV2Event } from '../helpers/api-gateway-event.ts';

const env = { SHOP_TOKEN: 'shop-token-00000001' };
const logger = createLogger({ serviceName: 'test', logLevel: 'SILENT' });
const ctx = () => fakeLambdaContext({ timeoutMs: 30_000 });

function sqsRecord(messageId: string, body: string): SQSRecord {
  return {
    messageId, receiptHandle: `rh-${messageId}`, body,
    attributes: { ApproximateReceiveCount: '1', SentTimestamp: '0', SenderId: 's', ApproximateFirstReceiveTimestamp: '0' },
    messageAttributes: {}, md5OfBody: '', eventSource: 'aws:sqs', eventSourceARN: 'arn:aws:sqs:eu-west-1:000000000000:feed', awsRegion: 'eu-west-1',
  };
}

const refusedAsInvalidJson = (reason: RegExp) => (e: unknown) => e instanceof InboxRejectionError && e.reason === 'invalid_json' && reason.test(e.message);
const TOO_LARGE = /^body is too large once stored: PostgreSQL writes its numbers out in full/;

describe('the stored form of a payload', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({
      inbox: {
        sources: {
          shop: { type: 'http', path: '/shop', auth: { type: 'bearer', tokenEnv: 'SHOP_TOKEN' }, aggregateIdPath: '$.b' },
          feed: { type: 'sqs', idempotencyKeyPath: '$.id' },
        },
      },
    });
  });
  beforeEach(async () => {
    setContainer({ config: db.config, driver: db.driver, logger, env, writeMetrics: () => {} });
    await db.query(`TRUNCATE "${db.schema}".inbox`);
  });
  after(async () => {
    setContainer(undefined);
    await db.drop();
  });
  const send = async (key: string, body: string) =>
    httpHandler(apiGatewayV2Event('/inbox/shop', body, { authorization: `Bearer ${env.SHOP_TOKEN}`, 'x-idempotency-key': key }), ctx());
  const stored = async () =>
    db.query<{ idempotency_key: string; state: string; last_error: string | null; text: string; aggregate_id: string | null }>(
      `SELECT idempotency_key, state, last_error, payload::text AS text, aggregate_id FROM "${db.schema}".inbox ORDER BY sequence`,
    );
  /** PostgreSQL's text of one number as jsonb stores it. */
  const storedNumber = async (n: string) => (await db.query<{ t: string }>(`SELECT ($1::jsonb -> 'n')::text AS t`, [`{"n":${n}}`]))[0]!.t;

  it('stores the documented jsonb form: values kept, numbers written out, -0 as 0, the last duplicate key, keys sorted; an extracted id keeps the sender\'s text', async () => {
    const body = '{"b":1e3,  "a":1.5E-7,"c":-0,"dd":1.10,"e":[1,2.50e1],"a":"last","s":"\\u00e9\\/"}';
    const answer = await send('form-1', body);
    assert.equal(answer.statusCode, 202, answer.body);
    const [row] = await stored();
    assert.equal(row!.text, '{"a": "last", "b": 1000, "c": 0, "e": [1, 25.0], "s": "é/", "dd": 1.10}');
    assert.equal(row!.aggregate_id, '1e3');
  });

  it('HTTP: a body under maxBodyBytes whose numbers written out would exceed it is refused with 400 invalid_json; nothing is stored', async () => {
    const body = `{"n":[${Array(30_000).fill('1e1000').join(',')}]}`; // 210 KB; written out, 30 MB
    assert.ok(Buffer.byteLength(body) < db.config.inbox.maxBodyBytes);
    const answer = await send('amp-1', body);
    assert.equal(answer.statusCode, 400, answer.body);
    const error = (JSON.parse(answer.body ?? '') as { error: string }).error;
    assert.match(error, TOO_LARGE);
    const writtenOut = Buffer.byteLength(body) + 30_000 * (1001 - '1e1000'.length);
    assert.ok(error.endsWith(`makes the body ${writtenOut} bytes (${Buffer.byteLength(body)} as sent), and a body is at most ${db.config.inbox.maxBodyBytes} bytes (inbox.maxBodyBytes)`), error);
    assert.deepEqual(await stored(), []);
  });

  it('SQS: such a body is stored dead with the reason (as sent, a JSON string), not expanded', async () => {
    const body = `{"id":"amp-2","n":[${Array(140_000).fill('1e1000').join(',')}]}`; // 980 KB; written out, 140 MB
    const result = await sqsHandler({ Records: [sqsRecord('m-1', body)] }, ctx());
    assert.deepEqual(result.batchItemFailures, []);
    const rows = await stored();
    assert.deepEqual(rows.map((r) => r.state), ['dead']);
    assert.match(rows[0]!.last_error ?? '', TOO_LARGE);
    assert.ok(rows[0]!.text.length < 2 * body.length);
  });

  it('SQS: a body larger than maxBodyBytes as sent is stored dead with the reason, whether its numbers grow when stored or not', async () => {
    const limit = 2048;
    setContainer({ config: { ...db.config, inbox: { ...db.config.inbox, maxBodyBytes: limit } }, driver: db.driver, logger, env, writeMetrics: () => {} });
    const pad = 'x'.repeat(3000);
    // The same payload once stored; `1e3` grows by a byte (`1000`), `1000` keeps its length.
    const plain = `{"id":"big-plain","n":1000,"pad":"${pad}"}`;
    const grows = `{"id":"big-exp","n":1e3,"pad":"${pad}"}`;
    const small = '{"id":"small","n":1e3}';
    const result = await sqsHandler({ Records: [sqsRecord('m-plain', plain), sqsRecord('m-exp', grows), sqsRecord('m-small', small)] }, ctx());
    assert.deepEqual(result.batchItemFailures, []);
    const rows = await stored();
    assert.deepEqual(
      rows.map((r) => [r.idempotency_key, r.state]),
      [['rejected:m-plain', 'dead'], ['rejected:m-exp', 'dead'], ['small', 'pending']],
    );
    assert.equal(rows[0]!.last_error, `body of ${Buffer.byteLength(plain)} bytes exceeds the limit of ${limit} bytes (inbox.maxBodyBytes)`);
    assert.equal(rows[1]!.last_error, `body of ${Buffer.byteLength(grows)} bytes exceeds the limit of ${limit} bytes (inbox.maxBodyBytes)`);
    // Nothing is lost: the dead row keeps the body as sent, as a JSON string.
    assert.equal(JSON.parse(rows[0]!.text), plain);
  });

  it('a body whose numbers written out stay within maxBodyBytes is stored written out', async () => {
    const answer = await send('wide-1', '{"n":[1e1000,-1e-5]}');
    assert.equal(answer.statusCode, 202, answer.body);
    assert.equal((await stored())[0]!.text, `{"n": [1${'0'.repeat(1000)}, -0.00001]}`);
  });

  it('the written-out length of each number is PostgreSQL\'s: the limit passes the body exactly at it and refuses it one byte below', async () => {
    const tokens = ['1e3', '1E+3', '1e1000', '-1e5000', '1.5E-7', '-0.001e-3', '100e-2', '0e-20', '-0e-3', '0.0000e-16379', '1e131071', '1e-16383', '12.3456e2',
      '0.001e3', '-0', '-0.0', '0e99', '1.10', '12345678901234567890', '1e0', '-12.5e1', '1000e-3'];
    let growing = 0;
    for (const n of tokens) {
      const body = `{"n":${n}}`;
      const written = await storedNumber(n);
      if (written.length > n.length) {
        growing++;
        const storedSize = Buffer.byteLength(body) - n.length + written.length;
        assert.doesNotThrow(() => parseJsonBody(body, storedSize), n);
        assert.throws(() => parseJsonBody(body, storedSize - 1), refusedAsInvalidJson(TOO_LARGE), n);
      } else {
        // A number that keeps or loses length is never refused for it, whatever the limit.
        assert.doesNotThrow(() => parseJsonBody(body, 1), n);
      }
    }
    assert.equal(growing, 8);
  });

  it('a number PostgreSQL stores is accepted whatever its exponent; one it refuses is refused with the true reason', async () => {
    for (const n of ['1e1001', '1e-1001', '1e5000', `0e${MAX_NUMBER_EXPONENT}`, '0e-16383', '0e16383', '0.5e-16382']) {
      const body = `{"n":${n}}`;
      await db.query('SELECT $1::jsonb', [body]); // PostgreSQL stores it
      assert.doesNotThrow(() => parseJsonBody(body), `${n}: refused although PostgreSQL stores it`);
    }
    const refused: Array<[string, RegExp]> = [
      [`0e${MAX_NUMBER_EXPONENT + 1}`, /number 0e1073741823 is out of range: its exponent is beyond ±1073741822, the largest PostgreSQL's numeric reads/],
      [`0e-${MAX_NUMBER_EXPONENT + 1}`, /its exponent is beyond ±1073741822/],
      [`1e${'9'.repeat(400)}`, /its exponent is beyond ±1073741822/],
      ['1e200000', /number 1e200000 is out of range: 200001 digits before the decimal point, PostgreSQL stores at most 131072/],
      ['1e131072', /131073 digits before the decimal point/],
      ['1e-16384', /number 1e-16384 is out of range: 16384 digits after the decimal point, PostgreSQL stores at most 16383/],
      ['0e-16384', /16384 digits after the decimal point/],
    ];
    // PostgreSQL 18 stores a zero whatever its exponent, 15 refuses one beyond the limits: QueueBox
    // refuses it on every version (the rule all supported servers keep), and the server's own
    // refusal is checked for the zeros only where the server makes it.
    const [{ version }] = (await db.query<{ version: number }>(`SELECT current_setting('server_version_num')::int AS version`)) as [{ version: number }];
    for (const [n, reason] of refused) {
      const body = `{"n":${n}}`;
      if (!n.startsWith('0') || version < 180000) await assert.rejects(db.query('SELECT $1::jsonb', [body]), /value overflows numeric format/, `${n}: PostgreSQL refuses it`);
      assert.throws(() => parseJsonBody(body), refusedAsInvalidJson(reason), n);
    }
  });

  it('HTTP: a number with an exponent beyond ±1000 is accepted and stored written out', async () => {
    const answer = await send('exp-1', '{"n":[1e1001,1e-1001]}');
    assert.equal(answer.statusCode, 202, answer.body);
    assert.equal((await stored())[0]!.text, `{"n": [1${'0'.repeat(1001)}, 0.${'0'.repeat(1000)}1]}`);
  });

  it('a leading byte order mark is ignored the same way over HTTP and SQS', async () => {
    const answer = await send('bom-1', '\uFEFF{"id":"bom-1","b":"x"}');
    assert.equal(answer.statusCode, 202, answer.body);
    const result = await sqsHandler({ Records: [sqsRecord('m-bom', '\uFEFF{"id":"bom-2","b":"x"}')] }, ctx());
    assert.deepEqual(result.batchItemFailures, []);
    const rows = await stored();
    assert.deepEqual(rows.map((r) => [r.idempotency_key, r.state, r.text]), [
      ['bom-1', 'pending', '{"b": "x", "id": "bom-1"}'],
      ['bom-2', 'pending', '{"b": "x", "id": "bom-2"}'],
    ]);
    assert.equal(parseJsonBody('\uFEFF{"a":1}').text, '{"a":1}');
    assert.equal(parseJsonBody(Buffer.from('\uFEFF{"a":1}')).text, '{"a":1}');
    // Only one is dropped: a second is not JSON.
    assert.throws(() => parseJsonBody('\uFEFF\uFEFF{"a":1}'), refusedAsInvalidJson(/not valid JSON/));
  });
});
