/**
 * The backlog gauges' count (`outboxStats` / `inboxStats` with `pendingOnly`) runs without
 * parallel workers: one simple query of two statements, `SET LOCAL max_parallel_workers_per_gather
 * = 0` and the count, in one round trip — directly, and inside the transaction a statement budget
 * opens. Proven on a plan that goes parallel without the setting.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { withStatementBudget } from '../../lib/db/statement-budget.ts';
import { pendingStatsSql } from '../../lib/db/postgres/table-reads.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';

/** Settings under which the planner takes a parallel plan for any scan of some size. */
const FAVOUR_PARALLEL = `SET LOCAL parallel_setup_cost = 0; SET LOCAL parallel_tuple_cost = 0;
  SET LOCAL min_parallel_table_scan_size = 0; SET LOCAL min_parallel_index_scan_size = 0; SET LOCAL max_parallel_workers_per_gather = 2`;

describe('backlog gauges: the pending count runs without parallel workers (PostgreSQL)', () => {
  let db: TestDatabase;
  const notices: string[] = [];
  before(async () => {
    db = await createTestDatabase();
    await db.query(`INSERT INTO "${db.schema}".outbox (topic, payload) SELECT 't', '{}' FROM generate_series(1, 5000)`);
    await db.query(`INSERT INTO "${db.schema}".inbox (source, idempotency_key, payload) SELECT 's', 'k' || g, '{}' FROM generate_series(1, 300) g`);
    await db.query(`ANALYZE "${db.schema}".outbox`);
  });
  after(async () => db.drop());

  it('the statement as sent plans no Gather where the same count without its first statement does', async () => {
    const text = pendingStatsSql(`"${db.schema}".outbox`);
    const [setting, select] = text.split(/;\s*\n/);
    assert.match(setting!, /^SET LOCAL max_parallel_workers_per_gather = 0$/);
    const plan = async (statements: string) => {
      const client = await db.pool.connect();
      try {
        await client.query(`BEGIN; ${FAVOUR_PARALLEL}`);
        if (statements !== '') await client.query(statements);
        const rows = (await client.query<{ 'QUERY PLAN': string }>(`EXPLAIN ${select}`)).rows;
        return rows.map((r) => r['QUERY PLAN']).join('\n');
      } finally {
        await client.query('ROLLBACK');
        client.release();
      }
    };
    assert.match(await plan(''), /Gather/, 'without the setting this count plans parallel workers (so the check below can fail)');
    assert.doesNotMatch(await plan(setting!), /Gather/);
  });

  it('outboxStats and inboxStats with pendingOnly count right, directly and under a statement budget, with no warning', async () => {
    const driver = db.newDriver();
    driver.pool.on('connect', (client) => client.on('notice', (notice) => notices.push(`${notice.severity ?? ''} ${notice.message}`)));
    // The listener hears warnings: a SET LOCAL sent alone, outside any transaction, gets one.
    await driver.pool.query('SET LOCAL lock_timeout = 1000');
    assert.match(notices.join('\n'), /WARNING SET LOCAL can only be used in transaction blocks/);
    notices.length = 0;
    for (const budgeted of [false, true]) {
      const read = async () => ({ outbox: await driver.outboxStats({ pendingOnly: true }), inbox: await driver.inboxStats({ pendingOnly: true }) });
      // A budget below the connection's statement_timeout: each read runs in `BEGIN; SET LOCAL statement_timeout …`.
      const stats = budgeted ? await withStatementBudget(() => 5_000, read) : await read();
      assert.deepEqual(stats.outbox.counts, { pending: 5000 }, `budgeted ${budgeted}`);
      assert.deepEqual(stats.inbox.counts, { pending: 300 }, `budgeted ${budgeted}`);
      assert.ok(stats.outbox.oldestPendingAgeSeconds >= 0 && stats.outbox.oldestPendingAgeSeconds < 60);
    }
    assert.deepEqual(notices, [], 'SET LOCAL inside the query string is taken without a warning');
  });
});
