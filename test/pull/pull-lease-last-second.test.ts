/**
 * A pull worker inside a Lambda invocation renews its leases in the invocation's last second too.
 * With `leaseMs` of 1 s, renewals stopped once less than a second was left (the claim's floor),
 * so the lease last granted ended about a third of a second before the invocation while the
 * handler still ran: another worker could claim the message and run it at the same time.
 *
 * `runOnce` gives up on the handler `GIVE_UP_BEFORE_END_MS` (500 ms) before the invocation's end
 * (so that it returns before that end); a handler deaf to its signal runs on into the last second
 * all the same, and its row stays out of other workers' reach until the invocation's end.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createPullWorker } from '../../lib/index.ts';
import { sleep } from '../../lib/runtime/deadline.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { fakeLambdaContext } from '../helpers/lambda-context.ts';
import { waitUntil } from '../helpers/wait.ts';
import { insertPullRows, memoryLogger, readPullRows } from './pull-fixtures.ts';

describe("a pull worker's lease in the invocation's last second", () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({ lambda: { deadlineMarginMs: 1000 } });
  });
  after(async () => db.drop());

  it('lasts while the handler runs, up to the end of the invocation; no other worker can claim the message', async () => {
    await insertPullRows(db, 'slow', [{ key: 's1' }]);
    const context = fakeLambdaContext({ timeoutMs: 2000 });
    let started = false;
    const worker = createPullWorker({
      driver: db.driver,
      config: db.config,
      source: 'slow',
      leaseMs: 1000,
      logger: memoryLogger(),
      metrics: false,
      handler: async () => {
        started = true;
        await sleep(1750);
      },
    });
    const run = worker.runOnce({ context });
    await waitUntil('the handler runs', () => started);
    await waitUntil('less than 250 ms of the invocation is left', () => context.getRemainingTimeInMillis() <= 250);
    const [during] = await db.query<{ state: string; ahead_ms: number }>(
      `SELECT state, EXTRACT(EPOCH FROM lease_expires_at - clock_timestamp())::float8 * 1000 AS ahead_ms FROM "${db.schema}".inbox WHERE source = 'slow'`,
    );
    assert.equal(during!.state, 'processing');
    assert.ok(during!.ahead_ms > 0, `the lease ended ${-during!.ahead_ms} ms ago with the handler still running`);
    const other = createPullWorker({ driver: db.newDriver(), config: db.config, source: 'slow', logger: memoryLogger(), metrics: false, handler: async () => {} });
    const second = await other.runOnce();
    assert.equal(second.claimed, 0, 'another worker claimed the message while its handler ran');
    const summary = await run;
    // Given up on 500 ms before the invocation's end: left to its lease, completed by no one.
    assert.deepEqual([summary.claimed, summary.completed, summary.abandoned], [1, 0, 1]);
    const [row] = await readPullRows(db, 'slow');
    assert.deepEqual([row!.state, row!.attempt], ['processing', 0]);
  });
});
