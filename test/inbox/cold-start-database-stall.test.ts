/**
 * A cold container (or one rebuilt) whose database does not answer: the start-up — the first
 * connection and the schema check — ends by the invocation's deadline, as the invocation's own
 * statements do (`receiver-database-stall.test.ts`). Before, it ran outside any budget: a new
 * connection waited `database.connectTimeoutMs` (10 s here, whatever the time left), so the HTTP
 * receiver's 503 came after the invocation had timed out, and a pass held its invocation to the end.
 * Real handlers, built from the environment as on Lambda, through a proxy that keeps connections
 * open and passes no bytes.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Context } from 'aws-lambda';
import { handler as httpHandler } from '../../functions/inbox-http.ts';
import { handler as sqsHandler } from '../../functions/inbox-sqs.ts';
import { handler as pollerHandler } from '../../functions/outbox-poller.ts';
import { TransientDatabaseError } from '../../lib/errors.ts';
import { InvocationEndedError } from '../../lib/db/statement-budget.ts';
import { getContainer, setContainer, type Container } from '../../lib/runtime/container.ts';
import { apiGatewayV2Event } from '../helpers/api-gateway-event.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { fakeLambdaContext } from '../helpers/lambda-context.ts';
import { sqsRecord } from '../helpers/sqs-record.ts';
import { startStallProxy, type StallProxy } from '../helpers/stall-proxy.ts';
import { waitUntil } from '../helpers/wait.ts';

/** The invocation: 3 s, of which `lambda.deadlineMarginMs` (1 s) is kept back to answer. */
const TIMEOUT_MS = 3000;

