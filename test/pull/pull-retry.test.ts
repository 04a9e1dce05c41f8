import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createPullWorker, type PullHandler } from '../../lib/index.ts';
import type pg from 'pg';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { insertPullRows, makeDue, memoryLogger, readPullRows } from './pull-fixtures.ts';

describe('pull handler outcomes: completion, retry and dead-lettering', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({ database: { poolMax: 3 } });
    await db.query(`CREATE TABLE "${db.schema}".payments (idempotency_key text PRIMARY KEY)`);
  });
  after(async () => db.drop());

  const payments = async () => (await db.query<{ idempotency_key: string }>(`SELECT idempotency_key FROM "${db.schema}".payments ORDER BY 1`)).map((r) => r.idempotency_key);
  const worker = (source: string, handler: PullHandler<pg.PoolClient>, retry = {}) =>
    createPullWorker({ driver: db.driver, source, handler, retry, logger: memoryLogger(), metrics: false });

  it('rolls the business write back with the failed handler and schedules a retry on the database clock', async () => {
    await insertPullRows(db, 'atomic', [{ key: 'p1' }]);
    const summary = await worker('atomic', async (message, { transaction }) => {
      await transaction(async (tx) => {
        await tx.query(`INSERT INTO "${db.schema}".payments VALUES ($1)`, [message.idempotencyKey]);
        throw new Error('card declined');
      });
    }).runOnce();
    assert.deepEqual([summary.claimed, summary.retried, summary.completed], [1, 1, 0]);
    assert.deepEqual(await payments(), []);
    const [row] = await readPullRows(db, 'atomic');
    assert.deepEqual([row!.state, row!.attempt, row!.last_error], ['pending', 1, 'Error: card declined']);
    // 1000 ms × 2^0 plus up to 20 % jitter, measured a few ms after the retry was written.
    assert.ok(row!.due_in_ms > 800 && row!.due_in_ms <= 1200, `due in 1000–1200 ms, got ${row!.due_in_ms}`);
  });

  it('commits the business write and the completion together', async () => {
    await insertPullRows(db, 'commit', [{ key: 'p2' }]);
    const summary = await worker('commit', async (message, { transaction }) => {
      await transaction(async (tx) => {
        await tx.query(`INSERT INTO "${db.schema}".payments VALUES ($1)`, [message.idempotencyKey]);
      });
    }).runOnce();
    assert.equal(summary.completed, 1);
    assert.deepEqual(await payments(), ['p2']);
    const [row] = await readPullRows(db, 'commit');
    assert.equal(row!.state, 'processed');
  });

  it('retries with doubling, capped delays and dead-letters after maxAttempts handler runs, error redacted', async () => {
    await insertPullRows(db, 'policy', [{ key: 'p3', aggregateId: 'P' }, { key: 'p4', aggregateId: 'P' }]);
    const runs: Array<[string, number]> = [];
    const w = worker(
      'policy',
      async (message) => {
        runs.push([message.idempotencyKey, message.attempt]);
        if (message.idempotencyKey === 'p3') throw new Error('upstream said token=abc123secret');
      },
      { maxAttempts: 3, baseDelayMs: 1000, maxDelayMs: 2100, jitter: 0.2 },
    );
    const dues: number[] = [];
    for (let pass = 0; pass < 3; pass++) {
      await w.runOnce();
      const [row] = await readPullRows(db, 'policy');
      if (row!.state === 'pending') dues.push(row!.due_in_ms);
      await makeDue(db, 'policy');
    }
    const [p3, p4] = await readPullRows(db, 'policy');
    assert.ok(dues[0]! > 800 && dues[0]! <= 1200, `first retry after 1000–1200 ms, got ${dues[0]}`);
    assert.ok(dues[1]! > 1800 && dues[1]! <= 2100, `second retry after 2000 ms capped at 2100 ms, got ${dues[1]}`);
    assert.equal(dues.length, 2);
    assert.deepEqual([p3!.state, p3!.attempt], ['dead', 2]);
    assert.ok(p3!.last_error!.startsWith('gave up after 3 of 3 attempts: Error: upstream said token=***'), p3!.last_error!);
    assert.ok(!p3!.last_error!.includes('abc123secret'));
    // p4 waited behind p3 for the whole retry sequence, then ran once the dead row released the aggregate.
    assert.deepEqual(runs, [['p3', 0], ['p3', 1], ['p3', 2], ['p4', 0]]);
    assert.equal(p4!.state, 'processed');
  });

  it('completes a handler that never opens a transaction, and keeps a row processed when the handler throws after commit', async () => {
    await insertPullRows(db, 'plain', [{ key: 'p5' }, { key: 'p6' }]);
    const summary = await worker('plain', async (message, { transaction }) => {
      if (message.idempotencyKey === 'p6') {
        await transaction(async (tx) => tx.query(`INSERT INTO "${db.schema}".payments VALUES ($1)`, [message.idempotencyKey]));
        throw new Error('after commit');
      }
    }).runOnce();
    assert.deepEqual([summary.completed, summary.retried], [2, 0]);
    assert.deepEqual((await readPullRows(db, 'plain')).map((r) => [r.state, r.attempt]), [['processed', 0], ['processed', 0]]);
    assert.ok((await payments()).includes('p6'));
  });

  it('retries when the handler swallows its failed transaction and returns', async () => {
    await insertPullRows(db, 'swallow', [{ key: 'p7' }]);
    const summary = await worker('swallow', async (_message, { transaction }) => {
      await transaction(async () => {
        throw new Error('constraint violated');
      }).catch(() => undefined);
    }).runOnce();
    assert.equal(summary.retried, 1);
    const [row] = await readPullRows(db, 'swallow');
    assert.deepEqual([row!.state, row!.attempt, row!.last_error], ['pending', 1, 'Error: constraint violated']);
  });
});
