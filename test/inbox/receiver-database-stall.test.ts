/**
 * The HTTP and SQS inbox receivers answer by the invocation's deadline when the database stops
 * answering without closing the connection (a network partition, a failover): here a proxy that
 * keeps the connections open but passes no bytes. The server's `statement_timeout`, which bounds
 * a store otherwise (`receiver-deadline.test.ts`), never comes back then; the client bounds the
 * wait itself: a warm pooled connection whose statement gets no answer is closed and the store
 * fails, a new connection still in its start-up is given up at the deadline. The answer is a 503
 * with `Retry-After` (HTTP) or a batch item failure (SQS) before the invocation ends, no
 * connection stays checked out, and the silent one is closed, not kept for the next invocation.
 * Before, a warm connection waited for as long as the network stayed silent, and a new one for
 * `database.connectTimeoutMs` (10 s) whatever the time left.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Context } from 'aws-lambda';
import { handler as httpHandler } from '../../functions/inbox-http.ts';
import { handler as sqsHandler } from '../../functions/inbox-sqs.ts';
import { PostgresDriver } from '../../lib/db/postgres/postgres-driver.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { setContainer } from '../../lib/runtime/container.ts';
import { apiGatewayV2Event } from '../helpers/api-gateway-event.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { fakeLambdaContext } from '../helpers/lambda-context.ts';
import { sqsRecord } from '../helpers/sqs-record.ts';
import { startStallProxy, type StallProxy } from '../helpers/stall-proxy.ts';
import { waitUntil } from '../helpers/wait.ts';

/** The invocation: 3 s, of which `lambda.deadlineMarginMs` (1 s) is kept back to answer. */
const TIMEOUT_MS = 3000;

describe('inbox receivers: a database that stops answering is given up by the deadline', () => {
  let db: TestDatabase;
  let proxy: StallProxy;
  const drivers: PostgresDriver[] = [];
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
    proxy = await startStallProxy(db.url);
  });
  after(async () => {
    setContainer(undefined);
    await proxy.close();
    await Promise.all(drivers.map((d) => d.close().catch(() => {})));
    await db.drop();
  });

  /**
   * Runs `body` with the receivers' container on a driver that reaches the database through the
   * proxy; `warm`: with a pooled connection already open (an earlier invocation's), else none.
   */
  async function withStalledDatabase(warm: boolean, body: (driver: PostgresDriver) => Promise<void>): Promise<void> {
    proxy.set('pass');
    const driver = new PostgresDriver({ config: db.config, url: proxy.through(db.url) });
    drivers.push(driver);
    setContainer({ config: db.config, driver, logger: createLogger({ serviceName: 'test', logLevel: 'SILENT' }), env: {}, writeMetrics: () => {} });
    try {
      if (warm) {
        const response = await httpHandler(apiGatewayV2Event('/inbox/shop', '{"warm":true}'), fakeLambdaContext({ timeoutMs: 30_000 }));
        assert.equal(response.statusCode, 202);
        assert.equal(driver.pool.idleCount, 1, 'a warm pooled connection is open');
      } else {
        assert.equal(driver.pool.totalCount, 0, 'no connection is open yet');
      }
      proxy.set('stall');
      await body(driver);
    } finally {
      // A handler still waiting (before the fix) gets its connection ended here.
      proxy.endAll();
      proxy.set('pass');
    }
  }

  /**
   * Invokes, and gives what the handler answered with the invocation's time left when it did;
   * `undefined` when it had not answered at the invocation's end.
   */
  async function answerBeforeEnd<T>(context: Context, invoke: () => Promise<T>): Promise<{ answer: T; remainingMs: number } | undefined> {
    let timer: NodeJS.Timeout | undefined;
    const ended = new Promise<undefined>((resolve) => (timer = setTimeout(() => resolve(undefined), context.getRemainingTimeInMillis())));
    try {
      return await Promise.race([invoke().then((answer) => ({ answer, remainingMs: context.getRemainingTimeInMillis() })), ended]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Nothing checked out, the silent connection not kept in the pool, and its socket closed. */
  async function assertLetGo(driver: PostgresDriver): Promise<void> {
    assert.equal(driver.pool.totalCount - driver.pool.idleCount, 0, 'no connection stays checked out');
    assert.equal(driver.pool.totalCount, 0, 'the connection that got no answer is not kept for reuse');
    assert.equal(driver.pool.waitingCount, 0, 'nothing waits for a connection');
    await waitUntil('the client has closed the silent connection', () => proxy.openConnections() === 0);
  }

  for (const warm of [true, false]) {
    const which = warm ? 'a warm pooled connection stalls' : 'a new connection stalls in its start-up';

    it(`HTTP: ${which}: 503 with Retry-After before the invocation ends; a later request is stored`, async () => {
      await withStalledDatabase(warm, async (driver) => {
        const context = fakeLambdaContext({ timeoutMs: TIMEOUT_MS });
        const answered = await answerBeforeEnd(context, () => httpHandler(apiGatewayV2Event('/inbox/shop', '{"n":1}'), context));
        assert.ok(answered !== undefined, 'answered before the invocation ended');
        assert.ok(answered.remainingMs > 0, `answered with ${answered.remainingMs} ms of the invocation left`);
        assert.equal(answered.answer.statusCode, 503);
        assert.ok(answered.answer.headers?.['retry-after'], 'a 503 tells the sender when to retry');
        await assertLetGo(driver);
        proxy.set('pass');
        const next = await httpHandler(apiGatewayV2Event('/inbox/shop', '{"n":2}'), fakeLambdaContext({ timeoutMs: 30_000 }));
        assert.equal(next.statusCode, 202, 'the database answers again: the next request is stored');
      });
    });

    it(`SQS: ${which}: every record is a batch item failure before the invocation ends; a redelivery is stored`, async () => {
      await withStalledDatabase(warm, async (driver) => {
        const context = fakeLambdaContext({ timeoutMs: TIMEOUT_MS });
        const records = [sqsRecord(`${warm}-m-1`, '{"n":1}', 'feed'), sqsRecord(`${warm}-m-2`, '{"n":2}', 'feed')];
        const answered = await answerBeforeEnd(context, () => sqsHandler({ Records: records }, context));
        assert.ok(answered !== undefined, 'returned before the invocation ended');
        assert.ok(answered.remainingMs > 0, `returned with ${answered.remainingMs} ms of the invocation left`);
        assert.deepEqual(
          answered.answer.batchItemFailures.map((f) => f.itemIdentifier),
          records.map((r) => r.messageId),
        );
        await assertLetGo(driver);
        proxy.set('pass');
        const redelivered = await sqsHandler({ Records: records }, fakeLambdaContext({ timeoutMs: 30_000 }));
        assert.deepEqual(redelivered.batchItemFailures, [], 'the database answers again: the redelivered records are stored');
      });
    });
  }
});