describe('a cold start facing a database that does not answer ends by the deadline', () => {
  let db: TestDatabase;
  let proxy: StallProxy;
  let dir: string;
  const saved = { ...process.env };
  before(async () => {
    const sources = {
      shop: { type: 'http' as const, path: '/shop', auth: { type: 'none' as const }, idempotency: 'none' as const },
      feed: { type: 'sqs' as const },
    };
    db = await createTestDatabase({ lambda: { deadlineMarginMs: 1000 }, inbox: { sources } });
    proxy = await startStallProxy(db.url);
    dir = mkdtempSync(join(tmpdir(), 'queuebox-cold-start-'));
    const file = join(dir, 'queuebox.yml');
    writeFileSync(file, JSON.stringify({ database: { schema: db.schema, connectTimeoutMs: 10_000 }, lambda: { deadlineMarginMs: 1000 }, inbox: { sources } }));
    Object.assign(process.env, { QUEUEBOX_CONFIG: file, QUEUEBOX_DATABASE_URL: proxy.through(db.url), QUEUEBOX_OBSERVABILITY__LOG_LEVEL: 'SILENT' });
  });
  /** Closes the container an earlier invocation built (its pooled connection) and forgets it: the next invocation is a cold start. */
  async function closeContainer(): Promise<void> {
    if (built !== undefined) await built.driver.close();
    built = undefined;
    setContainer(undefined);
  }
  let built: Container | undefined;

  after(async () => {
    await closeContainer();
    for (const name of Object.keys(process.env)) if (!(name in saved)) delete process.env[name];
    Object.assign(process.env, saved);
    await proxy.close();
    rmSync(dir, { recursive: true, force: true });
    await db.drop();
  });

  /** Invokes on a cold container while the database is silent; what it settled with, and the time left then. */
  async function coldInvocation<T>(invoke: (context: Context) => Promise<T>): Promise<{ settled: { answer: T } | { error: unknown }; remainingMs: number } | undefined> {
    await closeContainer();
    proxy.set('stall');
    const context = fakeLambdaContext({ timeoutMs: TIMEOUT_MS });
    let timer: NodeJS.Timeout | undefined;
    const ended = new Promise<undefined>((resolve) => (timer = setTimeout(() => resolve(undefined), context.getRemainingTimeInMillis())));
    try {
      const settled = invoke(context).then(
        (answer) => ({ answer }),
        (error: unknown) => ({ error }),
      );
      const result = await Promise.race([settled.then((s) => ({ settled: s, remainingMs: context.getRemainingTimeInMillis() })), ended]);
      if (result === undefined) await settled; // before the fix: let the start-up finish before the next case
      return result;
    } finally {
      clearTimeout(timer);
      await waitUntil('the start-up let its connection go', () => proxy.openConnections() === 0);
      proxy.set('pass');
    }
  }

  it('HTTP: 503 with Retry-After before the invocation ends; the next invocation starts up and stores', async () => {
    const result = await coldInvocation((context) => httpHandler(apiGatewayV2Event('/inbox/shop', '{"n":1}'), context));
    assert.ok(result !== undefined, 'answered before the invocation ended');
    assert.ok(result.remainingMs > 0, `answered with ${result.remainingMs} ms of the invocation left`);
    assert.ok('answer' in result.settled, 'answered, not thrown');
    assert.equal(result.settled.answer.statusCode, 503);
    assert.ok(result.settled.answer.headers?.['retry-after'], 'a 503 tells the sender when to retry');
    const next = await httpHandler(apiGatewayV2Event('/inbox/shop', '{"n":2}'), fakeLambdaContext({ timeoutMs: 30_000 }));
    assert.equal(next.statusCode, 202, 'the database answers again: the container is built and the request stored');
    built = await getContainer();
    const { rows } = await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${db.schema}.inbox`);
    assert.equal(rows[0]!.n, 1, 'only the request answered 202 was stored');
  });

  it('SQS: the invocation fails before it ends (SQS delivers the batch again); the redelivery is stored', async () => {
    const records = [sqsRecord('cold-m-1', '{"n":1}', 'feed')];
    const result = await coldInvocation((context) => sqsHandler({ Records: records }, context));
    assert.ok(result !== undefined, 'settled before the invocation ended');
    assert.ok(result.remainingMs > 0, `settled with ${result.remainingMs} ms of the invocation left`);
    assert.ok('error' in result.settled, 'the invocation failed');
    assert.ok(result.settled.error instanceof InvocationEndedError || result.settled.error instanceof TransientDatabaseError, String(result.settled.error));
    const redelivered = await sqsHandler({ Records: records }, fakeLambdaContext({ timeoutMs: 30_000 }));
    assert.deepEqual(redelivered.batchItemFailures, []);
    built = await getContainer();
    const { rows } = await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${db.schema}.inbox`);
    assert.equal(rows[0]!.n, 2, 'the redelivered record is stored');
  });

  it('invocations sharing one start-up are each held to their own deadline: a longer one that joined starts up again when the first one runs out', async () => {
    await closeContainer();
    proxy.set('stall');
    setTimeout(() => proxy.set('pass'), 1600);
    const short = fakeLambdaContext({ timeoutMs: 2200 });
    const long = fakeLambdaContext({ timeoutMs: 30_000 });
    const [a, b] = await Promise.all([httpHandler(apiGatewayV2Event('/inbox/shop', '{"n":"a"}'), short), httpHandler(apiGatewayV2Event('/inbox/shop', '{"n":"b"}'), long)]);
    assert.equal(a.statusCode, 503, 'the invocation that began the start-up ran out of time');
    assert.equal(b.statusCode, 202, 'the one that joined had the time to wait for the database');
    built = await getContainer();
    await closeContainer();
    proxy.set('stall');
    const t0 = Date.now();
    const starter = httpHandler(apiGatewayV2Event('/inbox/shop', '{"n":"c"}'), fakeLambdaContext({ timeoutMs: 20_000 }));
    await new Promise((resolve) => setTimeout(resolve, 200));
    const joiner = fakeLambdaContext({ timeoutMs: TIMEOUT_MS });
    const answer = await httpHandler(apiGatewayV2Event('/inbox/shop', '{"n":"d"}'), joiner);
    assert.equal(answer.statusCode, 503);
    assert.ok(joiner.getRemainingTimeInMillis() > 0, `the invocation that joined answered within its own ${TIMEOUT_MS} ms (${Date.now() - t0} ms after the first began)`);
    proxy.set('pass');
    assert.equal((await starter).statusCode, 202, 'the start-up went on for the invocation that began it');
    built = await getContainer();
  });

  it('outbox poller: the invocation fails before it ends instead of holding it to its timeout', async () => {
    const result = await coldInvocation((context) => pollerHandler({}, context));
    assert.ok(result !== undefined, 'settled before the invocation ended');
    assert.ok(result.remainingMs > 0, `settled with ${result.remainingMs} ms of the invocation left`);
    assert.ok('error' in result.settled, 'the invocation failed');
    assert.ok(result.settled.error instanceof InvocationEndedError || result.settled.error instanceof TransientDatabaseError, String(result.settled.error));
  });

  it('a warm container is handed to each invocation as it is: no timer, no race against its deadline', async () => {
    built ??= await getContainer(fakeLambdaContext({ timeoutMs: 30_000 }));
    const warm = await getContainer(fakeLambdaContext({ timeoutMs: 30_000 }));
    assert.equal(warm, built);
    const realSetTimeout = globalThis.setTimeout;
    let timers = 0;
    globalThis.setTimeout = ((...args: Parameters<typeof setTimeout>) => {
      timers += 1;
      return realSetTimeout(...args);
    }) as typeof setTimeout;
    try {
      for (let i = 0; i < 50; i += 1) assert.equal(await getContainer(fakeLambdaContext({ timeoutMs: 30_000 })), built);
    } finally {
      globalThis.setTimeout = realSetTimeout;
    }
    assert.equal(timers, 0, 'timers started by 50 warm invocations');
  });
});
