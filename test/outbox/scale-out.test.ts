/**
 * Scale-out by backlog of the outbox poller, end to end through the deployed handler: a real
 * PostgreSQL schema, a context whose time runs down, and the real `@aws-sdk/client-lambda`
 * client sending its asynchronous invokes to a local endpoint of the Lambda Invoke API. The
 * started passes are run the way Lambda would: the handler, with the event the endpoint received.
 *
 * The destination takes 100 ms per call (8 calls of 10 entries at once), so one pass sends at
 * most 800 rows a second, whatever the machine: 20,000 due rows are always more than a 3 s pass
 * can send, and 50 rows never are.
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import { createOutboxPoller, type OutboxPollerResult } from '../../functions/outbox-poller.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { setContainer } from '../../lib/runtime/container.ts';
import { createInvocationContext } from '../../lib/runtime/invocation-context.ts';
import { SCALE_OUT_EVENT_KEY } from '../../lib/runtime/scale-out.ts';
import { selfInvokeTarget } from '../../lib/runtime/self-invoke.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { emfValue } from '../helpers/emf.ts';
import { startLocalLambda, type LocalLambda } from '../helpers/local-lambda.ts';
import { RecordingDestination } from '../helpers/recording-destination.ts';
import { captureStdout } from '../helpers/stdout-capture.ts';

const FUNCTION = 'shop-test-queueboxOutboxPoller';
const METRIC = 'queuebox_scale_out_passes_total';

describe('outbox poller scale-out by backlog', { timeout: 180_000 }, () => {
  let db: TestDatabase;
  let lambda: LocalLambda;
  const lines: string[] = [];
  let destination: RecordingDestination;
  let handler: ReturnType<typeof createOutboxPoller>;
  const invoke = (event: unknown = { source: 'aws.events' }) => handler(event, createInvocationContext({ functionName: FUNCTION, timeoutMs: 4000 }));
  const slotRows = () => db.query<{ name: string }>(`SELECT name FROM "${db.schema}".queuebox_maintenance WHERE name LIKE 'scale-out:%' AND last_run_at > clock_timestamp() ORDER BY name`);
  const insertDue = (rows: number) =>
    db.query(`INSERT INTO "${db.schema}".outbox (topic, payload) SELECT 'orders.created', jsonb_build_object('n', g) FROM generate_series(1, $1::int) g`, [rows]);

  before(async () => {
    db = await createTestDatabase({
      destinations: { main: { type: 'sqs', queueUrl: 'http://localhost:1/000000000000/main' } },
      // claims of a fixed 100 rows: the backlog estimate this test's row counts and delays were chosen for
      outbox: { routes: [{ topicPattern: '**', destination: 'main' }], pollIntervalMs: 20, maxBatchSize: 100, scaleOut: { maxConcurrentPasses: 3 } },
      lambda: { deadlineMarginMs: 1000 },
      observability: { namespace: 'QueueBoxScaleOutTest' },
    });
    lambda = await startLocalLambda([FUNCTION]);
    setContainer({ config: db.config, driver: db.driver, logger: createLogger({ serviceName: 'queuebox', logLevel: 'ERROR' }), env: {}, writeMetrics: (line) => lines.push(line) });
    handler = createOutboxPoller({ buildDestinations: () => new Map([['main', destination]]), invoke: lambda.invoker() });
  });
  beforeEach(async () => {
    destination = new RecordingDestination({ delayMs: 100 });
    lines.length = 0;
    lambda.invocations.length = 0;
    lambda.fail(undefined);
    await db.query(`DELETE FROM "${db.schema}".outbox`);
    await db.query(`DELETE FROM "${db.schema}".queuebox_maintenance`);
  });
  after(async () => {
    setContainer(undefined);
    await lambda.close();
    await db.drop();
  });

  it('a pass with more due rows than it can send starts passes of its own function up to the cap, each an asynchronous invoke holding a slot', async () => {
    await insertDue(20_000);
    const result = await invoke();
    assert.equal(result.stoppedBecause, 'deadline');
    assert.equal(result.scaleOut.role, 'scheduled');
    assert.equal(result.scaleOut.wanted, 3, `wanted ${JSON.stringify(result.scaleOut)}`);
    assert.deepEqual([result.scaleOut.started, result.scaleOut.failed], [2, 0]);
    assert.equal(lambda.invocations.length, 2, 'maxConcurrentPasses 3: the pass itself and two more');
    for (const invocation of lambda.invocations) {
      assert.equal(invocation.functionName, FUNCTION, 'the function invokes itself');
      const ticket = invocation.payload[SCALE_OUT_EVENT_KEY] as Record<string, unknown>;
      assert.deepEqual(Object.keys(ticket).sort(), ['generation', 'slot', 'token', 'worker']);
      assert.equal(ticket.worker, 'outboxPoller');
      assert.equal(ticket.generation, 1);
      assert.match(String(ticket.token), /^\d+$/);
    }
    assert.deepEqual(lambda.invocations.map((i) => (i.payload[SCALE_OUT_EVENT_KEY] as { slot: number }).slot).sort(), [1, 2]);
    assert.equal((await slotRows()).length, 2, 'two slots held until the started passes take them over');
    assert.equal(emfValue(lines, METRIC, { function: 'outboxPoller', outcome: 'started' }), 2);

    // The started passes run as Lambda would run them: drain passes of generation 1 that start none.
    const started = await Promise.all(lambda.invocations.slice().map((i) => invoke(i.payload)));
    for (const s of started) {
      assert.equal(s.scaleOut.role, 'started');
      assert.equal(s.scaleOut.generation, 1);
      assert.ok(s.sent > 0, 'the started pass sent rows');
      assert.equal(s.scaleOut.started, 0);
    }
    assert.equal(lambda.invocations.length, 2, 'a started pass never starts others');
    assert.deepEqual(await slotRows(), [], 'each started pass freed its slot when it returned');
    const [sent] = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".outbox WHERE state = 'sent'`);
    assert.equal(sent!.n, destination.deliveries.length, 'every row sent once by the three passes together');
  });

  it('a pass invoked through an alias starts its passes through the same alias, not $LATEST', async () => {
    await insertDue(20_000);
    // osls points the schedule at the alias `provisioned` when the function has provisioned concurrency
    const result = await handler({ source: 'aws.events' }, createInvocationContext({ functionName: FUNCTION, timeoutMs: 4000, invokedQualifier: 'provisioned', functionVersion: '7' }));
    assert.equal(result.scaleOut.started, 2, JSON.stringify(result.scaleOut));
    assert.deepEqual(lambda.invocations.map((i) => i.functionName), [`${FUNCTION}:provisioned`, `${FUNCTION}:provisioned`]);
    // a started pass, itself invoked through the alias, runs and starts none
    const started = await handler(lambda.invocations[0]!.payload, createInvocationContext({ functionName: FUNCTION, timeoutMs: 4000, invokedQualifier: 'provisioned', functionVersion: '7' }));
    assert.equal(started.scaleOut.role, 'started');
    assert.ok(started.sent > 0);
  });

  it('the invoke target: the name with the qualifier that invoked the function, the name alone for none or $LATEST', () => {
    const target = (qualifier?: string) => selfInvokeTarget(createInvocationContext({ functionName: FUNCTION, timeoutMs: 1000, invokedQualifier: qualifier }));
    assert.equal(target(), FUNCTION);
    assert.equal(target('$LATEST'), FUNCTION);
    assert.equal(target('12'), `${FUNCTION}:12`);
    assert.equal(target('live'), `${FUNCTION}:live`);
  });

  it('a pass that can send its whole backlog starts none', async () => {
    await insertDue(50);
    const result = await invoke();
    assert.equal(result.sent, 50);
    assert.equal(lambda.invocations.length, 0);
    assert.deepEqual([result.scaleOut.started, result.scaleOut.failed], [0, 0]);
    assert.ok((result.scaleOut.wanted ?? 1) <= 1, JSON.stringify(result.scaleOut));
    assert.deepEqual(await slotRows(), []);
  });

  it('due rows that wait behind their key\'s row in retry start no pass: the last claim took every row that could move', async () => {
    // The key's first row waits an hour for its retry; its 5,000 later rows are due but no claim
    // may take them. 30 keyless rows are what any pass can move: less than one claim of 100.
    await db.query(`INSERT INTO "${db.schema}".outbox (topic, key, payload, attempt, scheduled_at) VALUES ('orders.created', 'stuck', '{}', 1, now() + interval '1 hour')`);
    await db.query(`INSERT INTO "${db.schema}".outbox (topic, key, payload) SELECT 'orders.created', 'stuck', jsonb_build_object('n', g) FROM generate_series(1, 5000) g`);
    await insertDue(30);
    const result = await invoke();
    assert.equal(result.sent, 30);
    assert.equal(result.scaleOut.role, 'scheduled');
    assert.equal(result.scaleOut.wanted, 1, JSON.stringify(result.scaleOut));
    assert.equal(result.scaleOut.due, undefined, 'the due rows are not counted');
    assert.deepEqual([result.scaleOut.started, result.scaleOut.failed], [0, 0]);
    assert.equal(lambda.invocations.length, 0);
    assert.deepEqual(await slotRows(), []);
  });

  it('a started pass that finds the backlog drained returns at once, starts none and frees its slot', async () => {
    const [slot] = await db.driver.scaleOutAcquire({ worker: 'outboxPoller', slots: 2, want: 1, leaseMs: 60_000 });
    const result = await invoke({ [SCALE_OUT_EVENT_KEY]: { worker: 'outboxPoller', generation: 1, slot: slot!.slot, token: slot!.token } });
    assert.equal(result.stoppedBecause, 'drained');
    assert.equal(result.claimed, 0);
    assert.equal(result.scaleOut.role, 'started');
    assert.equal(lambda.invocations.length, 0);
    assert.deepEqual(await slotRows(), []);
  });

  it('overlapping scheduled passes together start at most maxConcurrentPasses − 1, on distinct slots; a later one starts none while they are held', async () => {
    await insertDue(20_000);
    const results = await Promise.all([invoke(), invoke(), invoke()]);
    const slots = lambda.invocations.map((i) => (i.payload[SCALE_OUT_EVENT_KEY] as { slot: number }).slot);
    assert.ok(slots.length >= 1 && slots.length <= 2, `started ${slots.length}`);
    assert.equal(new Set(slots).size, slots.length, 'no slot given twice');
    assert.equal(results.reduce((sum, r) => sum + r.scaleOut.started, 0), slots.length);
    const later = await invoke();
    assert.equal(later.scaleOut.started, 0, 'the slots are held: the cap counts passes started by any pass');
    assert.equal(lambda.invocations.length, slots.length);
  });

  it('a start event delivered twice runs one pass: the second finds its slot taken over and runs none', async () => {
    await insertDue(20_000);
    await invoke();
    const event = lambda.invocations[0]!.payload;
    const [a, b] = await Promise.all([invoke(event), invoke(event)]);
    const roles = [a.scaleOut.role, b.scaleOut.role].sort();
    assert.deepEqual(roles, ['duplicate', 'started']);
    const duplicate = [a, b].find((r) => r.scaleOut.role === 'duplicate') as OutboxPollerResult;
    assert.equal(duplicate.claimed, 0, 'the duplicate claimed nothing');
    assert.equal(emfValue(lines, METRIC, { function: 'outboxPoller', outcome: 'duplicate' }), 1);
    const again = await invoke(event);
    assert.equal(again.scaleOut.role, 'duplicate', 'delivered again after the pass ended: its slot is gone');
  });

  it('an invoke that fails is logged and counted, frees its slot, and the pass still succeeds', async () => {
    await insertDue(20_000);
    lambda.fail('ResourceNotFoundException');
    const { result, lines: logged } = await captureStdout(() => invoke(), { stderr: true });
    assert.equal(result.stoppedBecause, 'deadline');
    assert.ok(result.sent > 0);
    assert.deepEqual([result.scaleOut.started, result.scaleOut.failed], [0, 2]);
    assert.equal(lambda.invocations.length, 0);
    assert.ok(lambda.requests >= 2, 'the SDK reached the endpoint');
    assert.equal(emfValue(lines, METRIC, { function: 'outboxPoller', outcome: 'failed' }), 2);
    const errors = logged.filter((l) => l.includes('scale-out invoke failed'));
    assert.equal(errors.length, 2, logged.join('\n'));
    assert.match(errors[0]!, /ResourceNotFoundException|Function not found/);
    assert.deepEqual(await slotRows(), [], 'a failed invoke frees its slot');
  });

  it('an invoke endpoint that never answers: the invoke gives up at the pass\'s deadline, its slot is freed, the rows in flight are settled and the handler returns before the invocation ends', async () => {
    await insertDue(20_000);
    lambda.fail('hang');
    const context = createInvocationContext({ functionName: FUNCTION, timeoutMs: 4000 });
    const { result } = await captureStdout(() => handler({ source: 'aws.events' }, context), { stderr: true });
    const remainingMs = context.getRemainingTimeInMillis();
    assert.ok(remainingMs > 0, `the handler returned before the invocation's end (${remainingMs} ms left)`);
    assert.equal(result.stoppedBecause, 'deadline');
    assert.ok(result.sent > 0);
    assert.deepEqual([result.scaleOut.started, result.scaleOut.failed], [0, 2]);
    assert.equal(result.abandoned, 0, 'every claimed row settled');
    assert.deepEqual(await db.query(`SELECT id FROM "${db.schema}".outbox WHERE state = 'processing'`), []);
    assert.deepEqual(await slotRows(), [], 'the slots of the invokes that never answered are freed');
    assert.equal(emfValue(lines, METRIC, { function: 'outboxPoller', outcome: 'failed' }), 2);
  });

  it('refuses a start event of the wrong shape, naming the key', async () => {
    await assert.rejects(invoke({ [SCALE_OUT_EVENT_KEY]: { worker: 'outboxPoller', generation: 1, slot: 0, token: '1' } }), /event\.queueboxScaleOut\.slot must be an integer from 1 to 63/);
    await assert.rejects(invoke({ [SCALE_OUT_EVENT_KEY]: { worker: 'outboxPoller', generation: 1, slot: 1e300, token: '1' } }), /event\.queueboxScaleOut\.slot must be an integer from 1 to 63/);
    await assert.rejects(invoke({ [SCALE_OUT_EVENT_KEY]: { worker: 'outboxPoller', generation: 2, slot: 1, token: '1' } }), /event\.queueboxScaleOut\.generation must be an integer from 1 to 1/);
    await assert.rejects(invoke({ [SCALE_OUT_EVENT_KEY]: { worker: 'outboxPoller', generation: 1e300, slot: 1, token: '1' } }), /event\.queueboxScaleOut\.generation must be an integer from 1 to 1/);
    await assert.rejects(invoke({ [SCALE_OUT_EVENT_KEY]: { worker: 'inboxRelay', generation: 1, slot: 1, token: '1' } }), /event\.queueboxScaleOut\.worker must be "outboxPoller"/);
  });

  it('refuses a start event whose token is past the largest 64-bit integer, naming the key, as it refuses other malformed tokens', async () => {
    // 19 digits, as a token may have, but above 9223372036854775807: the database cannot read it.
    for (const token of ['9999999999999999999', '9223372036854775808']) {
      await assert.rejects(invoke({ [SCALE_OUT_EVENT_KEY]: { worker: 'outboxPoller', generation: 1, slot: 1, token } }), (error: Error) => {
        assert.equal(error.name, 'UsageError', error.message);
        assert.match(error.message, /event\.queueboxScaleOut\.token must be the slot's token/);
        return true;
      });
    }
  });
});
