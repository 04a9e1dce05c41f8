/**
 * What a pull run counts when an outcome arrives after the run first counted the claim (each claim
 * counts once: `claimed = completed + retried + dead + released + claimsLost + abandoned`), checked
 * against the rows and the metrics.
 *
 * - A completion that commits after `handlerTimeoutMs` fired (its completion was already sent, and
 *   the transaction runner does not end the transaction at the signal, as the SQL Server runner
 *   and runners of one's own may not): the row is `processed`. It was counted `abandoned`, and no
 *   `completed` metric was counted. Now the metric counts it, and so does the summary while the
 *   run has not returned it (`completed` instead of `abandoned`).
 * - A renewal under way when the run closes its lease keeper (after the drain gave up on a
 *   handler) that finds the claim lost: the keeper dropped the loss (no metric, no log) and the
 *   summary said `abandoned`. Now it counts in `claimsLost`, the metric and the log.
 * - `handlerTimeoutMs` firing for a claim already lost at a renewal logged that the row is "left to
 *   its lease", while it was lost (it may have a new owner). Now the warning says so.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type pg from 'pg';
import { createPullWorker, pgTransactionRunner, QueueBoxMetrics, type PullRunSummary, type TransactionRunner } from '../../lib/index.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { createGate, delay, waitUntil } from '../helpers/wait.ts';
import { insertPullRows, memoryLogger, readPullRows } from './pull-fixtures.ts';

const TIMED_OUT = 'pull handler ran past handlerTimeoutMs; its signal is aborted and its row left to its lease';
const TIMED_OUT_AFTER_LOSS = 'pull handler ran past handlerTimeoutMs after its claim was lost (counted in claimsLost); nothing more is written for its row';
const LOST_AT_RENEWAL = 'pull claim lost at renewal; its handler is aborted';

describe('pull run: outcomes that arrive after the claim was first counted', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({ database: { poolMax: 3 } }); // concurrency 2 + 1, for the last case
    await db.query(`CREATE TABLE "${db.schema}".handled (key text)`);
  });
  after(async () => db.drop());

  const newMetrics = () => new QueueBoxMetrics({ namespace: 'test', serviceName: 'test', write: () => {} });
  const counts = ({ durationMs: _, ...rest }: PullRunSummary) => rest;

  /** Another session locks the row (`FOR UPDATE`) until `release` commits (or rolls back) its transaction. */
  async function lockRow(id: string): Promise<{ client: pg.PoolClient; done(sql?: string): Promise<void> }> {
    const client = await db.pool.connect();
    await client.query('BEGIN');
    await client.query(`SELECT 1 FROM "${db.schema}".inbox WHERE id = $1 FOR UPDATE`, [id]);
    return {
      client,
      async done(sql) {
        try {
          if (sql !== undefined) await client.query(sql, [id]);
          await client.query('COMMIT');
        } finally {
          client.release();
        }
      },
    };
  }

  /** Waits until a statement of another session waits for a row lock (the worker's completion or renewal). */
  async function waitForLockWait(what: string): Promise<void> {
    await waitUntil(what, async () => (await db.query(`SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND position($1 in query) > 0`, [db.schema])).length > 0);
  }

  it('a completion that commits after handlerTimeoutMs fired counts as completed, in the metric and in the summary not yet returned', { timeout: 30_000 }, async () => {
    const [id] = await insertPullRows(db, 'late-commit', [{ key: 'lc-1' }]);
    const driver = db.newDriver();
    // A runner that leaves the transaction to the handler when the worker gives up on it.
    const runner = pgTransactionRunner(driver.pool);
    const transactions: TransactionRunner<pg.PoolClient> = (work) => runner(work);
    const metrics = newMetrics();
    const logger = memoryLogger();
    const started = createGate();
    const mayWrite = createGate();
    let handlerEnded = false;
    const worker = createPullWorker({
      driver,
      source: 'late-commit',
      leaseMs: 20_000,
      pollMs: 50,
      handlerTimeoutMs: 1000,
      transactions,
      metrics,
      logger,
      handler: async (message, { transaction }) => {
        started.open();
        await mayWrite.wait();
        await transaction(async (tx) => tx.query(`INSERT INTO "${db.schema}".handled VALUES ($1)`, [message.idempotencyKey]));
        handlerEnded = true;
      },
    });
    await worker.start();
    let summary: PullRunSummary | undefined;
    try {
      await started.wait();
      const lock = await lockRow(id!);
      mayWrite.open();
      // The handler's completion is sent and waits for the row lock; its time runs out meanwhile.
      await waitForLockWait('the completion waits for the row lock');
      await waitUntil('the handler ran past handlerTimeoutMs', () => logger.lines.some((l) => l.message === TIMED_OUT));
      await lock.done();
      await waitUntil('the handler ended', () => handlerEnded);
    } finally {
      mayWrite.open();
      summary = await worker.stop({ timeoutMs: 0 });
    }
    assert.equal((await readPullRows(db, 'late-commit'))[0]!.state, 'processed');
    assert.deepEqual((await db.query<{ key: string }>(`SELECT key FROM "${db.schema}".handled WHERE key = 'lc-1'`)).map((r) => r.key), ['lc-1'], 'the business write committed with the completion');
    assert.deepEqual(counts(summary!), { claimed: 1, completed: 1, retried: 0, dead: 0, released: 0, claimsLost: 0, abandoned: 0 });
    assert.equal(metrics.value('pullMessages', { status: 'completed' }), 1);
    assert.equal(metrics.value('claimsLost', { component: 'pull' }), 0);
    assert.equal(logger.lines.filter((l) => l.message.startsWith('pull handler the worker gave up on settled its message after all')).length, 1);
  });

  it('runOnce returned abandoned before the completion committed: the completed metric still counts it', { timeout: 30_000 }, async () => {
    const [id] = await insertPullRows(db, 'after-return', [{ key: 'ar-1' }]);
    const driver = db.newDriver();
    const runner = pgTransactionRunner(driver.pool);
    const metrics = newMetrics();
    const started = createGate();
    const mayWrite = createGate();
    let handlerEnded = false;
    const worker = createPullWorker({
      driver,
      source: 'after-return',
      leaseMs: 20_000,
      handlerTimeoutMs: 1000,
      transactions: (work) => runner(work),
      metrics,
      logger: memoryLogger(),
      handler: async (message, { transaction }) => {
        started.open();
        await mayWrite.wait();
        await transaction(async (tx) => tx.query(`INSERT INTO "${db.schema}".handled VALUES ($1)`, [message.idempotencyKey]));
        handlerEnded = true;
      },
    });
    const running = worker.runOnce();
    await started.wait();
    const lock = await lockRow(id!);
    mayWrite.open();
    await waitForLockWait('the completion waits for the row lock');
    // Its slot freed at the timeout, nothing else is claimable: the run returns.
    const summary = await running;
    assert.deepEqual(counts(summary), { claimed: 1, completed: 0, retried: 0, dead: 0, released: 0, claimsLost: 0, abandoned: 1 }, 'the summary as it stood when the run returned');
    await lock.done();
    await waitUntil('the handler ended', () => handlerEnded);
    assert.equal((await readPullRows(db, 'after-return'))[0]!.state, 'processed');
    assert.equal(metrics.value('pullMessages', { status: 'completed' }), 1, 'the completion that committed is in the metric');
  });

  it('a renewal under way when the run closes its keeper that finds the claim lost counts in claimsLost, the metric and the log', { timeout: 30_000 }, async () => {
    const [id] = await insertPullRows(db, 'close-lost', [{ key: 'cl-1' }]);
    const metrics = newMetrics();
    const drained = createGate();
    const lines: Array<{ level: string; message: string }> = [];
    const logger = {
      lines,
      warn: (message: string) => {
        lines.push({ level: 'warn', message });
        if (message.startsWith('pull worker stopped with handlers still running')) drained.open();
      },
      error: (message: string) => void lines.push({ level: 'error', message }),
    };
    const started = createGate();
    const mayEnd = createGate();
    const worker = createPullWorker({
      driver: db.newDriver(),
      source: 'close-lost',
      leaseMs: 3000, // renewed every second
      metrics,
      logger,
      handler: async () => {
        started.open();
        await mayEnd.wait(); // deaf to its signal
      },
    });
    await worker.start();
    let summary: PullRunSummary | undefined;
    try {
      await started.wait();
      const lock = await lockRow(id!);
      await waitForLockWait('a renewal waits for the row lock');
      const stopping = worker.stop({ timeoutMs: 0 });
      // The drain gave up on the handler; the run now closes its keeper, whose renewal is still under way.
      await drained.wait();
      await new Promise((resolve) => setImmediate(resolve));
      // Another worker's claim of the row commits: the renewal under way changes no row.
      await lock.done(`UPDATE "${db.schema}".inbox SET claim_token = gen_random_uuid(), lease_expires_at = clock_timestamp() + interval '1 minute' WHERE id = $1`);
      summary = await stopping;
    } finally {
      mayEnd.open();
      summary ??= await worker.stop({ timeoutMs: 0 });
    }
    assert.deepEqual(counts(summary!), { claimed: 1, completed: 0, retried: 0, dead: 0, released: 0, claimsLost: 1, abandoned: 0 });
    assert.equal(metrics.value('claimsLost', { component: 'pull' }), 1);
    assert.equal(lines.filter((l) => l.message === LOST_AT_RENEWAL).length, 1);
  });

  it('handlerTimeoutMs: the warning says the row is left to its lease, or that its claim was lost before', { timeout: 30_000 }, async () => {
    const [, lostId] = await insertPullRows(db, 'timeout-text', [{ key: 'tt-left' }, { key: 'tt-lost' }]);
    const logger = memoryLogger();
    const started = new Set<string>();
    const mayEnd = createGate();
    const worker = createPullWorker({
      driver: db.newDriver(),
      source: 'timeout-text',
      leaseMs: 1000,
      pollMs: 50,
      concurrency: 2,
      handlerTimeoutMs: 2000,
      metrics: false,
      logger,
      handler: async (message) => {
        started.add(message.idempotencyKey);
        await mayEnd.wait(); // deaf to its signal
      },
    });
    await worker.start();
    let summary: PullRunSummary | undefined;
    try {
      await waitUntil('both handlers run', () => started.size === 2);
      // Another worker takes `tt-lost` over: the next renewal of its claim changes no row.
      await db.query(`UPDATE "${db.schema}".inbox SET claim_token = gen_random_uuid(), lease_expires_at = clock_timestamp() + interval '1 minute' WHERE id = $1`, [lostId]);
      await waitUntil('both handlers ran past handlerTimeoutMs', () => logger.lines.filter((l) => l.message.startsWith('pull handler ran past handlerTimeoutMs')).length === 2);
      await delay(50);
    } finally {
      summary = await worker.stop({ timeoutMs: 0 });
      mayEnd.open();
    }
    const messages = logger.lines.map((l) => l.message);
    assert.deepEqual(messages.filter((m) => m.startsWith('pull handler ran past handlerTimeoutMs')).sort(), [TIMED_OUT_AFTER_LOSS, TIMED_OUT].sort());
    assert.ok(messages.indexOf(LOST_AT_RENEWAL) < messages.indexOf(TIMED_OUT_AFTER_LOSS), 'the loss was known before the timeout');
    assert.deepEqual([summary!.claimed, summary!.claimsLost, summary!.abandoned], [2, 1, 1]);
  });
});
