import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createPullWorker } from '../../lib/index.ts';
import type { Driver } from '../../lib/db/driver.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { waitUntil } from '../helpers/wait.ts';
import { insertPullRows, memoryLogger, readPullRows } from './pull-fixtures.ts';

/**
 * A container frozen while a pull worker's claim is on its way resumes past its invocation's end:
 * the claim is not sent, and `runOnce` returns its summary instead of throwing.
 */
describe('pull runOnce: a claim reached after the invocation ended', () => {
  let db: TestDatabase;
  before(async () => {
    // concurrency 3 on the driver's pool: 3 + 1 connections.
    db = await createTestDatabase({ lambda: { deadlineMarginMs: 1000 }, database: { poolMax: 4 } });
  });
  after(async () => db.drop());

  it('returns with its summary, not an error', { timeout: 60_000 }, async () => {
    await insertPullRows(db, 'frozen', Array.from({ length: 3 }, (_, i) => ({ key: `m${i}` })));
    const ends = Date.now() + 20_000;
    let frozenMs = 0;
    const context = { getRemainingTimeInMillis: () => ends - Date.now() - frozenMs };
    let claims = 0;
    const base = db.newDriver();
    const driver: Driver = Object.create(base, {
      pullClaimMany: {
        value: async (p: Parameters<Driver['pullClaimMany']>[0]) => {
          // The second claim passed the worker's checks after the first batch was handled; then
          // the container is frozen past its invocation's end.
          if (++claims === 2) {
            await waitUntil('the first batch is handled', async () => (await readPullRows(db, 'frozen')).every((r) => r.state === 'processed'));
            frozenMs = 60_000;
          }
          return base.pullClaimMany(p);
        },
      },
    });
    const worker = createPullWorker({ driver, config: db.config, source: 'frozen', leaseMs: 30_000, batch: 3, concurrency: 3, logger: memoryLogger(), metrics: false, handler: async () => {} });
    const summary = await worker.runOnce({ context });
    assert.equal(claims, 2);
    assert.deepEqual({ claimed: summary.claimed, completed: summary.completed }, { claimed: 3, completed: 3 });
  });
});
