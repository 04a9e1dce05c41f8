/**
 * A dead mark that committed but whose answer was lost (its connection reset after the commit: a
 * failover, a proxy restart) is sent again on another connection of the pool. The dead mark keeps
 * the claim's token, so the mark sent again recognises the row it made dead: the pull client
 * answers `{ ok: true }` (before: `ownership-lost`, a claim counted lost, the dead-letter neither
 * logged nor counted as one), and the outbox's and relay's dead marks count the row as dead.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type pg from 'pg';
import { PostgresDriver } from '../../lib/db/postgres/postgres-driver.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import { createPullClient } from '../../lib/pull/pull-client.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { poolLosingFirstAnswer } from '../helpers/lost-answer.ts';
import { insertPullRows, readPullRows } from './pull-fixtures.ts';

/** A driver whose first dead mark runs and commits, then fails as a reset socket does. */
function driverLosingFirstDeadAnswer(db: TestDatabase): { driver: PostgresDriver; pool: pg.Pool; cuts: () => number } {
  const { pool, cuts } = poolLosingFirstAnswer(db.config.database, db.url, (text) => text?.includes("SET state = 'dead'") === true);
  return { driver: new PostgresDriver({ config: db.config, url: db.url, pool }), pool, cuts };
}

describe('a dead mark whose answer was lost after it committed', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase();
  });
  after(async () => db.drop());

  it('pull: dead answers ok, counts no lost claim, and the row is dead with its reason', async () => {
    const [id] = await insertPullRows(db, 'lost-dead', [{ key: 'k1', aggregateId: 'A' }]);
    const { driver, pool, cuts } = driverLosingFirstDeadAnswer(db);
    const metrics = new QueueBoxMetrics({ namespace: 't', serviceName: 't', write: () => {} });
    try {
      const client = createPullClient(driver, { metrics });
      const [message] = await client.claim('lost-dead', { batch: 1, leaseMs: 30_000 });
      assert.equal(message?.id, id);
      assert.deepEqual(await client.dead(message!.claim, new Error('poison')), { ok: true });
      assert.equal(cuts(), 1, 'the first mark committed and its answer was lost');
      assert.equal(metrics.value('claimsLost', { component: 'pull' }), 0);
      const [row] = await readPullRows(db, 'lost-dead');
      assert.deepEqual([row!.state, row!.last_error], ['dead', 'Error: poison']);
    } finally {
      await driver.close();
      await pool.end();
    }
  });

  it('outbox: the dead mark counts the row as dead', async () => {
    const [row] = await db.query<{ id: string }>(`INSERT INTO "${db.schema}".outbox (topic, payload) VALUES ('t', '{}') RETURNING id`);
    const { driver, pool, cuts } = driverLosingFirstDeadAnswer(db);
    try {
      const [claimed] = await driver.outboxClaimMany({ limit: 1, leaseMs: 30_000 });
      assert.equal(claimed?.id, row!.id);
      const dead = await driver.outboxMarkDeadMany({ items: [{ id: claimed!.id, token: claimed!.claimToken, error: 'poison' }] });
      assert.equal(cuts(), 1, 'the first mark committed and its answer was lost');
      assert.deepEqual(dead, [row!.id]);
      const [after] = await db.query<{ state: string }>(`SELECT state FROM "${db.schema}".outbox WHERE id = $1`, [row!.id]);
      assert.equal(after!.state, 'dead');
    } finally {
      await driver.close();
      await pool.end();
    }
  });
});
