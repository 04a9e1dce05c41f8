import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import { handler } from '../../functions/inbox-relay.ts';
import type { Driver, InboxMessageInput } from '../../lib/db/driver.ts';
import { outboxInsert } from '../../lib/db/postgres/outbox-queries.ts';
import { TransientDatabaseError } from '../../lib/errors.ts';
import { byJsonSize, FORWARD_STATEMENT_BYTES, runRelayPass, type RelaySummary } from '../../lib/inbox/relay-pass.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import { setContainer } from '../../lib/runtime/container.ts';
import { createDeadline, sleep } from '../../lib/runtime/deadline.ts';
import { MIN_LEASE_MS } from '../../lib/claims/lease.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { fakeLambdaContext } from '../helpers/lambda-context.ts';
import { docsQueries, queryFields } from '../helpers/logs-insights.ts';
import { captureStdout } from '../helpers/stdout-capture.ts';

/** The PostgreSQL driver's batched forward (optional in the Driver interface). */
type ForwardMany = NonNullable<Driver['inboxForwardMany']>;

describe('inbox relay pass', () => {
  let db: TestDatabase;
  let inbox: string;
  let outbox: string;
  const logger = createLogger({ serviceName: 'test', logLevel: 'SILENT' });
  before(async () => {
    db = await createTestDatabase({
      inbox: {
        relay: { batchSize: 5, concurrency: 4, claimTimeoutMs: 60_000, maxAttempts: 2, retryBaseDelayMs: 1000 },
        sources: {
          shop: { type: 'http', path: '/shop', auth: { type: 'none' } },
          crm: { type: 'http', path: '/crm', auth: { type: 'none' }, topicTemplate: 'crm.{{ eventType }}.v1' },
          workers: { type: 'http', path: '/workers', consumption: 'pull', auth: { type: 'none' } },
        },
      },
      lambda: { deadlineMarginMs: 1000 },
    });
    inbox = `"${db.schema}".inbox`;
    outbox = `"${db.schema}".outbox`;
  });
  after(async () => db.drop());
  beforeEach(async () => {
    await db.query(`TRUNCATE ${inbox}, ${outbox}, "${db.schema}".queuebox_maintenance`);
  });

  const store = (key: string, extra: Partial<InboxMessageInput> = {}) =>
    db.driver.inboxInsert({ source: 'shop', idempotencyKey: key, eventType: 'created', payload: { key }, consumption: 'push', ...extra });
  const newMetrics = () => new QueueBoxMetrics({ namespace: 'QueueBox', serviceName: 'test', write: () => {} });
  const pass = (driver: Driver, metrics = newMetrics(), timeoutMs = 20_000): Promise<RelaySummary> =>
    runRelayPass({ config: db.config, driver, logger, metrics, deadline: createDeadline(fakeLambdaContext({ timeoutMs }), db.config.lambda.deadlineMarginMs), mode: 'drain' });
  /** A pass through the real Powertools Logger at INFO; its `inbox forward failed` lines. */
  const loggedPass = async (driver: Driver, metrics = newMetrics()) => {
    const loud = createLogger({ serviceName: 'queuebox', logLevel: 'INFO' });
    const { result: summary, lines } = await captureStdout(
      () => runRelayPass({ config: db.config, driver, logger: loud, metrics, deadline: createDeadline(fakeLambdaContext({ timeoutMs: 20_000 }), db.config.lambda.deadlineMarginMs), mode: 'drain' }),
      { stderr: true },
    );
    const failures = lines.filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.message === 'inbox forward failed');
    return { summary, failures };
  };
  /** A driver whose batched forwards take a few milliseconds, recording how many keyless rows are forwarded at once. */
  const slowDriver = (observed: { keylessInFlight: number; maxKeyless: number }): Driver =>
    Object.create(db.newDriver(), {
      inboxForwardMany: {
        value: async function (this: Driver, items: Parameters<ForwardMany>[0], defaults: { maxAttempts: number }) {
          const keyless = items.filter((item) => item.outbox.key === null).length;
          observed.keylessInFlight += keyless;
          observed.maxKeyless = Math.max(observed.maxKeyless, observed.keylessInFlight);
          try {
            await sleep(2 + Math.random() * 8);
            return await Object.getPrototypeOf(this).inboxForwardMany(items, defaults);
          } finally {
            observed.keylessInFlight -= keyless;
          }
        },
      },
    });

  it('forward with four relays at once: never two rows of one aggregate (per source) in flight, each aggregate in receive order, keyless rows in parallel', async () => {
    for (let i = 0; i < 8; i++) {
      for (const aggregate of ['A', 'B', 'C', 'D', 'E']) await store(`${aggregate}-${i}`, { aggregateId: aggregate, source: i % 2 === 0 ? 'shop' : 'crm' });
      await store(`free-${i}-a`);
      await store(`free-${i}-b`);
    }
    const observed = { keylessInFlight: 0, maxKeyless: 0 };
    let violations = 0;
    let running = true;
    const observer = (async () => {
      while (running) {
        const busy = await db.query(`SELECT source, aggregate_id FROM ${inbox} WHERE state = 'processing' AND aggregate_id IS NOT NULL GROUP BY source, aggregate_id HAVING count(*) > 1`);
        violations += busy.length;
        await sleep(1);
      }
    })();
    const drivers = Array.from({ length: 4 }, () => slowDriver(observed));
    const summaries: RelaySummary[] = [];
    for (let round = 0; round < 10; round++) {
      summaries.push(...(await Promise.all(drivers.map((d) => pass(d)))));
      if ((await db.query(`SELECT 1 FROM ${inbox} WHERE state <> 'processed'`)).length === 0) break;
    }
    running = false;
    await observer;
    assert.equal(violations, 0, 'the observer never saw two processing rows of one aggregate');
    assert.equal(summaries.reduce((n, s) => n + s.forwarded, 0), 56);
    assert.equal(summaries.reduce((n, s) => n + s.claimsLost, 0), 0);
    assert.ok(observed.maxKeyless >= 2, `keyless rows were forwarded in parallel (max ${observed.maxKeyless})`);
    // Microseconds, compared as integers: a JavaScript Date keeps milliseconds, and a claim that
    // follows the previous row's commit within the same millisecond would compare equal.
    const pairs = await db.query<{ source: string; aggregate_id: string; inbox_seq: string; claimed_us: string; processed_us: string }>(
      `SELECT i.source, i.aggregate_id, i.sequence AS inbox_seq,
              (EXTRACT(EPOCH FROM i.claimed_at) * 1000000)::bigint::text AS claimed_us,
              (EXTRACT(EPOCH FROM i.processed_at) * 1000000)::bigint::text AS processed_us
         FROM ${outbox} o JOIN ${inbox} i ON i.id = (o.headers->>'x-inbox-id')::uuid
        WHERE i.aggregate_id IS NOT NULL ORDER BY i.source, i.aggregate_id, o.sequence`,
    );
    assert.equal(pairs.length, 40);
    for (let k = 1; k < pairs.length; k++) {
      const [prev, cur] = [pairs[k - 1]!, pairs[k]!];
      if (prev.source !== cur.source || prev.aggregate_id !== cur.aggregate_id) continue;
      assert.ok(BigInt(prev.inbox_seq) < BigInt(cur.inbox_seq), `aggregate ${cur.aggregate_id}: outbox order follows receive order`);
      assert.ok(
        BigInt(cur.claimed_us) > BigInt(prev.processed_us),
        `aggregate ${cur.aggregate_id}: the next row was claimed (${cur.claimed_us} µs) only after the previous was processed (${prev.processed_us} µs)`,
      );
    }
    const perRow = await db.query(`SELECT i.id FROM ${inbox} i LEFT JOIN ${outbox} o ON (o.headers->>'x-inbox-id')::uuid = i.id GROUP BY i.id HAVING count(o.id) <> 1`);
    assert.deepEqual(perRow, [], 'exactly one outbox row per inbox row');
  });

  it('write the outbox row with the rendered topic, source and aggregate as key, the payload and the relay headers', async () => {
    const { id } = await store('h-1', { aggregateId: 'cust-1', correlationId: 'corr-1', headers: { 'x-tenant': 't1', 'X-Source': 'spoofed' } });
    await store('h-2', { source: 'crm', eventType: 'updated' });
    const summary = await pass(db.driver);
    assert.equal(summary.forwarded, 2);
    // Two aggregates (one and none): the relay forwards them concurrently, in no set order.
    const rows = await db.query<{ topic: string; key: string | null }>(`SELECT topic, key, payload, headers, state FROM ${outbox} ORDER BY topic DESC`);
    assert.deepEqual(rows[0], {
      topic: 'shop.created',
      key: 'shop:cust-1',
      payload: { key: 'h-1' },
      headers: { 'x-tenant': 't1', 'x-inbox-id': id, 'x-source': 'shop', 'x-idempotency-key': 'h-1', 'X-Correlation-Id': 'corr-1' },
      state: 'pending',
    });
    assert.equal(rows[1]!.topic, 'crm.updated.v1');
    assert.equal(rows[1]!.key, null);
  });

  it('mark dead, with a clear reason, a row whose topic needs an event type it lacks or whose payload is not an object', async () => {
    await store('d-1', { eventType: null, aggregateId: 'cart-1' });
    await store('d-2', { payload: [1, 2] });
    await store('d-3', { payload: 'text', aggregateId: 'cart-2' });
    const { summary, failures } = await loggedPass(db.driver);
    assert.deepEqual([summary.dead, summary.forwarded], [3, 0]);
    const rows = await db.query<{ id: string; state: string; last_error: string }>(`SELECT id, state, last_error FROM ${inbox} ORDER BY sequence`);
    assert.ok(rows.every((r) => r.state === 'dead'));
    assert.match(rows[0]!.last_error, /needs an event type.*source shop has none/);
    assert.match(rows[1]!.last_error, /message\.payload must be a JSON object/);
    // One dead write, one ERROR line per source and error class (not one per row).
    const byClass = Object.fromEntries(failures.map((l) => [l.errorClass as string, l]));
    assert.deepEqual(Object.keys(byClass).sort(), ['TopicTemplate', 'ValidationError']);
    const { TopicTemplate: template, ValidationError: invalid } = byClass;
    assert.deepEqual(
      [template!.level, template!.source, template!.dead, template!.retried, template!.keys, template!.keyCount, template!.ids, template!.error],
      ['ERROR', 'shop', 1, 0, ['cart-1'], 1, [rows[0]!.id], rows[0]!.last_error],
    );
    assert.deepEqual([invalid!.level, invalid!.dead, invalid!.eventTypes, invalid!.keys, invalid!.keyCount, [...(invalid!.ids as string[])].sort()], ['ERROR', 2, ['created'], ['cart-2'], 1, [rows[1]!.id, rows[2]!.id].sort()]);
    assert.deepEqual(await db.query(`SELECT 1 FROM ${outbox}`), []);
  });

  it('retry a failing forward with backoff, then mark it dead after maxAttempts', async () => {
    await store('r-1');
    const refuse = { value: async () => Promise.reject(new Error('database: password=hunter2 refused')) };
    const failing: Driver = Object.create(db.driver, { inboxForwardMany: refuse, inboxForward: refuse });
    const firstMetrics = newMetrics();
    const { summary: first, failures: retriedLines } = await loggedPass(failing, firstMetrics);
    assert.deepEqual([first.retried, first.dead], [1, 0]);
    assert.deepEqual(
      [firstMetrics.value('inboxFailedMessages', { source: 'shop', status: 'retried' }), firstMetrics.value('inboxFailedMessages', { source: 'shop', status: 'dead' })],
      [1, 0],
      'the failing source counted by its name',
    );
    assert.deepEqual(
      retriedLines.map((l) => [l.level, l.source, l.errorClass, l.retried, l.dead, l.topics, l.eventTypes]),
      [['WARN', 'shop', 'Error', 1, 0, ['shop.created'], ['created']]],
    );
    assert.doesNotMatch(String(retriedLines[0]!.error), /hunter2/, 'the line carries the redacted error');
    const [retried] = await db.query<{ state: string; attempt: number; due_in: number; last_error: string }>(
      `SELECT state, attempt, EXTRACT(EPOCH FROM scheduled_at - clock_timestamp())::float8 AS due_in, last_error FROM ${inbox}`,
    );
    assert.deepEqual([retried!.state, retried!.attempt], ['pending', 1]);
    assert.ok(retried!.due_in > 0.5 && retried!.due_in <= 1.25, `due after ~1 s, got ${retried!.due_in}`);
    assert.doesNotMatch(retried!.last_error, /hunter2/);
    await db.query(`UPDATE ${inbox} SET scheduled_at = clock_timestamp()`);
    // The Logs Insights query of docs/operations.md reads fields this line has.
    const queries = docsQueries('docs/operations.md', 'inbox forward failed');
    assert.ok(queries.length > 0);
    for (const field of queries.flatMap(queryFields)) assert.ok(field in retriedLines[0]!, `the query's field ${field} is a field of the line`);
    const secondMetrics = newMetrics();
    const { summary: second, failures: deadLines } = await loggedPass(failing, secondMetrics);
    assert.deepEqual([second.retried, second.dead], [0, 1]);
    assert.deepEqual(
      [secondMetrics.value('inboxFailedMessages', { source: 'shop', status: 'retried' }), secondMetrics.value('inboxFailedMessages', { source: 'shop', status: 'dead' })],
      [0, 1],
    );
    assert.deepEqual(deadLines.map((l) => [l.level, l.errorClass, l.retried, l.dead]), [['ERROR', 'Error', 0, 1]]);
    const [dead] = await db.query<{ state: string; last_error: string }>(`SELECT state, last_error FROM ${inbox}`);
    assert.equal(dead!.state, 'dead');
    assert.match(dead!.last_error, /^gave up after 2 of 2 attempts: /);
  });

  it('count the rows it retries and dead-letters per source: the failing source by name, a source no longer configured as (unknown source)', async () => {
    await store('ok-1', { aggregateId: 'ok-1' });
    await store('c-1', { source: 'crm', aggregateId: 'c-1' });
    await store('c-2', { source: 'crm', aggregateId: 'c-2' });
    // crm's topic template needs an event type: dead at once, without a forward.
    await store('c-3', { source: 'crm', eventType: null });
    // Rows of a source removed from the configuration: the default template still renders.
    await store('l-1', { source: 'legacy', aggregateId: 'l-1' });
    const base = db.newDriver();
    const refusing: Driver = Object.create(base, {
      inboxForwardMany: { value: async () => Promise.reject(new Error('outbox refused the batch')) },
      inboxForward: {
        value: async (item: Parameters<Driver['inboxForward']>[0], defaults: { maxAttempts: number }) =>
          item.outbox.headers?.['x-source'] === 'shop' ? base.inboxForward(item, defaults) : Promise.reject(new Error(`outbox refused ${item.outbox.headers?.['x-source']}`)),
      },
    });
    const failed = (metrics: QueueBoxMetrics, source: string) => [metrics.value('inboxFailedMessages', { source, status: 'retried' }), metrics.value('inboxFailedMessages', { source, status: 'dead' })];

    const first = newMetrics();
    const one = await pass(refusing, first);
    assert.deepEqual([one.forwarded, one.retried, one.dead], [1, 3, 1]);
    assert.deepEqual(failed(first, 'crm'), [2, 1]);
    assert.deepEqual(failed(first, '(unknown source)'), [1, 0]);
    assert.deepEqual(failed(first, 'legacy'), [0, 0], 'a value read from a row is never a dimension');
    assert.deepEqual(failed(first, 'shop'), [0, 0], 'a forwarded row is not a failure');
    assert.equal(first.value('inboxMessages', { status: 'retried' }), 3, 'the status metric still counts them');

    // maxAttempts is 2: the retried rows fail their last attempt.
    await db.query(`UPDATE ${inbox} SET scheduled_at = clock_timestamp() WHERE state = 'pending'`);
    const second = newMetrics();
    const two = await pass(refusing, second);
    assert.deepEqual([two.retried, two.dead], [0, 3]);
    assert.deepEqual(failed(second, 'crm'), [0, 2]);
    assert.deepEqual(failed(second, '(unknown source)'), [0, 1]);
    assert.equal(second.value('inboxMessages', { status: 'dead' }), 3);
  });

  it('forward a claimed batch in one call; when that call fails, forward its rows one by one, retrying only the row that fails', async () => {
    for (const key of ['b-1', 'b-2', 'b-3', 'b-4']) await store(key, { aggregateId: key });
    const calls = { many: 0, one: 0 };
    const base = db.newDriver();
    const batched: Driver = Object.create(base, {
      inboxForwardMany: { value: async (...args: Parameters<ForwardMany>) => (calls.many++, base.inboxForwardMany!(...args)) },
      inboxForward: { value: async (...args: Parameters<Driver['inboxForward']>) => (calls.one++, base.inboxForward(...args)) },
    });
    const ok = await pass(batched);
    assert.deepEqual([ok.claimed, ok.forwarded, calls.many, calls.one], [4, 4, 1, 0], 'four rows, one batched call');
    assert.equal((await db.query(`SELECT 1 FROM ${outbox}`)).length, 4);

    await db.query(`TRUNCATE ${inbox}, ${outbox}`);
    for (const key of ['f-1', 'f-2', 'f-3']) await store(key, { aggregateId: key });
    const metrics = newMetrics();
    const flaky: Driver = Object.create(base, {
      inboxForwardMany: { value: async () => Promise.reject(new Error('statement timeout')) },
      inboxForward: {
        value: async (item: Parameters<Driver['inboxForward']>[0], defaults: { maxAttempts: number }) =>
          item.outbox.key === 'shop:f-2' ? Promise.reject(new Error('outbox refused f-2')) : base.inboxForward(item, defaults),
      },
    });
    const fallback = await pass(flaky, metrics);
    assert.deepEqual([fallback.forwarded, fallback.retried, fallback.dead, fallback.claimsLost], [2, 1, 0, 0]);
    assert.equal(metrics.value('inboxMessages', { status: 'forwarded' }), 2);
    const states = await db.query<{ idempotency_key: string; state: string; last_error: string | null }>(
      `SELECT idempotency_key, state, last_error FROM ${inbox} ORDER BY idempotency_key`,
    );
    assert.deepEqual(
      states.map((r) => `${r.idempotency_key}:${r.state}`),
      ['f-1:processed', 'f-2:pending', 'f-3:processed'],
    );
    assert.match(states[1]!.last_error ?? '', /outbox refused f-2/);
    assert.deepEqual((await db.query<{ key: string }>(`SELECT key FROM ${outbox} ORDER BY key`)).map((r) => r.key), ['shop:f-1', 'shop:f-3']);
  });

  it('split a batch of large bodies into several forward statements of at most FORWARD_STATEMENT_BYTES, in receive order', async () => {
    const body = 'x'.repeat(Math.ceil(FORWARD_STATEMENT_BYTES * 0.4));
    for (const key of ['big-1', 'big-2', 'big-3', 'big-4', 'big-5']) await store(key, { payload: { key, body } });
    const statements: string[][] = [];
    const base = db.newDriver();
    const counting: Driver = Object.create(base, {
      inboxForwardMany: {
        value: async (...args: Parameters<ForwardMany>) => {
          statements.push(args[0].map((item) => String(item.outbox.payload.key)));
          return base.inboxForwardMany!(...args);
        },
      },
    });
    const summary = await pass(counting);
    assert.equal(summary.forwarded, 5);
    assert.deepEqual(statements, [['big-1', 'big-2'], ['big-3', 'big-4'], ['big-5']], 'two 40 % bodies per statement');
    const keys = await db.query<{ key: string }>(`SELECT payload->>'key' AS key FROM ${outbox} ORDER BY sequence`);
    assert.deepEqual(keys.map((r) => r.key), ['big-1', 'big-2', 'big-3', 'big-4', 'big-5']);
  });

  it('byJsonSize keeps order, never splits below one item, and starts a new chunk only when the budget would be exceeded', () => {
    const item = (n: number) => ({ message: { topic: 't', payload: { s: 'y'.repeat(n) }, headers: {} } });
    const sizes = (chunks: Array<Array<{ message: { payload: Record<string, unknown> } }>>) => chunks.map((c) => c.map((i) => String(i.message.payload.s).length));
    // each item is its JSON length: {"s":"…"} = n + 8 characters, plus {} for the headers = n + 10
    assert.deepEqual(sizes(byJsonSize([item(90), item(90), item(500), item(10)], 200)), [[90, 90], [500], [10]]);
    assert.deepEqual(sizes(byJsonSize([item(90), item(90)], 199)), [[90], [90]]);
    assert.deepEqual(byJsonSize([], 100), []);
  });

  it('run the reclaim again when the database ends it as a deadlock victim, and fail the pass on any other reclaim error', async () => {
    const { id } = await store('expired-1', { aggregateId: 'E' });
    await db.query(
      `UPDATE ${inbox} SET state = 'processing', claim_token = gen_random_uuid(), lease_expires_at = clock_timestamp() - interval '1 second' WHERE id = $1`,
      [id],
    );
    const failing = (error: Error, times: number) => {
      let calls = 0;
      const driver: Driver = Object.create(db.newDriver(), {
        inboxReclaimExpired: {
          value: async function (this: Driver, ...args: Parameters<Driver['inboxReclaimExpired']>) {
            if (calls++ < times) throw error;
            return Object.getPrototypeOf(this).inboxReclaimExpired(...args);
          },
        },
      });
      return { driver, calls: () => calls };
    };
    const victim = failing(new TransientDatabaseError('deadlock detected', '40P01'), 2);
    const summary = await pass(victim.driver);
    assert.equal(victim.calls(), 3, 'two deadlocks, then the reclaim that ran');
    assert.equal(summary.reclaimed, 1);
    assert.equal(summary.forwarded, 1);
    const reset = failing(new TransientDatabaseError('connection reset', '08006'), 1);
    await assert.rejects(pass(reset.driver), /connection reset/);
    assert.equal(reset.calls(), 1, 'another error is not retried');
  });

  it('roll back the outbox insert of a relay whose claim was lost, count it, and leave one outbox row per inbox row', async () => {
    const { id } = await store('lost-1', { aggregateId: 'L' });
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let paused!: () => void;
    const isPaused = new Promise<void>((resolve) => (paused = resolve));
    const slow: Driver = Object.create(db.newDriver(), {
      inboxForwardMany: {
        value: async function (this: Driver, ...args: Parameters<ForwardMany>) {
          paused();
          await gate;
          return Object.getPrototypeOf(this).inboxForwardMany(...args);
        },
      },
    });
    const metrics = newMetrics();
    const stale = pass(slow, metrics);
    await isPaused;
    await db.query(`UPDATE ${inbox} SET lease_expires_at = clock_timestamp() - interval '1 second' WHERE id = $1`, [id]);
    assert.equal((await db.driver.inboxReclaimExpired({ maxAttempts: 5 })).reclaimed, 1);
    const fresh = await pass(db.newDriver());
    assert.equal(fresh.forwarded, 1);
    release();
    const summary = await stale;
    assert.deepEqual([summary.claimed, summary.forwarded, summary.claimsLost], [1, 0, 1]);
    assert.equal(metrics.value('claimsLost', { component: 'inbox' }), 1);
    const rows = await db.query(`SELECT headers->>'x-inbox-id' AS inbox_id FROM ${outbox}`);
    assert.deepEqual(rows, [{ inbox_id: id }]);
  });

  it('leave a row processing with no outbox row when its relay dies mid-transaction, then reclaim and forward it once', async () => {
    const { id } = await store('killed-1', { aggregateId: 'K' });
    const [row] = await db.driver.inboxClaimPushMany({ limit: 1, leaseMs: 1000 });
    assert.equal(row!.id, id);
    const victim = await db.pool.connect();
    victim.on('error', () => {});
    const { rows: pidRows } = await victim.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
    await victim.query('BEGIN');
    await outboxInsert(db.driver.ctx.names, victim, { topic: 'shop.created', key: 'K', payload: {}, headers: { 'x-inbox-id': id } }, { maxAttempts: 5 });
    await db.query('SELECT pg_terminate_backend($1)', [pidRows[0]!.pid]);
    victim.release(true);
    const [mid] = await db.query(`SELECT state FROM ${inbox} WHERE id = $1`, [id]);
    assert.equal(mid!.state, 'processing');
    assert.deepEqual(await db.query(`SELECT 1 FROM ${outbox}`), []);
    const early = await pass(db.driver);
    assert.deepEqual([early.reclaimed, early.forwarded], [0, 0], 'a live lease is not reclaimed');
    await db.query(`DELETE FROM "${db.schema}".queuebox_maintenance`);
    await sleep(1100);
    const later = await pass(db.driver);
    assert.deepEqual([later.reclaimed, later.forwarded], [1, 1]);
    assert.equal((await db.query(`SELECT 1 FROM ${outbox} WHERE headers->>'x-inbox-id' = $1`, [id])).length, 1);
  });

  it('never touch pull rows, pending or expired', async () => {
    await store('p-1', { source: 'workers', consumption: 'pull' });
    await store('p-2', { source: 'workers', consumption: 'pull' });
    await db.query(`UPDATE ${inbox} SET state = 'processing', claim_token = gen_random_uuid(), lease_expires_at = clock_timestamp() - interval '1 minute' WHERE idempotency_key = 'p-2'`);
    const before = await db.query(`SELECT * FROM ${inbox} ORDER BY sequence`);
    const summary = await pass(db.driver);
    assert.deepEqual([summary.claimed, summary.reclaimed], [0, 0]);
    assert.deepEqual(await db.query(`SELECT * FROM ${inbox} ORDER BY sequence`), before);
  });

  it('end the pass with its summary when a claim is cancelled at the deadline that bounds it (57014, ETIMEOUT); fail it when the cancellation comes before the deadline', async () => {
    await store('cancelled-1');
    /** A pass whose claims wait until the deadline and are cancelled there with `error` (the deadline passes with them unless `inTime`). */
    const cancelledClaim = (error: Error, inTime = false) => {
      let passed = false;
      let claims = 0;
      const driver: Driver = Object.create(db.newDriver(), {
        inboxClaimPushMany: {
          value: async () => {
            claims++;
            if (!inTime) passed = true;
            throw error;
          },
        },
      });
      const deadline = {
        remainingMs: () => (passed ? 0 : 10_000),
        invocationRemainingMs: () => (passed ? 1000 : 11_000),
        expired: () => passed,
      };
      const run = runRelayPass({ config: db.config, driver, logger, metrics: newMetrics(), deadline });
      return { run, claims: () => claims };
    };
    for (const error of [new TransientDatabaseError('canceling statement due to statement timeout', '57014'), Object.assign(new Error('Timeout: Request failed to complete in 9000ms'), { code: 'ETIMEOUT' })]) {
      const cancelled = cancelledClaim(error);
      // Before, the cancelled claim failed the pass (the handler threw: a retry and the Errors alarm).
      const summary = await cancelled.run;
      assert.equal(cancelled.claims(), 1, 'no claim after the one cancelled at the deadline');
      assert.deepEqual([summary.claimed, summary.forwarded, summary.abandoned], [0, 0, 0], String(error));
    }
    assert.deepEqual((await db.query<{ state: string; attempt: number }>(`SELECT state, attempt FROM ${inbox}`)).map((r) => ({ ...r })), [{ state: 'pending', attempt: 0 }]);
    // The configured statement timeout (the deadline still ahead) is a failure, as any other claim error.
    await assert.rejects(cancelledClaim(new TransientDatabaseError('canceling statement due to statement timeout', '57014'), true).run, /statement timeout/);
    // The next pass claims and forwards the row.
    const next = await pass(db.driver);
    assert.deepEqual([next.claimed, next.forwarded], [1, 1]);
  });

  it('claim nothing when the invocation has too little time left', async () => {
    await store('late-1');
    const summary = await pass(db.driver, newMetrics(), 1500);
    assert.equal(summary.claimed, 0);
    assert.equal((await db.query(`SELECT 1 FROM ${inbox} WHERE state = 'pending'`)).length, 1);
  });

  it('keep polling until the deadline in a scheduled pass: a row stored mid-invocation is relayed by the same pass', async () => {
    const deadline = createDeadline(fakeLambdaContext({ timeoutMs: 4_000 }), db.config.lambda.deadlineMarginMs);
    let leftAtReturn = Infinity;
    const running = runRelayPass({ config: db.config, driver: db.driver, logger, metrics: newMetrics(), deadline }).then((summary) => {
      leftAtReturn = deadline.remainingMs();
      return summary;
    });
    await sleep(500);
    await store('late-1');
    const summary = await running;
    const relayed = await db.query<{ state: string }>(`SELECT state FROM ${inbox} WHERE idempotency_key = 'late-1'`);
    assert.equal(relayed[0]?.state, 'processed', 'relayed by the pass already running');
    assert.equal(summary.forwarded, 1);
    // The pass polls while a lease of MIN_LEASE_MS still fits before the deadline: it returned only
    // once the time left could no longer hold one (a pass that stopped early leaves more).
    assert.ok(leftAtReturn < MIN_LEASE_MS, `the pass polled until it could no longer take a lease; ${leftAtReturn} ms were left`);
  });

  it('return the summary from the Lambda handler and flush forwarded and oldest-pending-age metrics as EMF', async () => {
    await store('emf-1');
    await store('emf-2');
    await store('emf-later', { delayMs: 600_000 });
    await store('x-1', { aggregateId: 'X' });
    await store('x-2', { aggregateId: 'X' });
    await db.query(`UPDATE ${inbox} SET state = 'processing', claim_token = gen_random_uuid(), lease_expires_at = clock_timestamp() + interval '1 minute' WHERE idempotency_key = 'x-1'`);
    await db.query(`UPDATE ${inbox} SET scheduled_at = clock_timestamp() - interval '30 seconds' WHERE idempotency_key = 'x-2'`);
    const lines: string[] = [];
    // A container's own driver, as in a fresh Lambda environment: the backlog gauge is read at
    // most once per 10 s per driver, and earlier tests ran passes on the shared one.
    setContainer({ config: db.config, driver: db.newDriver(), logger, env: {}, writeMetrics: (line) => lines.push(line) });
    let summary: RelaySummary;
    try {
      summary = await handler({}, fakeLambdaContext({ timeoutMs: 2_500 }));
    } finally {
      setContainer(undefined);
    }
    assert.equal(summary.forwarded, 2);
    const emf = lines.map((l) => JSON.parse(l) as Record<string, unknown>);
    assert.equal(emf.find((e) => e.status === 'forwarded')?.queuebox_inbox_messages_total, 2);
    const age = Number(emf.find((e) => 'queuebox_inbox_oldest_pending_age_seconds' in e)?.queuebox_inbox_oldest_pending_age_seconds);
    assert.ok(age >= 30 && age < 60, `x-2 waits behind its busy aggregate for ~30 s, got ${age}`);
  });
});
