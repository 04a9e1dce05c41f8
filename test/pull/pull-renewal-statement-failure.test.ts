import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Driver } from '../../lib/db/driver.ts';
import { createPullWorker } from '../../lib/index.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { insertPullRows, memoryLogger, readPullRows } from './pull-fixtures.ts';

/**
 * The pull worker renews the claims due together in one statement; when that statement fails, it
 * renews each row with a statement of its own. A statement that fails for one row (a dropped
 * connection) loses that row's claim only: the handler of another row, renewed by its own
 * statement in the same round, keeps running and completes.
 */
describe('pull worker: one row’s renewal statement fails', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({ database: { poolMax: 6 } });
  });
  after(async () => db.drop());

  it('aborts only that row’s handler; the other row completes', async () => {
    const [idA, idB] = await insertPullRows(db, 'renew', [{ key: 'a', aggregateId: 'A' }, { key: 'b', aggregateId: 'B' }]);
    const base = db.newDriver();
    let failedOnce = false;
    let sharedFailed = false;
    const renewedOk: string[] = [];
    const driver = Object.create(base, {
      // The round's shared statement fails once (the connection dropped under it)...
      inboxRenewMany: {
        value: async (...args: Parameters<Driver['inboxRenewMany']>) => {
          if (!sharedFailed) {
            sharedFailed = true;
            throw new Error('Connection terminated unexpectedly');
          }
          return base.inboxRenewMany(...args);
        },
      },
      // ... and so does A's own statement after it.
      pullRenew: {
        value: async (...args: Parameters<Driver['pullRenew']>) => {
          if (args[0].id === idA && !failedOnce) {
            failedOnce = true;
            throw new Error('Connection terminated unexpectedly');
          }
          const ok = await base.pullRenew(...args);
          if (ok) renewedOk.push(args[0].id);
          return ok;
        },
      },
    }) as Driver;
    const aborted: string[] = [];
    const metrics = new QueueBoxMetrics({ namespace: 'test', serviceName: 'test', write: () => {} });
    const worker = createPullWorker({
      driver,
      config: db.config,
      source: 'renew',
      leaseMs: 1500, // renewal every 500 ms
      concurrency: 2,
      batch: 2,
      metrics,
      logger: memoryLogger(),
      handler: async (message, { signal, transaction }) => {
        signal.addEventListener('abort', () => aborted.push(message.idempotencyKey));
        await new Promise((resolve) => setTimeout(resolve, 800)); // one renewal happens meanwhile
        if (signal.aborted) return;
        await transaction(async () => {});
      },
    });
    const summary = await worker.runOnce();
    const rows = await readPullRows(db, 'renew');
    const stateOf = (id: string) => rows.find((r) => r.id === id)!.state;
    assert.ok(sharedFailed, 'the shared renewal statement failed once');
    assert.ok(failedOnce, 'the renewal of A failed once');
    assert.ok(renewedOk.includes(idB!), 'B’s own renewal statement succeeded');
    assert.deepEqual(
      { abortedHandlers: aborted, stateB: stateOf(idB!), completed: summary.completed, claimsLost: summary.claimsLost },
      { abortedHandlers: ['a'], stateB: 'processed', completed: 1, claimsLost: 1 },
    );
    assert.equal(metrics.value('claimsLost', { component: 'pull' }), 1);
  });
});
