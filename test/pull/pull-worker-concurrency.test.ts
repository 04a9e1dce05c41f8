import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createPullWorker, type PullMessage, type PullRunSummary } from '../../lib/index.ts';
import { sleep } from '../../lib/runtime/deadline.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { insertPullRows, memoryLogger, readPullRows } from './pull-fixtures.ts';

describe('pull workers running at once', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({ database: { poolMax: 4 } });
    await db.query(`CREATE TABLE "${db.schema}".handled (idempotency_key text PRIMARY KEY, aggregate_id text, worker int)`);
  });
  after(async () => db.drop());

  it('get disjoint rows, never two rows of one aggregate at once, and handle each aggregate in receive order', async () => {
    const specs = [];
    for (let r = 0; r < 10; r++) for (let a = 0; a < 10; a++) specs.push({ key: `agg${a}-${r}`, aggregateId: `agg${a}` });
    for (let n = 0; n < 20; n++) specs.push({ key: `free-${n}` });
    await insertPullRows(db, 'orders', specs);

    const inFlight = new Map<string, number>();
    let maxInFlightPerAggregate = 0;
    let maxInFlightOverall = 0;
    let running = 0;
    const handledOrder = new Map<string, string[]>();
    const handledKeys: string[] = [];

    const workers = Array.from({ length: 4 }, (_, index) =>
      createPullWorker({
        driver: db.newDriver(),
        source: 'orders',
        concurrency: 2,
        batch: 5,
        pollMs: 20,
        logger: memoryLogger(),
        metrics: false,
        handler: async (message: PullMessage, { transaction }) => {
          const aggregate = message.aggregateId;
          running++;
          maxInFlightOverall = Math.max(maxInFlightOverall, running);
          if (aggregate) {
            const n = (inFlight.get(aggregate) ?? 0) + 1;
            inFlight.set(aggregate, n);
            maxInFlightPerAggregate = Math.max(maxInFlightPerAggregate, n);
            handledOrder.set(aggregate, [...(handledOrder.get(aggregate) ?? []), message.idempotencyKey]);
          }
          handledKeys.push(message.idempotencyKey);
          await sleep(1 + Math.floor(Math.random() * 4));
          await transaction(async (tx) => {
            await tx.query(`INSERT INTO "${db.schema}".handled VALUES ($1, $2, $3)`, [message.idempotencyKey, aggregate, index]);
            // The handler's work ends here; the worker's completion and COMMIT follow.
            if (aggregate) inFlight.set(aggregate, inFlight.get(aggregate)! - 1);
            running--;
          });
        },
      }),
    );
    const summaries: PullRunSummary[] = await Promise.all(workers.map((w) => w.runOnce()));

    assert.equal(handledKeys.length, 120, 'every row handled once');
    assert.equal(new Set(handledKeys).size, 120, 'no row handled twice');
    assert.equal(maxInFlightPerAggregate, 1, 'never two rows of one aggregate at once');
    assert.ok(maxInFlightOverall > 1, 'workers really ran at the same time');
    for (let a = 0; a < 10; a++) {
      assert.deepEqual(handledOrder.get(`agg${a}`), Array.from({ length: 10 }, (_, r) => `agg${a}-${r}`), `agg${a} in receive order`);
    }
    assert.equal(summaries.reduce((n, s) => n + s.completed, 0), 120);
    assert.equal(summaries.reduce((n, s) => n + s.claimsLost + s.retried + s.dead, 0), 0);
    assert.ok(summaries.filter((s) => s.completed > 0).length > 1, 'more than one worker got work');
    const rows = await readPullRows(db, 'orders');
    assert.ok(rows.every((r) => r.state === 'processed'));
    const [{ n }] = (await db.query<{ n: string }>(`SELECT count(*) AS n FROM "${db.schema}".handled`)) as [{ n: string }];
    assert.equal(Number(n), 120);
  });
});
