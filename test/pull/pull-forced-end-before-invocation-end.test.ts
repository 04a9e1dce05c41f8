/**
 * `runOnce({ context })` with the default `shutdownTimeoutMs` (30 s, longer than any time left in
 * the invocation) and a handler that never finishes, holding its business transaction open: the
 * run gives up on the handler early enough that the ending of that transaction (a terminate of its
 * server process from a new connection, and the wait until the process is gone) fits before the
 * invocation's end, and `runOnce` settles before `getRemainingTimeInMillis()` reaches 0.
 *
 * Before, running handlers were given up on at the invocation's end itself: the terminate and its
 * wait then ran past the end, and `runOnce` settled after it. Lambda freezes (or ends) the
 * environment at the end, and a handler that settles after it is a timed-out invocation.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createPullWorker, type PullMessage } from '../../lib/index.ts';
import { sleep } from '../../lib/runtime/deadline.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { fakeLambdaContext } from '../helpers/lambda-context.ts';
import { waitUntil } from '../helpers/wait.ts';
import { insertPullRows, memoryLogger, readPullRows } from './pull-fixtures.ts';

/**
 * How long before the invocation's end `runOnce` must have settled (ms). Once it settles, the
 * Lambda handler still returns its summary to the runtime (serialised and posted to the Runtime
 * API), which takes a few milliseconds; a run that settles in the very last millisecond has not
 * returned in time. Both clocks are the same (`Date.now`, the fake context's), read in the
 * promise's own settlement callback, so no other slack is needed.
 */
const RETURN_MS = 5;

/** Tolerance between the test's clock and the database clock (same host), as in pull-lambda.test.ts. */
const CLOCK_SLACK_MS = 50;

describe('runOnce with the default shutdownTimeoutMs and a handler that never finishes', () => {
  let db: TestDatabase;
  /** Ends the handler's endless outside call once the test is over (it ignores its signal). */
  const outsideCall = new AbortController();
  before(async () => {
    db = await createTestDatabase({ lambda: { deadlineMarginMs: 1000 } });
  });
  after(async () => {
    outsideCall.abort();
    await db.drop();
  });

  it('settles before the invocation ends, with the handler\'s transaction ended and its row left to its lease', { timeout: 60_000 }, async () => {
    const [id] = await insertPullRows(db, 'endless', [{ key: 'order-endless' }]);
    const pids: number[] = [];
    const worker = createPullWorker({
      // A pool of its own: the abandoned handler keeps its (terminated) client until its work returns.
      driver: db.newDriver(),
      config: db.config,
      source: 'endless',
      leaseMs: 30_000,
      concurrency: 1,
      // shutdownTimeoutMs: the default, 30000 ms.
      logger: memoryLogger(),
      metrics: false,
      handler: async (_message, { transaction }) => {
        await transaction(async (tx) => {
          pids.push((await tx.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid);
          // Never finishes within the test: an outside call deaf to the handler's signal.
          await sleep(120_000, outsideCall.signal);
        });
      },
    });
    // Deadline 1000 ms before the invocation's end (config.lambda.deadlineMarginMs).
    const context = fakeLambdaContext({ timeoutMs: 3000 });
    const invocationEnd = Date.now() + context.getRemainingTimeInMillis();
    let settledAt = Number.NaN;
    const summary = await worker.runOnce({ context }).finally(() => (settledAt = Date.now()));
    // Read at once: a frozen container would not wait any longer.
    const left = await db.query<{ pid: number; state: string | null }>('SELECT pid, state FROM pg_stat_activity WHERE pid = ANY($1::int[])', [pids]);
    const settledWithMs = invocationEnd - settledAt;

    assert.equal(pids.length, 1, 'the handler opened its transaction');
    assert.equal(summary.abandoned, 1);
    assert.equal(summary.completed, 0);
    assert.ok(settledWithMs >= RETURN_MS, `runOnce settled with ${settledWithMs} ms of the invocation left (at least ${RETURN_MS} ms needed to return)`);
    assert.deepEqual(left, [], `the handler's transaction (server process ${pids[0]}) is over when runOnce settles`);

    // Not completed: the row stays claimed until its lease, which ends with the invocation.
    const [row] = await readPullRows(db, 'endless');
    assert.equal(row!.state, 'processing', 'left to its lease, not completed');
    assert.equal(row!.processed_at, null);
    assert.ok(row!.lease_expires_at!.getTime() <= invocationEnd + CLOCK_SLACK_MS, 'its lease ends with the invocation');

    // It comes back after its lease: the next claim takes it, counting the abandoned run.
    const handled: PullMessage[] = [];
    const next = createPullWorker({
      driver: db.driver,
      config: db.config,
      source: 'endless',
      logger: memoryLogger(),
      metrics: false,
      handler: async (message, { transaction }) => {
        handled.push(message);
        await transaction(async () => {});
      },
    });
    await waitUntil('the row is claimed again after its lease', async () => (await next.runOnce({ context: fakeLambdaContext({ timeoutMs: 10_000 }) })).completed === 1, 15_000);
    assert.deepEqual(
      handled.map((m) => m.id),
      [id],
    );
    const [done] = await readPullRows(db, 'endless');
    assert.equal(done!.state, 'processed');
    assert.equal(done!.attempt, 1, 'the abandoned run counted as an attempt');
  });
});
