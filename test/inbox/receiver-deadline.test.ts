/**
 * The HTTP and SQS inbox receivers bound their store by the invocation's deadline. A store held
 * up past it (here a table lock, as a migration's ALTER or an index build holds) is cancelled by
 * the database: nothing is stored, the sender is answered 503 with `Retry-After` (HTTP) or the
 * record is a batch item failure (SQS), and no statement of the invocation runs on after it. Before,
 * only `database.statementTimeoutMs` (30 s by default) bounded it: the handler answered after the
 * invocation's end and the row was committed then — a duplicate for an `idempotency: none` source
 * whose sender retried after the timeout.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { handler as httpHandler } from '../../functions/inbox-http.ts';
import { handler as sqsHandler } from '../../functions/inbox-sqs.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { setContainer } from '../../lib/runtime/container.ts';
import { createInvocationContext } from '../../lib/runtime/invocation-context.ts';
import { apiGatewayV2Event } from '../helpers/api-gateway-event.ts';
import { sqsRecord } from '../helpers/sqs-record.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';

describe('inbox receivers: the store is bounded by the invocation deadline', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({
      lambda: { deadlineMarginMs: 1000 },
      inbox: {
        sources: {
          shop: { type: 'http', path: '/shop', auth: { type: 'none' }, idempotency: 'none' },
          feed: { type: 'sqs' },
        },
      },
    });
    setContainer({ config: db.config, driver: db.driver, logger: createLogger({ serviceName: 'test', logLevel: 'SILENT' }), env: {}, writeMetrics: () => {} });
  });
  after(async () => {
    setContainer(undefined);
    await db.drop();
  });

  /** Holds an ACCESS EXCLUSIVE lock on the inbox table for `ms`, then lets it go. */
  async function lockInbox(ms: number): Promise<{ released: Promise<void> }> {
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    await client.query('BEGIN');
    await client.query(`LOCK TABLE "${db.schema}".inbox IN ACCESS EXCLUSIVE MODE`);
    const released = (async () => {
      await new Promise((resolve) => setTimeout(resolve, ms));
      await client.query('ROLLBACK');
      await client.end();
    })();
    return { released };
  }

  const running = async () =>
    (await db.query<{ query: string }>(`SELECT query FROM pg_stat_activity WHERE state <> 'idle' AND pid <> pg_backend_pid() AND query LIKE $1 AND query NOT LIKE 'LOCK TABLE%'`, [`%${db.schema}%`])).map((r) => r.query);
  const stored = async () => (await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".inbox`))[0]!.n;

  it('HTTP: a store held past the deadline answers 503 by the deadline; nothing is stored, nothing runs on', async () => {
    const { released } = await lockInbox(6000);
    const context = createInvocationContext({ timeoutMs: 4000 });
    const started = Date.now();
    const response = await httpHandler(apiGatewayV2Event('/inbox/shop', '{"id":"late-1"}'), context);
    const took = Date.now() - started;
    assert.equal(response.statusCode, 503);
    assert.ok(response.headers?.['retry-after'], 'a 503 tells the sender when to retry');
    assert.ok(took < 4000 - 500, `answered by the deadline (${took} ms of a 4000 ms invocation, margin 1000 ms)`);
    assert.deepEqual(await running(), []);
    await released;
    assert.equal(await stored(), 0, 'nothing was committed after the invocation answered');
  });

  it('SQS: records whose store is held past the deadline are batch item failures; nothing is stored, nothing runs on', async () => {
    const { released } = await lockInbox(6000);
    const context = createInvocationContext({ timeoutMs: 4000 });
    const started = Date.now();
    const result = await sqsHandler({ Records: [sqsRecord('m-1', '{"n":1}', 'feed'), sqsRecord('m-2', '{"n":2}', 'feed')] }, context);
    const took = Date.now() - started;
    assert.deepEqual(
      result.batchItemFailures.map((f) => f.itemIdentifier),
      ['m-1', 'm-2'],
    );
    assert.ok(took < 4000 - 500, `returned by the deadline (${took} ms of a 4000 ms invocation, margin 1000 ms)`);
    assert.deepEqual(await running(), []);
    await released;
    assert.equal(await stored(), 0, 'nothing was committed after the invocation returned');
  });
});
