/**
 * Review (attempts): a pull worker's renewal statement that fails once (a dropped connection)
 * counts as the loss of every claim it carried, the queued rows' too: they are never started and
 * never released, so their leases run out and the next claim charges each an attempt. At
 * `retry.maxAttempts: 1` they are dead-lettered without their handler ever running.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Driver } from '../../lib/db/driver.ts';
import { createPullWorker } from '../../lib/index.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { fakeLambdaContext } from '../helpers/lambda-context.ts';
import { waitUntil } from '../helpers/wait.ts';
import { insertPullRows, memoryLogger, readPullRows } from '../pull/pull-fixtures.ts';

describe('pull rows queued behind a handler when a renewal fails', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({});
  });
  after(async () => db.drop());

  it('get a handler run before they are dead-lettered (maxAttempts 1)', async () => {
    const ids = await insertPullRows(db, 'q', [{ key: 'q-1' }, { key: 'q-2' }, { key: 'q-3' }]);
    const base = db.newDriver();
    let renewals = 0;
    const driver = Object.create(base, {
      pullRenew: {
        value: async (...args: Parameters<Driver['pullRenew']>) => {
          if (renewals++ === 0) throw new Error('connection terminated unexpectedly');
          return base.pullRenew(...args);
        },
      },
    }) as Driver;
    const ran: string[] = [];
    const worker = () =>
      createPullWorker({
        driver,
        config: db.config,
        source: 'q',
        leaseMs: 1000,
        batch: 3,
        concurrency: 1,
        retry: { maxAttempts: 1 },
        logger: memoryLogger(),
        handler: async (message, { signal, transaction }) => {
          ran.push(message.id);
          // Long enough for a renewal (every third of the lease).
          await new Promise((resolve) => setTimeout(resolve, 600));
          if (signal.aborted) return;
          await transaction(async () => {});
        },
      });
    await worker().runOnce({ context: fakeLambdaContext({ timeoutMs: 20_000 }) });
    await waitUntil('no live lease is left', async () => (await readPullRows(db, 'q')).every((r) => r.state !== 'processing' || r.lease_expires_at! <= new Date()));
    await worker().runOnce({ context: fakeLambdaContext({ timeoutMs: 20_000 }) });
    const rows = await readPullRows(db, 'q');
    const neverRan = ids.filter((id) => !ran.includes(id));
    assert.deepEqual(
      neverRan.map((id) => rows.find((r) => r.id === id)!.state),
      neverRan.map(() => 'processed'),
      `rows dead-lettered without a handler run: ${JSON.stringify(rows.map((r) => [r.state, r.attempt, r.last_error]))}`,
    );
    await base.close?.();
  });
});
