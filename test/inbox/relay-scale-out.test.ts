/**
 * Scale-out by backlog of the inbox relay, through the deployed handler: a real PostgreSQL
 * schema, a context whose time runs down, and the real `@aws-sdk/client-lambda` client sending
 * its asynchronous invokes to a local endpoint of the Lambda Invoke API; the started passes are
 * run as Lambda would, with the event the endpoint received.
 *
 * Each batched forward takes 100 ms more than the database needs (10 rows a batch), so one pass
 * forwards at most 100 rows a second whatever the machine: 3,000 due rows are always more than
 * a 3 s pass can forward, and 10 rows never are.
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import { createInboxRelay } from '../../functions/inbox-relay.ts';
import type { Driver } from '../../lib/db/driver.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { setContainer } from '../../lib/runtime/container.ts';
import { createInvocationContext } from '../../lib/runtime/invocation-context.ts';
import { SCALE_OUT_EVENT_KEY } from '../../lib/runtime/scale-out.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { emfValue } from '../helpers/emf.ts';
import { startLocalLambda, type LocalLambda } from '../helpers/local-lambda.ts';

const FUNCTION = 'shop-test-queueboxInboxRelay';
const METRIC = 'queuebox_scale_out_passes_total';

describe('inbox relay scale-out by backlog', { timeout: 120_000 }, () => {
  let db: TestDatabase;
  let lambda: LocalLambda;
  const lines: string[] = [];
  let handler: ReturnType<typeof createInboxRelay>;
  const invoke = (event: unknown = { source: 'aws.events' }) => handler(event, createInvocationContext({ functionName: FUNCTION, timeoutMs: 4000 }));
  const slotRows = () => db.query<{ name: string }>(`SELECT name FROM "${db.schema}".queuebox_maintenance WHERE name LIKE 'scale-out:%' AND last_run_at > clock_timestamp()`);
  const storeDue = (rows: number) =>
    db.query(`INSERT INTO "${db.schema}".inbox (source, idempotency_key, event_type, payload) SELECT 'shop', 'k' || g, 'created', jsonb_build_object('n', g) FROM generate_series(1, $1::int) g`, [rows]);

  before(async () => {
    db = await createTestDatabase({
      inbox: {
        relay: { batchSize: 10, pollIntervalMs: 20, scaleOut: { maxConcurrentPasses: 4 } },
        sources: { shop: { type: 'http', path: '/shop', auth: { type: 'none' } } },
      },
      lambda: { deadlineMarginMs: 1000 },
      observability: { namespace: 'QueueBoxRelayScaleOutTest' },
    });
    lambda = await startLocalLambda([FUNCTION]);
    const slow: Driver = Object.create(db.driver, {
      inboxForwardMany: {
        value: async (...args: Parameters<NonNullable<Driver['inboxForwardMany']>>) => {
          await new Promise((resolve) => setTimeout(resolve, 100));
          return db.driver.inboxForwardMany!(...args);
        },
      },
    }) as Driver;
    setContainer({ config: db.config, driver: slow, logger: createLogger({ serviceName: 'queuebox', logLevel: 'SILENT' }), env: {}, writeMetrics: (line) => lines.push(line) });
    handler = createInboxRelay({ invoke: lambda.invoker() });
  });
  beforeEach(async () => {
    lines.length = 0;
    lambda.invocations.length = 0;
    lambda.fail(undefined);
    await db.query(`TRUNCATE "${db.schema}".inbox, "${db.schema}".outbox, "${db.schema}".queuebox_maintenance`);
  });
  after(async () => {
    setContainer(undefined);
    await lambda.close();
    await db.drop();
  });

  it('a relay pass with more due rows than it can forward starts passes up to the cap; the started passes forward, start none, and free their slots', async () => {
    await storeDue(3000);
    const result = await invoke();
    assert.equal(result.scaleOut.role, 'scheduled');
    assert.equal(result.scaleOut.wanted, 4, JSON.stringify(result.scaleOut));
    assert.deepEqual([result.scaleOut.started, result.scaleOut.failed], [3, 0]);
    assert.deepEqual(lambda.invocations.map((i) => (i.payload[SCALE_OUT_EVENT_KEY] as { slot: number }).slot).sort(), [1, 2, 3]);
    assert.ok(lambda.invocations.every((i) => i.functionName === FUNCTION && (i.payload[SCALE_OUT_EVENT_KEY] as { worker: string }).worker === 'inboxRelay'));
    assert.equal(emfValue(lines, METRIC, { function: 'inboxRelay', outcome: 'started' }), 3);

    const started = await Promise.all(lambda.invocations.slice().map((i) => invoke(i.payload)));
    assert.ok(started.every((s) => s.scaleOut.role === 'started' && s.forwarded > 0 && s.scaleOut.started === 0), JSON.stringify(started.map((s) => s.scaleOut)));
    assert.equal(lambda.invocations.length, 3, 'a started pass never starts others');
    assert.deepEqual(await slotRows(), []);
    const [counts] = await db.query<{ forwarded: number; outboxRows: number }>(
      `SELECT (SELECT count(*)::int FROM "${db.schema}".inbox WHERE state = 'processed') AS forwarded, (SELECT count(*)::int FROM "${db.schema}".outbox) AS "outboxRows"`,
    );
    assert.equal(counts!.outboxRows, counts!.forwarded, 'each forwarded row reached the outbox once across the four passes');
    assert.equal(counts!.forwarded, result.forwarded + started.reduce((sum, s) => sum + s.forwarded, 0));
  });

  it('a relay pass that can forward its whole backlog starts none', async () => {
    await storeDue(10);
    const result = await invoke();
    assert.equal(result.forwarded, 10);
    assert.equal(result.scaleOut.started, 0);
    assert.equal(lambda.invocations.length, 0);
  });

  it('due rows that wait behind their aggregate\'s row in retry start no pass: the last claim took every row that could move', async () => {
    // The aggregate's first row waits an hour for its retry; its 3,000 later rows are due but no
    // claim may take them. 5 rows without aggregate are what any pass can move: less than a claim.
    await db.query(`INSERT INTO "${db.schema}".inbox (source, idempotency_key, event_type, aggregate_id, payload, attempt, scheduled_at) VALUES ('shop', 'head', 'created', 'stuck', '{}', 1, now() + interval '1 hour')`);
    await db.query(`INSERT INTO "${db.schema}".inbox (source, idempotency_key, event_type, aggregate_id, payload) SELECT 'shop', 'stuck-' || g, 'created', 'stuck', jsonb_build_object('n', g) FROM generate_series(1, 3000) g`);
    await storeDue(5);
    const result = await invoke();
    assert.equal(result.forwarded, 5);
    assert.equal(result.scaleOut.wanted, 1, JSON.stringify(result.scaleOut));
    assert.equal(result.scaleOut.due, undefined, 'the due rows are not counted');
    assert.equal(result.scaleOut.started, 0);
    assert.equal(lambda.invocations.length, 0);
    assert.deepEqual(await slotRows(), []);
  });

  it('a relay start event delivered twice runs one pass', async () => {
    await storeDue(3000);
    await invoke();
    const event = lambda.invocations[0]!.payload;
    const roles = (await Promise.all([invoke(event), invoke(event)])).map((r) => r.scaleOut.role).sort();
    assert.deepEqual(roles, ['duplicate', 'started']);
    assert.equal(emfValue(lines, METRIC, { function: 'inboxRelay', outcome: 'duplicate' }), 1);
  });

  it('a failed invoke leaves the relay pass successful, counted as failed, its slot free', async () => {
    await storeDue(3000);
    lambda.fail('ServiceException');
    const result = await invoke();
    assert.ok(result.forwarded > 0);
    assert.deepEqual([result.scaleOut.started, result.scaleOut.failed], [0, 3]);
    assert.equal(emfValue(lines, METRIC, { function: 'inboxRelay', outcome: 'failed' }), 3);
    assert.ok(lambda.requests >= 3);
    assert.deepEqual(await slotRows(), []);
  });

  it('an invoke endpoint that never answers: the relay pass returns before the invocation ends, the invokes counted failed, their slots freed, no row left processing', async () => {
    await storeDue(3000);
    lambda.fail('hang');
    const context = createInvocationContext({ functionName: FUNCTION, timeoutMs: 4000 });
    const result = await handler({ source: 'aws.events' }, context);
    const remainingMs = context.getRemainingTimeInMillis();
    assert.ok(remainingMs > 0, `returned before the invocation's end (${remainingMs} ms left)`);
    assert.ok(result.forwarded > 0);
    assert.deepEqual([result.scaleOut.started, result.scaleOut.failed], [0, 3]);
    assert.equal(result.abandoned, 0);
    assert.deepEqual(await db.query(`SELECT id FROM "${db.schema}".inbox WHERE state = 'processing'`), []);
    assert.deepEqual(await slotRows(), []);
  });
});
