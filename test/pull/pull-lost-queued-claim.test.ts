import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createPullClient, createPullWorker } from '../../lib/index.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { createGate, delay } from '../helpers/wait.ts';
import { insertPullRows, memoryLogger, readPullRows } from './pull-fixtures.ts';

/**
 * A row beyond the worker's free handler slots (batch 2, concurrency 1) is not claimed while the
 * handler runs: no row waits in the worker for a slot, so none can lose its claim there (at a
 * renewal that changed no row or failed) and be charged an attempt no handler ran. Another worker
 * takes it at once, and this one leaves it alone.
 */
describe('pull worker: a row beyond the free slots', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({ database: { poolMax: 6 } });
  });
  after(async () => db.drop());

  it('stays unclaimed while the handler runs: another worker takes it at once, and no claim is lost', async () => {
    const [, id2] = await insertPullRows(db, 'taken', [{ key: 'first' }, { key: 'queued' }]);
    const metrics = new QueueBoxMetrics({ namespace: 'test', serviceName: 'test', write: () => {} });
    const started = createGate();
    const firstMayEnd = createGate();
    const ran: string[] = [];
    const pass = createPullWorker({
      driver: db.newDriver(),
      config: db.config,
      source: 'taken',
      leaseMs: 1500, // renewal every 500 ms
      batch: 2,
      concurrency: 1,
      metrics,
      logger: memoryLogger(),
      handler: async (message, { transaction }) => {
        ran.push(message.idempotencyKey);
        if (message.idempotencyKey === 'first') {
          started.open();
          await firstMayEnd.wait();
        }
        await transaction(async () => {});
      },
    }).runOnce();
    await started.wait();
    const [, row2] = await readPullRows(db, 'taken');
    assert.deepEqual([row2!.state, row2!.claim_token], ['pending', null], 'the second row is not claimed');
    const other = await createPullClient(db.newDriver()).claim('taken', { batch: 1, leaseMs: 60_000 });
    assert.deepEqual(other.map((m) => m.id), [id2], 'another worker takes it at once');
    await delay(1200); // renewals of the running handler's claim
    firstMayEnd.open();
    const summary = await pass;
    const [, after2] = await readPullRows(db, 'taken');
    assert.equal(after2!.claim_token, other[0]!.claim.token, 'the other worker keeps the row');
    assert.deepEqual(ran, ['first']);
    assert.deepEqual([summary.claimed, summary.completed, summary.claimsLost, summary.released], [1, 1, 0, 0]);
    assert.equal(metrics.value('claimsLost', { component: 'pull' }), 0);
  });
});
