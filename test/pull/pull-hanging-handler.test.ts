/**
 * A pull handler that never returns: each invocation's run outlives the invocation, so its lease
 * ends with the handler still running. The next claim of the expired row counts that lease as a
 * failed attempt; once `retry.maxAttempts` runs are spent the worker dead-letters the row without
 * running the handler again, and its aggregate moves on. Two workers run each invocation.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createPullWorker } from '../../lib/index.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { fakeLambdaContext } from '../helpers/lambda-context.ts';
import { createGate, waitUntil } from '../helpers/wait.ts';
import { insertPullRows, memoryLogger, readPullRows } from './pull-fixtures.ts';

/** Invocation length: the lease of every claim ends with it. */
const INVOCATION_MS = 2200;

describe('pull: a handler that never returns', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({ lambda: { deadlineMarginMs: 1000 } });
  });
  after(async () => db.drop());

  it('spends an attempt per invocation the handler outlives: after maxAttempts runs the row is dead and its aggregate moves on', async () => {
    const [head, next] = await insertPullRows(db, 'hang', [
      { key: 'h-1', aggregateId: 'A' },
      { key: 'h-2', aggregateId: 'A' },
    ]);
    const never = createGate();
    const runs: Array<{ id: string; attempt: number }> = [];
    const metrics = new QueueBoxMetrics({ namespace: 'test', serviceName: 'test', write: () => {} });
    const logger = memoryLogger();
    const invocation = async (): Promise<void> => {
      const workers = [1, 2].map(() =>
        createPullWorker({
          driver: db.newDriver(),
          config: db.config,
          source: 'hang',
          leaseMs: 30_000,
          retry: { maxAttempts: 3 },
          metrics,
          logger,
          handler: async (message, { transaction }) => {
            runs.push({ id: message.id, attempt: message.attempt });
            if (message.id === head) await never.wait();
            await transaction(async () => {});
          },
        }),
      );
      await Promise.all(workers.map((w) => w.runOnce({ context: fakeLambdaContext({ timeoutMs: INVOCATION_MS }) })));
      await waitUntil('no live lease is left', async () => (await readPullRows(db, 'hang')).every((r) => r.state !== 'processing' || r.lease_expires_at! <= new Date()));
    };

    for (let n = 1; n <= 3; n++) await invocation();
    assert.deepEqual(runs, [0, 1, 2].map((attempt) => ({ id: head, attempt })), 'three runs of the head, each claim counting the lost lease; its aggregate waited');
    await invocation();
    assert.deepEqual(runs.slice(3), [{ id: next, attempt: 0 }], 'no fourth run of the head; the next row of its aggregate ran');
    const rows = await readPullRows(db, 'hang');
    assert.deepEqual(
      rows.map((r) => [r.state, r.attempt, r.last_error]),
      [
        ['dead', 3, 'gave up after 3 of 3 attempts: the lease of the last one expired during the handler (it did not finish within its lease)'],
        ['processed', 0, null],
      ],
    );
    assert.equal(metrics.value('pullMessages', { status: 'dead' }), 1);
    assert.ok(logger.lines.some((l) => l.level === 'error' && l.message === 'pull message dead-lettered: the lease of its last attempt expired before its handler finished'));
  });
});
