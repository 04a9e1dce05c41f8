/**
 * docs/pull-workers.md ("Leases, renewal and ownership"): a claim the worker loses at a renewal
 * counts once in `queuebox_claims_lost_total{component="pull"}` and in the summary's `claimsLost`.
 * The metric was counted when the renewal found the claim lost, the summary only when the handler
 * returned `lost`: a handler that reacts to its `signal` late — still running when `runOnce`
 * reached its deadline or `stop()` timed out, or past `handlerTimeoutMs` — was counted `abandoned`
 * with `claimsLost` 0, while the EMF line said 1. Now the loss counts in both when it is known, and
 * the handler's later end (or the run giving up on it) counts nothing more: each claim once,
 * `claimed = completed + retried + dead + released + claimsLost + abandoned`.
 *
 * Another worker takes the row over (its lease ended, the second worker's claim statement takes it
 * with a new token and completes it), so the first worker's renewal changes no row. The last case
 * has the same worker claim the row again under a new claim while the old claim's handler still
 * runs: the loss is the old claim's (`claimKey`), and the new claim completes.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createDeadline, createPullWorker, METRICS, type PullRunSummary } from '../../lib/index.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { emfValue } from '../helpers/emf.ts';
import { fakeLambdaContext } from '../helpers/lambda-context.ts';
import { captureStdout } from '../helpers/stdout-capture.ts';
import { createGate, waitUntil } from '../helpers/wait.ts';
import { expireLease, insertPullRows, memoryLogger, readPullRows } from './pull-fixtures.ts';

const LOST_AT_RENEWAL = 'claim lost: renewal changed no row';

describe('pull worker: a claim lost at a renewal while its handler keeps running', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({ database: { poolMax: 3 } }); // concurrency 2 + 1, for the last case
  });
  after(async () => db.drop());

  /** A handler deaf to its signal until the test lets it end; it records the signal's reasons. */
  function lateHandler() {
    const started = createGate();
    const mayEnd = createGate();
    const reasons: string[] = [];
    let ended = false;
    const handler = async (_message: unknown, { signal }: { signal: AbortSignal }) => {
      signal.addEventListener('abort', () => reasons.push((signal.reason as Error).message));
      started.open();
      await mayEnd.wait(); // work that does not watch the signal (an HTTP call without it, say)
      ended = true;
    };
    return { handler, started, mayEnd, reasons, ended: () => ended };
  }

  /** A second worker takes the row over once its lease ended: its claim gives it a new token, its handler completes it. */
  async function takeOver(source: string, id: string): Promise<void> {
    await expireLease(db, id);
    const other = await createPullWorker({
      driver: db.newDriver(),
      config: db.config,
      source,
      metrics: false,
      logger: memoryLogger(),
      handler: async (_message, { transaction }) => transaction(async () => {}),
    }).runOnce();
    assert.deepEqual([other.claimed, other.completed], [1, 1], 'the second worker takes the row and completes it');
  }

  /** The summary counts the loss once, as `claimsLost` and not `abandoned`, and the EMF line the worker wrote agrees. */
  function assertCountedOnce(summary: PullRunSummary, lines: string[], expected: Partial<PullRunSummary>): void {
    const { durationMs: _, ...counts } = summary;
    assert.deepEqual(counts, { claimed: 1, completed: 0, retried: 0, dead: 0, released: 0, claimsLost: 1, abandoned: 0, ...expected });
    assert.equal(emfValue(lines, METRICS.claimsLost.name, { component: 'pull' }), summary.claimsLost, 'the EMF count of lost claims and the summary agree');
    assert.equal(emfValue(lines, METRICS.pullMessages.name, { status: 'completed' }), summary.completed);
    assert.equal(summary.claimed, summary.completed + summary.retried + summary.dead + summary.released + summary.claimsLost + summary.abandoned, 'each claim counts once');
  }

  it('runOnce: the handler still runs when the run gives up on it at its deadline; the loss counts in claimsLost, not abandoned', { timeout: 30_000 }, async () => {
    const [id] = await insertPullRows(db, 'deadline', [{ key: 'd-1' }]);
    const late = lateHandler();
    const worker = createPullWorker({ driver: db.newDriver(), config: db.config, source: 'deadline', leaseMs: 1500, concurrency: 1, logger: memoryLogger(), handler: late.handler });
    const { result: summary, lines } = await captureStdout(async () => {
      const run = worker.runOnce({ deadline: createDeadline(fakeLambdaContext({ timeoutMs: 4000 }), 1000) });
      await late.started.wait();
      await takeOver('deadline', id!);
      return run;
    });
    assert.equal(late.ended(), false, 'the handler was still running when runOnce returned');
    late.mayEnd.open();
    await waitUntil('the handler ended', () => late.ended());
    assert.equal(late.reasons[0], LOST_AT_RENEWAL);
    assertCountedOnce(summary, lines, {});
    assert.deepEqual((await readPullRows(db, 'deadline')).map((r) => r.state), ['processed']);
  });

  it('stop(): the handler still runs when the stop times out; the loss counts in claimsLost, not abandoned', { timeout: 30_000 }, async () => {
    const [id] = await insertPullRows(db, 'stopped', [{ key: 's-1' }]);
    const late = lateHandler();
    const worker = createPullWorker({ driver: db.newDriver(), config: db.config, source: 'stopped', leaseMs: 1000, concurrency: 1, logger: memoryLogger(), handler: late.handler });
    const { result: summary, lines } = await captureStdout(async () => {
      await worker.start();
      await late.started.wait();
      await takeOver('stopped', id!);
      await waitUntil('the renewal found the claim lost', () => late.reasons.length > 0);
      return worker.stop({ timeoutMs: 0 });
    });
    assert.equal(late.ended(), false, 'the handler was still running when stop() returned');
    late.mayEnd.open();
    await waitUntil('the handler ended', () => late.ended());
    assert.deepEqual(late.reasons, [LOST_AT_RENEWAL]);
    assertCountedOnce(summary!, lines, {});
  });

  it('handlerTimeoutMs: a handler whose claim was lost and that then runs past its time counts in claimsLost, not abandoned', { timeout: 30_000 }, async () => {
    const [id] = await insertPullRows(db, 'timed', [{ key: 't-1' }]);
    const late = lateHandler();
    const logger = memoryLogger();
    const worker = createPullWorker({ driver: db.newDriver(), config: db.config, source: 'timed', leaseMs: 1000, concurrency: 1, handlerTimeoutMs: 1500, logger, handler: late.handler });
    const { result: summary, lines } = await captureStdout(async () => {
      await worker.start();
      await late.started.wait();
      await takeOver('timed', id!);
      await waitUntil('the renewal found the claim lost', () => late.reasons.length > 0);
      await waitUntil('the handler ran past handlerTimeoutMs', () => logger.lines.some((l) => l.message.includes('ran past handlerTimeoutMs')));
      return worker.stop({ timeoutMs: 0 });
    });
    late.mayEnd.open();
    await waitUntil('the handler ended', () => late.ended());
    assert.deepEqual(late.reasons, [LOST_AT_RENEWAL]);
    assertCountedOnce(summary!, lines, {});
  });

  it('the same worker claims the row again under a new claim: the old claim counts lost once, the new one completes', { timeout: 30_000 }, async () => {
    const [id] = await insertPullRows(db, 'again', [{ key: 'a-1' }]);
    const late = lateHandler();
    const worker = createPullWorker({
      driver: db.newDriver(),
      config: db.config,
      source: 'again',
      leaseMs: 1000,
      concurrency: 2,
      pollMs: 50,
      logger: memoryLogger(),
      handler: async (message, context) => {
        if (message.attempt === 0) return late.handler(message, context);
        await context.transaction(async () => {});
      },
    });
    const { result: summary, lines } = await captureStdout(async () => {
      await worker.start();
      await late.started.wait();
      await expireLease(db, id!); // the free slot's next claim takes the row again, with a new token
      await waitUntil('the new claim completed the row', async () => (await readPullRows(db, 'again'))[0]!.state === 'processed');
      await waitUntil('the renewal found the old claim lost', () => late.reasons.length > 0);
      return worker.stop({ timeoutMs: 0 });
    });
    late.mayEnd.open();
    await waitUntil('the handler ended', () => late.ended());
    assert.deepEqual(late.reasons, [LOST_AT_RENEWAL]);
    assertCountedOnce(summary!, lines, { claimed: 2, completed: 1 });
  });
});
