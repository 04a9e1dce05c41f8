/**
 * A `\u` escape whose four characters are not all hex digits (`\u00zz`) is not JSON, and the body
 * is refused for that, with `JSON.parse`'s own reason: it holds no NUL and no lone surrogate, so
 * the sender must not be told it does. The receipt check reads an escape's code unit only when
 * its four characters are hex.
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import { handler as httpHandler } from '../../functions/inbox-http.ts';
import { handler as sqsHandler } from '../../functions/inbox-sqs.ts';
import { InboxRejectionError } from '../../lib/inbox/inbox-rejection.ts';
import { parseJsonBody } from '../../lib/inbox/parse-json-body.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { setContainer } from '../../lib/runtime/container.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { fakeLambdaContext } from '../helpers/lambda-context.ts';
import { apiGatewayV2Event } from '../helpers/api-gateway-event.ts';
import { sqsRecord } from '../helpers/sqs-record.ts';

const logger = createLogger({ serviceName: 'test', logLevel: 'SILENT' });
const ctx = () => fakeLambdaContext({ timeoutMs: 10_000 });

/** Bodies with a malformed `\u` escape (as JSON text: a backslash, `u`, then the four characters). */
const MALFORMED = ['{"note":"\\u00zz"}', '{"note":"\\u0G00"}', '{"note":"\\uD83D\\u00zz"}', '{"note":"\\udc0z"}', '{"note":"\\u12"}'];

/** What `JSON.parse` says of `text`. */
function jsonParseReason(text: string): string {
  try {
    JSON.parse(text);
  } catch (error) {
    return (error as Error).message;
  }
  throw new Error(`${text} parses`);
}

describe('parseJsonBody: a malformed \\u escape', () => {
  for (const body of MALFORMED) {
    it(`${body} is refused as not JSON, with JSON.parse's reason (not NUL, not a lone surrogate)`, () => {
      assert.throws(
        () => parseJsonBody(body),
        (e: unknown) => e instanceof InboxRejectionError && e.reason === 'invalid_json' && e.message === `body is not valid JSON: ${jsonParseReason(body)}`,
      );
    });
  }

  it('well-formed escapes are still read: \\u0000 is NUL, \\uD83D before a non-surrogate escape is lone, \\u00e9 and a pair pass', () => {
    assert.throws(() => parseJsonBody('{"a":"\\u0000"}'), /NUL characters/);
    assert.throws(() => parseJsonBody('{"a":"\\uD83D\\u0041"}'), /lone UTF-16 surrogate escape/);
    assert.throws(() => parseJsonBody('{"a":"\\uDE00"}'), /lone UTF-16 surrogate escape/);
    assert.deepEqual(parseJsonBody('{"a":"\\u00e9\\uD83D\\uDE00\\u00E9"}').value, { a: 'é😀é' });
  });
});

describe('receivers: a malformed \\u escape', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({ inbox: { sources: { a: { type: 'http', path: '/a', auth: { type: 'none' } }, q: { type: 'sqs', queueName: 'q' } } } });
  });
  beforeEach(async () => {
    setContainer({ config: db.config, driver: db.driver, logger, env: {}, writeMetrics: () => {} });
    await db.query(`TRUNCATE "${db.schema}".inbox`);
  });
  after(async () => {
    setContainer(undefined);
    await db.drop();
  });

  for (const body of ['{"note":"\\u00zz"}', '{"note":"\\u0G00"}', '{"note":"\\uD83D\\u00zz"}']) {
    it(`HTTP: ${body} is answered 400 invalid_json with JSON.parse's reason; nothing is stored`, async () => {
      const answer = await httpHandler(apiGatewayV2Event('/inbox/a', body, { 'x-idempotency-key': `k-${body}` }), ctx());
      assert.equal(answer.statusCode, 400);
      const error = (JSON.parse(answer.body ?? '{}') as { error?: string }).error ?? '';
      assert.equal(error, `body is not valid JSON: ${jsonParseReason(body)}`);
      assert.doesNotMatch(error, /NUL|surrogate/);
      assert.deepEqual(await db.query(`SELECT 1 FROM "${db.schema}".inbox`), []);
    });
  }

  it('SQS: a record holding \\u00zz is stored dead with JSON.parse\'s reason', async () => {
    const body = '{"note":"\\u00zz"}';
    const result = await sqsHandler({ Records: [sqsRecord('m1', body, 'q')] }, ctx());
    assert.deepEqual(result.batchItemFailures, []);
    const rows = await db.query<{ state: string; last_error: string }>(`SELECT state, last_error FROM "${db.schema}".inbox`);
    assert.deepEqual(rows, [{ state: 'dead', last_error: `body is not valid JSON: ${jsonParseReason(body)}` }]);
  });
});
