/**
 * A relay forward queued behind a lock on the outbox table (a migration's `ALTER TABLE` or
 * `CREATE INDEX`, `VACUUM FULL`, an operator's `LOCK`) ends with the invocation: the fenced
 * single-trip write gets the invocation's time left as its `statement_timeout`, set for its own
 * implicit transaction in the same round trip. The lease bound inside the statement cannot do it:
 * the table's lock is taken before the statement executes. Nothing of the invocation is left on
 * the server when the handler returns, and the row is left to its lease, not forwarded.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { createInboxRelay } from '../../functions/inbox-relay.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { setContainer } from '../../lib/runtime/container.ts';
import { createInvocationContext } from '../../lib/runtime/invocation-context.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';

describe('relay forward behind a lock on the outbox table', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({
      inbox: { relay: { claimTimeoutMs: 60_000 }, sources: { shop: { type: 'http', path: '/shop', auth: { type: 'none' } } } },
      lambda: { deadlineMarginMs: 1000 },
    });
  });
  after(async () => {
    setContainer(undefined);
    await db.drop();
  });

  it('leaves no statement of the invocation running on the server when the handler returns', { timeout: 60_000 }, async () => {
    const driver = db.newDriver();
    const pids = new Set<number>();
    driver.pool.on('connect', (client: pg.PoolClient & { processID?: number }) => void (client.processID && pids.add(client.processID)));
    setContainer({ config: db.config, driver, logger: createLogger({ serviceName: 'queuebox', logLevel: 'SILENT' }), env: {}, writeMetrics: () => {} });
    await db.driver.inboxInsert({ source: 'shop', idempotencyKey: 'k1', aggregateId: 'A', eventType: 'created', payload: { n: 1 }, consumption: 'push' });

    const locker = new pg.Client({ connectionString: db.url });
    await locker.connect();
    try {
      await locker.query('BEGIN');
      await locker.query(`LOCK TABLE "${db.schema}".outbox IN ACCESS EXCLUSIVE MODE`);
      const summary = await createInboxRelay({ invoke: async () => {} })({ source: 'aws.events' }, createInvocationContext({ timeoutMs: 3000 }));
      const running = await db.query<{ query: string }>(`SELECT left(query, 80) AS query FROM pg_stat_activity WHERE pid = ANY($1::int[]) AND state <> 'idle'`, [[...pids]]);
      assert.deepEqual(running, [], 'no statement of the invocation is still running on the server');
      assert.equal(summary.forwarded, 0);
      assert.equal(summary.claimed, 1);
    } finally {
      await locker.query('ROLLBACK').catch(() => {});
      await locker.end();
    }
    const [row] = await db.query<{ state: string; attempt: number }>(`SELECT state, attempt FROM "${db.schema}".inbox`);
    assert.deepEqual([row!.state, row!.attempt], ['processing', 0], 'left to its lease: the reclaim decides');
    const [outbox] = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".outbox`);
    assert.equal(outbox!.n, 0, 'nothing forwarded');
  });
});
