import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createPullWorker, type PullMessage } from '../../lib/index.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { createGate, delay, waitUntil } from '../helpers/wait.ts';
import { expireLease, insertPullRows, memoryLogger, readPullRows } from './pull-fixtures.ts';

/**
 * A handler outlives its lease and the same worker claims the row again with a new token: the old
 * run is told it lost the row, and its end leaves the new claim's renewals and signal alone.
 */
describe('pull worker: a row claimed again by the same worker', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({ database: { poolMax: 4 } });
    await db.query(`CREATE TABLE "${db.schema}".effects (id serial PRIMARY KEY, inbox_id uuid NOT NULL, run text NOT NULL)`);
  });
  after(async () => db.drop());

  it('aborts the old run and keeps renewing the new claim until it completes', async () => {
    const [stalled, other] = await insertPullRows(db, 'jobs', [{ key: 'stalled', aggregateId: 'a' }, { key: 'other', aggregateId: 'b' }]);
    const firstRunMayEnd = createGate();
    const otherMayEnd = createGate();
    const runs: Array<{ token: string; aborted: () => boolean }> = [];
    let newRunAborted = false;
    const metrics = new QueueBoxMetrics({ namespace: 'QueueBoxTest', serviceName: 'test', write: () => {} });
    const worker = createPullWorker({
      driver: db.newDriver(),
      source: 'jobs',
      concurrency: 2,
      batch: 1,
      leaseMs: 1000,
      metrics,
      logger: memoryLogger(),
      handler: async (message: PullMessage, { signal, transaction }) => {
        if (message.id === other) {
          await otherMayEnd.wait();
        } else if (runs.length === 0) {
          runs.push({ token: message.claim.token, aborted: () => signal.aborted });
          // Frozen: ignores its signal until the test lets it go.
          await firstRunMayEnd.wait();
        } else {
          runs.push({ token: message.claim.token, aborted: () => signal.aborted });
          // The new claim's work outlasts two leases; only renewals keep it.
          await delay(2500);
          newRunAborted = signal.aborted;
        }
        await transaction((tx) => tx.query(`INSERT INTO "${db.schema}".effects (inbox_id, run) VALUES ($1, $2)`, [message.id, message.claim.token]));
      },
    });
    const done = worker.runOnce();
    await waitUntil('both rows are being handled', async () => runs.length === 1 && (await readPullRows(db, 'jobs')).every((r) => r.state === 'processing'));
    // The first run outlived its lease (as a stalled process would); the worker's next claim takes the row again.
    await expireLease(db, stalled!);
    otherMayEnd.open();
    await waitUntil('the same worker claimed the row again', () => runs.length === 2);
    assert.notEqual(runs[1]!.token, runs[0]!.token);
    await waitUntil('the old run is told it lost the row', () => runs[0]!.aborted(), 3000);
    firstRunMayEnd.open(); // the old run ends while the new claim still works
    const summary = await done;

    assert.equal(newRunAborted, false, 'the new claim was never aborted');
    const effects = await db.query<{ inbox_id: string; run: string }>(`SELECT inbox_id, run FROM "${db.schema}".effects ORDER BY id`);
    assert.deepEqual(effects.filter((e) => e.inbox_id === stalled).map((e) => e.run), [runs[1]!.token], "only the new claim's business transaction committed");
    assert.deepEqual((await readPullRows(db, 'jobs')).map((r) => r.state), ['processed', 'processed']);
    assert.deepEqual([summary.claimed, summary.completed, summary.claimsLost], [3, 2, 1]);
    assert.equal(metrics.value('claimsLost', { component: 'pull' }), 1);
  });
});
