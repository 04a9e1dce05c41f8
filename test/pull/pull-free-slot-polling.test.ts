import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createPullWorker, type PullMessage } from '../../lib/index.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { createGate, delay, waitUntil, type Gate } from '../helpers/wait.ts';
import { insertPullRows, memoryLogger, readPullRows } from './pull-fixtures.ts';

/**
 * A worker with a free handler slot keeps claiming every `pollMs` while another handler runs: a
 * row that arrives after the last claim (another aggregate) is handled by the free slot, not only
 * once the slow handler ends. Both for `start()` and for `runOnce()`.
 */
describe('pull worker: a free slot while one handler is slow', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({ database: { poolMax: 4 } });
  });
  after(async () => db.drop());

  const slowWorker = (source: string, slowMayEnd: Gate, handled: string[]) =>
    createPullWorker({
      driver: db.newDriver(),
      source,
      concurrency: 2,
      pollMs: 50,
      leaseMs: 30_000,
      metrics: false,
      logger: memoryLogger(),
      handler: async (message: PullMessage, { transaction }) => {
        if (message.idempotencyKey === 'slow') await slowMayEnd.wait();
        await transaction(async () => {});
        handled.push(message.idempotencyKey);
      },
    });

  it('start(): claims and handles a later row within a few pollMs', async () => {
    await insertPullRows(db, 'poll', [{ key: 'slow', aggregateId: 'A' }]);
    const slowMayEnd = createGate();
    const handled: string[] = [];
    const worker = slowWorker('poll', slowMayEnd, handled);
    await worker.start();
    await delay(200); // the slow row is in its handler and the last claim found nothing else
    await insertPullRows(db, 'poll', [{ key: 'late', aggregateId: 'B' }]);
    try {
      await waitUntil('the late row is handled while the slow handler runs', () => handled.includes('late'), 3000);
    } finally {
      slowMayEnd.open();
      await worker.stop();
    }
    assert.deepEqual(handled, ['late', 'slow']);
    assert.deepEqual((await readPullRows(db, 'poll')).map((r) => r.state), ['processed', 'processed']);
  });

  it('runOnce(): claims and handles a later row within a few pollMs', async () => {
    await insertPullRows(db, 'once', [{ key: 'slow', aggregateId: 'A' }]);
    const slowMayEnd = createGate();
    const handled: string[] = [];
    const pass = slowWorker('once', slowMayEnd, handled).runOnce();
    await delay(200);
    await insertPullRows(db, 'once', [{ key: 'late', aggregateId: 'B' }]);
    try {
      await waitUntil('the late row is handled while the slow handler runs', () => handled.includes('late'), 3000);
    } finally {
      slowMayEnd.open();
    }
    const summary = await pass;
    assert.deepEqual(handled, ['late', 'slow']);
    assert.deepEqual([summary.claimed, summary.completed], [2, 2]);
  });
});
