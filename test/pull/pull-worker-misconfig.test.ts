/**
 * `createPullWorker` refuses, with a `UsageError` naming the option, what the loop would only trip
 * over once it claims: before, a missing handler (the typo `handle:`) or a `transactions` that is
 * not a function was accepted and every claimed message failed until dead-lettered; a logger
 * without `warn`/`error` ended the loop at its first log line; a `retry` that is not an object and
 * unknown option names (`concurency`) were silently the defaults; `shutdownTimeoutMs: 1.5` was
 * accepted where every other duration is a whole number of ms. A `concurrency` that the pool
 * shared by the business transactions and the renewals cannot serve is refused too (renewals
 * starved behind the handlers and every claim was lost).
 *
 * A logger that throws cannot end the loop or a message's settle; the low-level client refuses a
 * renewal lease or a retry delay out of range before sending anything.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { createPullClient, createPullWorker, UsageError, type PullWorkerOptions } from '../../lib/index.ts';
import { MAX_TIMER_MS } from '../../lib/runtime/timer-limit.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { insertPullRows, memoryLogger, readPullRows } from './pull-fixtures.ts';

describe('pull worker: options refused at creation', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({});
  });
  after(async () => db.drop());

  const create = (options: Record<string, unknown>) =>
    createPullWorker({ driver: db.driver, source: 'opts', metrics: false, logger: memoryLogger(), handler: async () => {}, ...options } as PullWorkerOptions);
  const refused = (options: Record<string, unknown>, name: string, detail?: RegExp) =>
    assert.throws(
      () => create(options),
      (error: unknown) => error instanceof UsageError && error.message.startsWith(`pull worker ${name}`) && (detail === undefined || detail.test(error.message)),
      `${String(Object.keys(options))} is refused naming ${name}`,
    );

  it('refuses unknown option names, a handler or runner that is not a function, a logger without warn/error, a retry that is not an object', () => {
    refused({ concurency: 3 }, 'concurency', /is not an option of createPullWorker; the options are: .*concurrency/);
    refused({ handler: undefined, handle: async () => {} }, 'handle', /is not an option/);
    refused({ handler: undefined }, 'handler', /must be a function/);
    refused({ handler: 42 }, 'handler', /got 42$/);
    refused({ transactions: 5 }, 'transactions', /must be a TransactionRunner/);
    refused({ transactions: {} }, 'transactions', /got an object$/);
    refused({ logger: {} }, 'logger', /warn/);
    refused({ logger: { warn: () => {} } }, 'logger', /error/);
    refused({ logger: null }, 'logger');
    refused({ logger: console.log }, 'logger');
    refused({ retry: null }, 'retry', /must be an object/);
    refused({ retry: 5 }, 'retry', /got 5$/);
    refused({ retry: [3] }, 'retry', /got an array$/);
    refused({ metrics: true }, 'metrics');
    refused({ source: 7 }, 'source');
    // Options set to undefined take their defaults, as before.
    create({ retry: undefined, logger: undefined, transactions: undefined, metrics: undefined, handlerTimeoutMs: undefined });
    create({ logger: { warn: () => {}, error: () => {}, info: () => {} } });
  });

  it('a worker refused at creation claims nothing: no message is dead-lettered by a missing handler or runner', async () => {
    await insertPullRows(db, 'a', [{ key: 'a1' }]);
    assert.throws(() => createPullWorker({ driver: db.driver, source: 'a', metrics: false, handle: async () => {} } as never), UsageError);
    assert.throws(() => createPullWorker({ driver: db.driver, source: 'a', metrics: false, transactions: {} as never, handler: async () => {} }), UsageError);
    assert.deepEqual((await readPullRows(db, 'a')).map((r) => [r.state, r.attempt]), [['pending', 0]]);
  });

  it('durations are whole numbers of ms: shutdownTimeoutMs, stop({ timeoutMs }), handlerTimeoutMs', async () => {
    refused({ shutdownTimeoutMs: 1.5 }, 'shutdownTimeoutMs', /whole number of ms, at least 0, got 1\.5$/);
    refused({ shutdownTimeoutMs: 'x' }, 'shutdownTimeoutMs');
    refused({ shutdownTimeoutMs: -1 }, 'shutdownTimeoutMs');
    for (const value of [0, -1, 1.5, Number.NaN, Infinity, '1000', null]) refused({ handlerTimeoutMs: value }, 'handlerTimeoutMs');
    refused({ handlerTimeoutMs: MAX_TIMER_MS + 1 }, 'handlerTimeoutMs', /at most 2147483647/);
    create({ shutdownTimeoutMs: 0, handlerTimeoutMs: 1 });
    create({ handlerTimeoutMs: MAX_TIMER_MS });
    const worker = create({ pollMs: 50 });
    await worker.start();
    await assert.rejects(worker.stop({ timeoutMs: 1.5 }), /^UsageError: pull worker stop timeoutMs must be a whole number of ms/);
    await worker.stop({ timeoutMs: 0 });
  });
});

describe('pull worker: a pool too small for its concurrency', () => {
  let db: TestDatabase;
  let appPool: pg.Pool;
  before(async () => {
    db = await createTestDatabase({}); // database.poolMax 2
    appPool = new pg.Pool({ connectionString: db.url, max: 3 });
    appPool.on('error', () => {});
  });
  after(async () => {
    await appPool.end();
    await db.drop();
  });

  const worker = (options: Partial<PullWorkerOptions>) => () => createPullWorker({ source: 'pool', config: db.config, metrics: false, logger: memoryLogger(), handler: async () => {}, ...options });
  const tooSmall = (max: number) => (error: unknown) =>
    error instanceof UsageError && error.message.startsWith('pull worker concurrency') && error.message.includes(`pool's max is ${max}`);

  it('is refused when the handlers’ transactions share the pool of the claims and renewals', () => {
    assert.throws(worker({ driver: db.newDriver(), concurrency: 2 }), tooSmall(2), 'the driver’s own pool (database.poolMax 2)');
    assert.throws(worker({ pool: appPool, concurrency: 3 }), tooSmall(3), 'a pool option');
    assert.doesNotThrow(worker({ driver: db.newDriver(), concurrency: 1 }));
    assert.doesNotThrow(worker({ pool: appPool, concurrency: 2 }));
  });

  it('is not checked with a runner of its own (its pool is not known)', () => {
    assert.doesNotThrow(worker({ driver: db.newDriver(), concurrency: 8, transactions: async (work) => work(undefined as never) }));
  });
});

describe('pull worker: a logger that throws', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({});
  });
  after(async () => db.drop());

  it('ends neither the loop nor the settle: the failed message is dead-lettered and the pass returns its summary', async () => {
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => void unhandled.push(reason);
    process.on('unhandledRejection', onUnhandled);
    try {
      const throwing = () => {
        throw new Error('logger down');
      };
      // One that throws, and an async one whose promise rejects.
      for (const [source, log] of [
        ['sync', throwing],
        ['async', async () => throwing()],
      ] as const) {
        await insertPullRows(db, source, [{ key: 'l1' }, { key: 'l2' }]);
        let calls = 0;
        const counted = (...args: Parameters<typeof log>) => {
          calls++;
          return log(...args);
        };
        const summary = await createPullWorker({
          driver: db.driver,
          source,
          metrics: false,
          retry: { maxAttempts: 1 },
          logger: { warn: counted, error: counted },
          handler: async (message) => {
            if (message.idempotencyKey === 'l1') throw new Error('boom');
          },
        }).runOnce();
        await new Promise((resolve) => setImmediate(resolve));
        assert.ok(calls > 0, `the ${source} logger was called`);
        assert.deepEqual([summary.dead, summary.completed], [1, 1], source);
        assert.deepEqual((await readPullRows(db, source)).map((r) => r.state), ['dead', 'processed'], source);
      }
      assert.deepEqual(unhandled, []);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
  });
});

describe('pull client: renew and retry arguments', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({});
  });
  after(async () => db.drop());

  it('refuses a renewal lease that is not a whole number of ms from MIN_LEASE_MS, and a retry delay that is not 0 to MAX_TIMER_MS, writing nothing', async () => {
    await insertPullRows(db, 'args', [{ key: 'k' }]);
    const client = createPullClient(db.driver);
    const [message] = await client.claim('args', { batch: 1, leaseMs: 5000 });
    const [before] = await readPullRows(db, 'args');
    for (const leaseMs of [0, -60_000, 0.5, Number.NaN, 1e-9, 999, 1500.5, Infinity]) {
      await assert.rejects(client.renew(message!.claim, leaseMs), (error: unknown) => error instanceof UsageError && /^pull renew leaseMs must be a whole number of ms, at least 1000/.test(error.message), `renew ${leaseMs}`);
    }
    await assert.rejects(client.renew(message!.claim, MAX_TIMER_MS + 1), /^UsageError: pull leaseMs must be at most 2147483647/);
    for (const delayMs of [Number.NaN, Infinity, -Infinity, -1, 1e13, MAX_TIMER_MS + 1]) {
      await assert.rejects(client.retry(message!.claim, delayMs, new Error('x')), (error: unknown) => error instanceof UsageError && /^pull retry delayMs must be a number of ms, 0 to 2147483647/.test(error.message), `retry ${delayMs}`);
    }
    const [unchanged] = await readPullRows(db, 'args');
    assert.deepEqual([unchanged!.state, unchanged!.attempt, unchanged!.claim_token, unchanged!.lease_expires_at], [before!.state, before!.attempt, before!.claim_token, before!.lease_expires_at]);
    assert.deepEqual(await client.renew(message!.claim, 1000), { ok: true });
    assert.deepEqual(await client.retry(message!.claim, 1.5, new Error('x')), { ok: true });
    const [retried] = await readPullRows(db, 'args');
    assert.deepEqual([retried!.state, retried!.attempt], ['pending', 1]);
  });
});
