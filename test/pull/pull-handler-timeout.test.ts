/**
 * `handlerTimeoutMs` under `start()`: the lease keeper renews a running handler's lease for as
 * long as it runs, so a handler that never returns held its row, its aggregate and its slot
 * forever (no attempt spent, the aggregate never moved, nothing else handled at concurrency 1).
 * Past `handlerTimeoutMs` the worker gives up on the run: its signal fires, its claim is no longer
 * renewed and its slot frees. The lease then ends, the next claim counts the run as an attempt,
 * and after `retry.maxAttempts` such runs the row is dead-lettered and its aggregate moves on.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createPullWorker, OwnershipLostError } from '../../lib/index.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { createGate, waitUntil } from '../helpers/wait.ts';
import { insertPullRows, memoryLogger, readPullRows } from './pull-fixtures.ts';

describe('pull worker: handlerTimeoutMs', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({});
    await db.query(`CREATE TABLE "${db.schema}".handled (key text)`);
  });
  after(async () => db.drop());

  it('start(): a handler that never returns spends an attempt per run; then the row is dead and its aggregate moves on', { timeout: 60_000 }, async () => {
    await insertPullRows(db, 'hang', [
      { key: 'h-1', aggregateId: 'A' },
      { key: 'h-2', aggregateId: 'A' },
      { key: 'other', aggregateId: 'B' },
    ]);
    const never = createGate();
    const runs: Array<{ key: string; attempt: number }> = [];
    const aborts: string[] = [];
    const logger = memoryLogger();
    const worker = createPullWorker({
      driver: db.newDriver(),
      source: 'hang',
      leaseMs: 1000,
      pollMs: 50,
      concurrency: 1,
      handlerTimeoutMs: 300,
      retry: { maxAttempts: 2 },
      metrics: false,
      logger,
      shutdownTimeoutMs: 0,
      handler: async (message, { signal, transaction }) => {
        runs.push({ key: message.idempotencyKey, attempt: message.attempt });
        if (message.idempotencyKey === 'h-1') {
          signal.addEventListener('abort', () => aborts.push(String((signal.reason as Error).message)));
          await never.wait(); // deaf to its signal
        }
        await transaction(async (tx) => tx.query(`INSERT INTO "${db.schema}".handled VALUES ($1)`, [message.idempotencyKey]));
      },
    });
    await worker.start();
    let summary;
    try {
      await waitUntil('every row is settled', async () => (await readPullRows(db, 'hang')).every((r) => r.state === 'processed' || r.state === 'dead'), 30_000);
    } finally {
      summary = await worker.stop({ timeoutMs: 0 });
    }
    assert.deepEqual(
      runs.filter((r) => r.key === 'h-1'),
      [
        { key: 'h-1', attempt: 0 },
        { key: 'h-1', attempt: 1 },
      ],
      'two runs of the head, the second claim counting the first run’s lease',
    );
    assert.ok(runs.findIndex((r) => r.key === 'other') < runs.findIndex((r) => r.key === 'h-1' && r.attempt === 1), 'the free slot handled another aggregate while the head’s lease ran out');
    assert.deepEqual(aborts, ['pull handler did not finish within handlerTimeoutMs (300 ms)', 'pull handler did not finish within handlerTimeoutMs (300 ms)']);
    const rows = await readPullRows(db, 'hang');
    assert.deepEqual(
      rows.map((r) => [r.idempotency_key, r.state, r.attempt, r.last_error]),
      [
        ['h-1', 'dead', 2, 'gave up after 2 of 2 attempts: the lease of the last one expired during the handler (it did not finish within its lease)'],
        ['h-2', 'processed', 0, null],
        ['other', 'processed', 0, null],
      ],
    );
    assert.deepEqual([summary!.abandoned, summary!.dead, summary!.completed, summary!.claimsLost], [2, 1, 2, 0]);
    assert.equal(logger.lines.filter((l) => l.message === 'pull handler ran past handlerTimeoutMs; its signal is aborted and its row left to its lease').length, 2);

    // The runs given up on write nothing when they go on: their transaction is refused.
    never.open();
    await new Promise((resolve) => setTimeout(resolve, 200));
    assert.deepEqual((await db.query<{ key: string }>(`SELECT key FROM "${db.schema}".handled ORDER BY key`)).map((r) => r.key), ['h-2', 'other']);
  });

  it('a run given up on cannot commit: its transaction is refused with OwnershipLostError', async () => {
    await insertPullRows(db, 'late', [{ key: 'late' }]);
    const outcome = createGate();
    let error: unknown;
    const summary = await createPullWorker({
      driver: db.newDriver(),
      source: 'late',
      leaseMs: 5000,
      handlerTimeoutMs: 200,
      metrics: false,
      logger: memoryLogger(),
      handler: async (_message, { signal, transaction }) => {
        await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
        try {
          await transaction(async (tx) => tx.query(`INSERT INTO "${db.schema}".handled VALUES ('late')`));
        } catch (e) {
          error = e;
        } finally {
          outcome.open();
        }
      },
    }).runOnce();
    await outcome.wait();
    assert.ok(error instanceof OwnershipLostError, String(error));
    assert.deepEqual([summary.abandoned, summary.completed, summary.retried], [1, 0, 0]);
    const [row] = await readPullRows(db, 'late');
    assert.deepEqual([row!.state, row!.attempt], ['processing', 0], 'left to its lease, not retried');
    assert.deepEqual(await db.query(`SELECT key FROM "${db.schema}".handled WHERE key = 'late'`), []);
  });
});
