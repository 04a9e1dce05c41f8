/**
 * A JSONPath step selects JSON values only: an index (`[0]`) an element of an array, a name
 * (`.a`, `['a']`) a member of an object. Before, `jsonpath-plus` applied them to strings too:
 * `$.refs[0]` on `"order-1"` selected `"o"`, so an SQS source keyed by `$.refs[0]` took
 * `{"refs":"order-1"}` and `{"refs":"order-2"}` for one message (the second acknowledged as a
 * duplicate, its body stored nowhere), an aggregate id `$.items[0]` on `"xyz"` was `"x"`, and
 * `$.refs.length` was a string's or an array's length. Now such a step selects nothing and the
 * message gets what a path that selects nothing gets: the SQS key falls back to the MessageId,
 * the HTTP key is missing (400 naming the path), an event type, aggregate id or correlation id
 * is absent, a delay is 0.
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import type { SQSRecord } from 'aws-lambda';
import { createHttpReceiver } from '../../lib/inbox/http-receiver.ts';
import { InboxRejectionError } from '../../lib/inbox/inbox-rejection.ts';
import { jsonPathText } from '../../lib/inbox/json-path-value.ts';
import { parseJsonBody } from '../../lib/inbox/parse-json-body.ts';
import { createSqsReceiver } from '../../lib/inbox/sqs-receiver.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import { apiGatewayV2Event } from '../helpers/api-gateway-event.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { sqsRecord } from '../helpers/sqs-record.ts';

const text = (body: string, path: string) => jsonPathText(parseJsonBody(body, 1_000_000).value, path, 'inbox.sources.s.idempotencyKeyPath');

describe('jsonPathText: a step applied to a value it does not fit selects nothing', () => {
  it('an index or a name applied to a string selects no character and no length', () => {
    for (const path of ['$.refs[0]', '$.refs[1]', '$..refs[0]', '$.refs[*]', '$.refs.*', '$.refs.length', "$.refs['length']", '$..[0]', '$.refs..length']) {
      assert.equal(text('{"refs":"order-1"}', path), undefined, path);
    }
  });

  it('a name applied to an array selects no property of it (length), an index applied to an object no member', () => {
    for (const path of ['$.a.length', "$.a['length']", "$.a['0']", '$..length']) assert.equal(text('{"a":["p","q"]}', path), undefined, path);
    assert.equal(text('{"a":{"0":"zero"}}', '$.a[0]'), undefined);
    assert.equal(text('{"n":1.0}', '$.n.text'), undefined, 'a number kept as sent has no members');
  });

  it('selects what each step fits, first match in document order', () => {
    assert.equal(text('{"a":["p","q"]}', '$.a[1]'), 'q');
    assert.equal(text('{"a":["p","q"]}', '$.a[*]'), 'p');
    assert.equal(text('{"a":{"0":"zero"}}', "$.a['0']"), 'zero');
    assert.equal(text('{"x":[{"a":"deep"}],"a":"top"}', '$..a'), 'top');
    assert.equal(text('{"x":[{"a":"deep"}],"b":"top"}', '$..a'), 'deep');
    assert.equal(text('{"refs":["order-1"],"s":"order-2"}', '$..[0]'), 'order-1');
    assert.equal(text('{"n":12345678901234567890}', '$.n'), '12345678901234567890');
    assert.equal(text('{"a b":"space","it\'s":"quote","*":"star"}', "$['it\\'s']"), 'quote');
    assert.equal(text('{"a b":"space","it\'s":"quote","*":"star"}', "$['*']"), 'star', 'a quoted * is a name');
    assert.throws(() => text('{"a":{"b":1}}', '$.a'), (e: unknown) => e instanceof InboxRejectionError && e.reason === 'invalid_field');
  });
});

describe('receivers: a path that would select a character of a string selects nothing', () => {
  let db: TestDatabase;
  let metrics: QueueBoxMetrics;
  const logger = createLogger({ serviceName: 'test', logLevel: 'SILENT' });
  const keyPaths = { idempotencyKeyPath: '$.refs[0]', aggregateIdPath: '$.items[0]' };
  before(async () => {
    db = await createTestDatabase({
      inbox: {
        sources: {
          refs: { type: 'sqs', ...keyPaths },
          fields: { type: 'sqs', eventTypePath: '$.type[0]', correlationIdPath: '$.corr.length', delayPath: '$.delay[0]' },
          counted: { type: 'sqs', idempotencyKeyPath: '$.refs.length' },
          hooks: { type: 'http', path: '/hooks', auth: { type: 'none' }, ...keyPaths },
        },
      },
    });
  });
  after(async () => db.drop());
  beforeEach(async () => {
    await db.query(`TRUNCATE "${db.schema}".inbox`);
    metrics = new QueueBoxMetrics({ namespace: 'QueueBox', serviceName: 'test', write: () => {} });
  });
  const rows = (source: string) =>
    db.query<{ idempotency_key: string; aggregate_id: string | null; event_type: string | null; correlation_id: string | null; state: string; last_error: string | null; payload: unknown }>(
      `SELECT idempotency_key, aggregate_id, event_type, correlation_id, state, last_error, payload FROM "${db.schema}".inbox WHERE source = $1 ORDER BY sequence`,
      [source],
    );

  it('SQS: two messages whose key path meets a string are two rows keyed by their MessageIds, none a duplicate, and no aggregate id is a character', async () => {
    const receive = createSqsReceiver({ config: db.config, driver: db.driver, logger });
    const records: SQSRecord[] = [
      sqsRecord('m-1', '{"refs":"order-1","items":"xyz"}', 'refs'),
      sqsRecord('m-2', '{"refs":"order-2","items":"xyw"}', 'refs'),
      sqsRecord('m-3', '{"refs":["order-3"],"items":["agg-3"]}', 'refs'),
    ];
    assert.deepEqual(await receive({ Records: records }, metrics), { batchItemFailures: [] });
    assert.deepEqual(
      (await rows('refs')).map((r) => [r.idempotency_key, r.aggregate_id, r.state, r.payload]),
      [
        ['m-1', null, 'pending', { refs: 'order-1', items: 'xyz' }],
        ['m-2', null, 'pending', { refs: 'order-2', items: 'xyw' }],
        ['order-3', 'agg-3', 'pending', { refs: ['order-3'], items: ['agg-3'] }],
      ],
    );
    assert.equal(metrics.value('inboxMessages', { status: 'duplicate' }), 0);
    assert.equal(metrics.value('inboxMessages', { status: 'new' }), 3);
  });

  it('SQS: an event type, correlation id or delay path that meets a string gives no field (a delay of 0), not a character or a length', async () => {
    const receive = createSqsReceiver({ config: db.config, driver: db.driver, logger });
    await receive({ Records: [sqsRecord('f-1', '{"type":"paid","corr":"abcdefg","delay":"x"}', 'fields')] }, metrics);
    assert.deepEqual((await rows('fields')).map((r) => [r.idempotency_key, r.event_type, r.correlation_id, r.state, r.last_error]), [['f-1', null, null, 'pending', null]]);
    const due = await db.query<{ due: boolean }>(`SELECT scheduled_at <= now() + interval '1 second' AS due FROM "${db.schema}".inbox WHERE source = 'fields'`);
    assert.deepEqual(due, [{ due: true }]);
  });

  it('SQS: a key path ending in .length selects no array length: two arrays of one length are two messages', async () => {
    const receive = createSqsReceiver({ config: db.config, driver: db.driver, logger });
    await receive({ Records: [sqsRecord('c-1', '{"refs":["a"]}', 'counted'), sqsRecord('c-2', '{"refs":["b"]}', 'counted')] }, metrics);
    assert.deepEqual((await rows('counted')).map((r) => [r.idempotency_key, r.payload]), [['c-1', { refs: ['a'] }], ['c-2', { refs: ['b'] }]]);
  });

  it('HTTP: a key path that meets a string finds no key (400 naming the path, nothing stored); an aggregate id path that meets one gives none', async () => {
    const receive = createHttpReceiver({ config: db.config, driver: db.driver, logger, env: {} });
    for (const refs of ['order-1', 'order-2']) {
      const answer = await receive(apiGatewayV2Event('/inbox/hooks', JSON.stringify({ refs })), metrics);
      assert.equal(answer.statusCode, 400, answer.body);
      assert.match(answer.body ?? '', /missing idempotency key: send the X-Idempotency-Key header or put a value at \$\.refs\[0\] in the body/);
    }
    assert.equal(metrics.value('inboxRejections', { reason: 'missing_idempotency_key' }), 2);
    assert.deepEqual(await rows('hooks'), []);
    const stored = await receive(apiGatewayV2Event('/inbox/hooks', '{"refs":["order-3"],"items":"xyz"}'), metrics);
    assert.equal(stored.statusCode, 202, stored.body);
    assert.deepEqual((await rows('hooks')).map((r) => [r.idempotency_key, r.aggregate_id, r.state]), [['order-3', null, 'pending']]);
  });
});
