/**
 * A pull retry or release (back to `pending`) that committed but whose answer was lost (its
 * connection reset after the commit) is sent again on another connection. The write keeps the
 * claim's token on the pending row, so the write sent again recognises the row its first run
 * wrote: the client answers `{ ok: true }` (before: `ownership-lost` and a claim counted lost),
 * and the attempt is charged once.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { PostgresDriver } from '../../lib/db/postgres/postgres-driver.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import { createPullClient } from '../../lib/pull/pull-client.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { poolLosingFirstAnswer } from '../helpers/lost-answer.ts';
import { insertPullRows, readPullRows } from './pull-fixtures.ts';

const backToPending = (text: string | undefined) => text !== undefined && /SET state = 'pending',/.test(text);

describe('a pull retry or release whose answer was lost after it committed', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase();
  });
  after(async () => db.drop());

  for (const write of ['retry', 'release'] as const) {
    it(`${write}: answers ok, counts no lost claim, and writes the row once`, async () => {
      const source = `lost-${write}`;
      await insertPullRows(db, source, [{ key: 'k1', aggregateId: 'A' }]);
      const { pool, cuts } = poolLosingFirstAnswer(db.config.database, db.url, backToPending);
      const driver = new PostgresDriver({ config: db.config, url: db.url, pool });
      const metrics = new QueueBoxMetrics({ namespace: 't', serviceName: 't', write: () => {} });
      let message: Awaited<ReturnType<ReturnType<typeof createPullClient>['claim']>>[number] | undefined;
      try {
        const client = createPullClient(driver, { metrics });
        [message] = await client.claim(source, { batch: 1, leaseMs: 30_000 });
        const answer = write === 'retry' ? await client.retry(message!.claim, 0, new Error('busy')) : await client.release(message!.claim);
        assert.deepEqual(answer, { ok: true });
        assert.equal(cuts(), 1, 'the first write committed and its answer was lost');
        assert.equal(metrics.value('claimsLost', { component: 'pull' }), 0);
        const [row] = await readPullRows(db, source);
        assert.deepEqual([row!.state, row!.attempt], ['pending', write === 'retry' ? 1 : 0], 'charged once at most');
        // A new claim takes the row and releases it: pending under another token.
        const [again] = await client.claim(source, { batch: 1, leaseMs: 30_000 });
        assert.equal(again?.id, message!.id);
        assert.deepEqual(await client.release(again!.claim), { ok: true });
      } finally {
        await driver.close();
        await pool.end();
      }
      // The first claim's write, its answer lost, is sent again (the text that also matches a
      // pending row): the row is pending under another token, so neither run changes it.
      const stale = poolLosingFirstAnswer(db.config.database, db.url, backToPending);
      const staleDriver = new PostgresDriver({ config: db.config, url: db.url, pool: stale.pool });
      try {
        const client = createPullClient(staleDriver);
        const late = write === 'retry' ? await client.retry(message!.claim, 0, new Error('late')) : await client.release(message!.claim);
        assert.equal(late.ok, false, 'the first claim is over');
        assert.equal(stale.cuts(), 1, 'the write was sent again');
        const [row] = await readPullRows(db, source);
        assert.deepEqual([row!.state, row!.attempt], ['pending', write === 'retry' ? 1 : 0]);
      } finally {
        await staleDriver.close();
        await stale.pool.end();
      }
    });
  }
});
