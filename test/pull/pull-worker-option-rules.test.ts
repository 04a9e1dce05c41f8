import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createPullClient, createPullWorker, UsageError, type PullWorkerOptions } from '../../lib/index.ts';
import { parseConfig } from '../../lib/config/load-config.ts';
import { MAX_TIMER_MS } from '../../lib/runtime/timer-limit.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { memoryLogger } from './pull-fixtures.ts';

/**
 * The worker options that stand for `pull` keys of the config (`batch`, `leaseMs`, `concurrency`,
 * `pollMs`, `retry.*`) follow the rules of those keys: a value the config refuses is refused at
 * `createPullWorker` with a `UsageError` naming the option. Durations that reach a timer or a lock
 * timeout (`leaseMs`, `pollMs`, the retry delays, `shutdownTimeoutMs`, `stop({ timeoutMs })`) are at
 * most MAX_TIMER_MS (2^31 − 1 ms): Node.js fires a longer timer after 1 ms, and PostgreSQL's
 * `lock_timeout`, which a fenced write takes from the lease, is an int32.
 */
describe('pull worker: option rules', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({});
  });
  after(async () => db.drop());

  const create = (options: Partial<PullWorkerOptions>) =>
    createPullWorker({ driver: db.newDriver(), source: 'opts', metrics: false, logger: memoryLogger(), handler: async () => {}, ...options });
  const refused = (options: Partial<PullWorkerOptions>, name: string) =>
    assert.throws(
      () => create(options),
      (error: unknown) => error instanceof UsageError && error.message.startsWith(`pull worker ${name}`),
      `${JSON.stringify(options)} is refused naming ${name}`,
    );

  it('refuses what the config keys refuse, naming the option', () => {
    assert.throws(() => parseConfig({ pull: { concurrency: 1.5 } }), /concurrency/);
    refused({ concurrency: 1.5 }, 'concurrency');
    refused({ concurrency: 0 }, 'concurrency');
    refused({ concurrency: 65 }, 'concurrency');
    refused({ batch: 2.5 }, 'batch');
    refused({ batch: 1001 }, 'batch');
    refused({ leaseMs: 999 }, 'leaseMs');
    refused({ leaseMs: 1500.5 }, 'leaseMs');
    refused({ pollMs: -1 }, 'pollMs');
    refused({ pollMs: 0.5 }, 'pollMs');
    refused({ retry: { maxAttempts: 1.5 } }, 'retry.maxAttempts');
    refused({ retry: { baseDelayMs: 0 } }, 'retry.baseDelayMs');
    refused({ retry: { jitter: 2 } }, 'retry.jitter');
    refused({ retry: { maxAtempts: 3 } as never }, 'retry.maxAtempts');
    assert.throws(() => create({ concurrency: 1.5 }), /^UsageError: pull worker concurrency: Invalid input: expected int, received number, got 1\.5$/);
    // The largest values the config accepts are accepted (on a runner of its own: the driver's
    // pool of 2 could not serve 64 handlers' transactions and the renewals).
    create({ concurrency: 64, batch: 1000, leaseMs: 1000, pollMs: 0, retry: { maxAttempts: 1, jitter: 1 }, transactions: async (work) => work(undefined as never) });
  });

  it('refuses null for an option (absent takes the config value; null is a value of the wrong kind), a blank source, and driver with pool', async () => {
    for (const name of ['batch', 'leaseMs', 'concurrency', 'pollMs', 'shutdownTimeoutMs'] as const) refused({ [name]: null } as never, name);
    refused({ source: '  ' }, 'source must be the name of an inbox source');
    assert.throws(() => create({ pool: db.pool as never }), (error: unknown) => error instanceof UsageError && /takes `driver` or `pool`, not both/.test(error.message));
  });

  it('runOnce refuses a context that is not a Lambda context, and context with deadline, as a rejected promise', async () => {
    const worker = create({});
    await assert.rejects(worker.runOnce({ context: {} as never }), (error: unknown) => error instanceof UsageError && /^runOnce context must be the Lambda context/.test(error.message));
    const context = { getRemainingTimeInMillis: () => 10_000 };
    const { createDeadline } = await import('../../lib/runtime/deadline.ts');
    await assert.rejects(worker.runOnce({ context, deadline: createDeadline(context, 1000) }), (error: unknown) => error instanceof UsageError && /not both/.test(error.message));
    await assert.rejects(worker.runOnce(null as never), (error: unknown) => error instanceof UsageError && /^runOnce takes \{ context \} or \{ deadline \}/.test(error.message));
  });

  it('refuses durations above MAX_TIMER_MS, naming the option', async () => {
    refused({ leaseMs: MAX_TIMER_MS + 1 }, 'leaseMs');
    refused({ leaseMs: 7_000_000_000 }, 'leaseMs');
    refused({ pollMs: MAX_TIMER_MS + 1 }, 'pollMs');
    refused({ retry: { baseDelayMs: MAX_TIMER_MS + 1 } }, 'retry.baseDelayMs');
    refused({ retry: { maxDelayMs: MAX_TIMER_MS + 1 } }, 'retry.maxDelayMs');
    refused({ shutdownTimeoutMs: MAX_TIMER_MS + 1 }, 'shutdownTimeoutMs');
    assert.throws(() => create({ leaseMs: 3_000_000_000 }), /^UsageError: pull worker leaseMs: must be at most 2147483647 ms .*got 3000000000$/);
    create({ leaseMs: MAX_TIMER_MS, pollMs: MAX_TIMER_MS, shutdownTimeoutMs: MAX_TIMER_MS, retry: { baseDelayMs: MAX_TIMER_MS, maxDelayMs: MAX_TIMER_MS } });
    const worker = create({ pollMs: 50 });
    await worker.start();
    await assert.rejects(worker.stop({ timeoutMs: MAX_TIMER_MS + 1 }), /^UsageError: pull worker stop timeoutMs must be at most/);
    await worker.stop({ timeoutMs: 0 });
  });

  it('runOnce on a running worker answers with a rejected promise, not a synchronous throw', async () => {
    const worker = create({ pollMs: 50 });
    await worker.start();
    try {
      let pending: Promise<unknown> | undefined;
      assert.doesNotThrow(() => {
        pending = worker.runOnce();
      });
      await assert.rejects(pending!, /^UsageError: this pull worker is already running$/);
    } finally {
      await worker.stop({ timeoutMs: 0 });
    }
  });

  it('the low-level client refuses a lease above MAX_TIMER_MS', async () => {
    const client = createPullClient(db.newDriver());
    await assert.rejects(client.claim('opts', { batch: 1, leaseMs: MAX_TIMER_MS + 1 }), /^UsageError: pull leaseMs must be at most 2147483647/);
    await assert.rejects(client.renew({ id: '00000000-0000-0000-0000-000000000000', token: '00000000-0000-0000-0000-000000000000' }, MAX_TIMER_MS + 1), /^UsageError: pull leaseMs must be at most 2147483647/);
  });
});
