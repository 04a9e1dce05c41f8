/**
 * The backlog gauges' count (`outboxStats` / `inboxStats` with `pendingOnly`) runs without
 * parallel workers: one simple query of two statements, `SET LOCAL max_parallel_workers_per_gather
 * = 0` and the count, in one round trip — directly, and inside the transaction a statement budget
 * opens — with no bind values (pg's native client sends even an empty values array as a
 * parameterized query, which refuses two statements).
 *
 * The plans are the ones the driver's statements executed: its pool's connections load
 * `auto_explain` and log every plan to the client, under settings that make the planner choose
 * parallel workers for any scan of some size.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { PostgresDriver } from '../../lib/db/postgres/postgres-driver.ts';
import { withStatementBudget } from '../../lib/db/statement-budget.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';

/** Connection settings: every executed plan logged to the client; parallel plans as cheap as they get. */
const OBSERVED = [
  'session_preload_libraries=auto_explain',
  'auto_explain.log_min_duration=0',
  'client_min_messages=log',
  'parallel_setup_cost=0',
  'parallel_tuple_cost=0',
  'min_parallel_table_scan_size=0',
  'min_parallel_index_scan_size=0',
  'max_parallel_workers_per_gather=2',
]
  .map((setting) => `-c ${setting}`)
  .join(' ');

describe('backlog gauges: the pending count runs without parallel workers (PostgreSQL)', () => {
  let db: TestDatabase;
  let pool: pg.Pool;
  let driver: PostgresDriver;
  /** Server messages the observed pool's connections received (the plans, and any warning). */
  const notices: Array<{ severity: string; message: string }> = [];
  /** Each text the observed pool's clients were given, and how many arguments besides a callback (1: no values). */
  const sent: Array<{ text: string; args: number }> = [];
  before(async () => {
    db = await createTestDatabase();
    await db.query(`INSERT INTO "${db.schema}".outbox (topic, payload) SELECT 't', '{}' FROM generate_series(1, 5000)`);
    await db.query(`INSERT INTO "${db.schema}".inbox (source, idempotency_key, payload) SELECT 's', 'k' || g, '{}' FROM generate_series(1, 300) g`);
    await db.query(`ANALYZE "${db.schema}".outbox; ANALYZE "${db.schema}".inbox`);
    pool = new pg.Pool({ connectionString: db.url, max: 2, options: OBSERVED });
    pool.on('error', () => {});
    pool.on('connect', (client) => {
      client.on('notice', (notice) => notices.push({ severity: notice.severity ?? '', message: notice.message ?? '' }));
      const query = client.query.bind(client) as (...args: unknown[]) => unknown;
      (client as unknown as { query: (...args: unknown[]) => unknown }).query = (...args: unknown[]) => {
        if (typeof args[0] === 'string') sent.push({ text: args[0], args: args.filter((a) => a !== undefined && typeof a !== 'function').length });
        return query(...args);
      };
    });
    driver = new PostgresDriver({ config: db.config, url: db.url, pool });
  });
  after(async () => {
    await driver.close();
    await pool.end();
    await db.drop();
  });

  const plans = () => notices.filter((n) => n.severity === 'LOG' && /Query Text:/.test(n.message)).map((n) => n.message);

  it('a count through the observed pool plans parallel workers (so the checks below can fail)', async () => {
    notices.length = 0;
    await pool.query(`SELECT count(*) FROM "${db.schema}".outbox WHERE state = 'pending'`);
    assert.match(plans().join('\n'), /Gather/);
  });

  for (const budgeted of [false, true]) {
    it(`outboxStats and inboxStats with pendingOnly count right in plans without parallel workers, sent with no bind values, no warning${budgeted ? ' (under a statement budget: BEGIN; SET LOCAL statement_timeout …)' : ''}`, async () => {
      notices.length = 0;
      sent.length = 0;
      const read = async () => ({ outbox: await driver.outboxStats({ pendingOnly: true }), inbox: await driver.inboxStats({ pendingOnly: true }) });
      // A budget below the connection's statement_timeout: each read runs in a transaction of its own.
      const stats = budgeted ? await withStatementBudget(() => 5_000, read) : await read();
      assert.deepEqual(stats.outbox.counts, { pending: 5000 });
      assert.deepEqual(stats.inbox.counts, { pending: 300 });
      assert.ok(stats.outbox.oldestPendingAgeSeconds >= 0 && stats.outbox.oldestPendingAgeSeconds < 60);
      // The plans of the counts themselves (an Aggregate node): a statement sent in the same
      // query string (QueueBox's settings `SELECT`) is logged with the whole string as its text.
      const counts = plans().filter((p) => /count\(\*\)/.test(p) && /\bAggregate\b/.test(p));
      assert.equal(counts.length, 2, 'one executed plan per read');
      for (const plan of counts) assert.doesNotMatch(plan, /Gather|Parallel/, plan);
      const reads = sent.filter((s) => /SET LOCAL max_parallel_workers_per_gather = 0;/.test(s.text));
      assert.equal(reads.length, 2);
      assert.deepEqual(
        reads.map((s) => s.args),
        [1, 1],
        'the text alone: no values argument',
      );
      if (budgeted) assert.ok(sent.some((s) => /^BEGIN; SET LOCAL statement_timeout/.test(s.text)), 'the budget opened a transaction');
      assert.deepEqual(
        notices.filter((n) => n.severity !== 'LOG'),
        [],
      );
    });
  }
});
