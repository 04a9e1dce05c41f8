/**
 * `database.preparedStatements`: after five executions PostgreSQL keeps a prepared statement's
 * generic plan, and keeps it until the table's statistics change (ANALYZE, autovacuum). A plan
 * made while the queue was nearly empty — sequential scans, hash joins — would serve a backlog
 * that arrives before the next ANALYZE (measured: 35 s claims at 1,000,000 rows). Every prepared
 * claim is therefore planned under the claim functions' plan settings (`PINNED_CLAIM_PLAN`),
 * sent with it in its round trip, for its transaction alone.
 *
 * The tables here are never analyzed (autovacuum off), so the plans kept on a few rows meet the
 * backlog. The plan each claim runs is read from `auto_explain` on the driver's one connection
 * (`poolMax: 1`), and `pg_prepared_statements` says whether it was the generic plan kept. Not
 * from `EXPLAIN EXECUTE`: a server whose other sessions run much DDL (other test files) can
 * reset a connection's plan cache, and `EXPLAIN EXECUTE` would then plan anew without the
 * claim's settings, where the claim itself plans with them.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';

const LEASE = 60_000;

interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Shared Hit Blocks'?: number;
  'Shared Read Blocks'?: number;
  Plans?: PlanNode[];
}

/** Every node of a plan, as `Node Type` (with the relation for scans). */
function nodesOf(plan: PlanNode, out: string[] = []): string[] {
  out.push(plan['Relation Name'] === undefined ? plan['Node Type'] : `${plan['Node Type']} on ${plan['Relation Name']}`);
  for (const child of plan.Plans ?? []) nodesOf(child, out);
  return out;
}

/** What the claim functions' plan settings rule out (claim-functions.ts). */
const UNPINNED = /^(Seq Scan|Bitmap Heap Scan|Bitmap Index Scan|Hash Join|Hash|Merge Join|Materialize)\b/;

interface PreparedClaim {
  name: string;
  statement: string;
  generic: number;
  custom: number;
}

/** The prepared statements of the driver's connection (poolMax 1: the one that ran the claims). */
async function preparedClaims(db: TestDatabase): Promise<PreparedClaim[]> {
  const { rows } = await db.driver.pool.query<{ name: string; statement: string; generic_plans: string; custom_plans: string }>(
    'SELECT name, statement, generic_plans, custom_plans FROM pg_prepared_statements',
  );
  return rows.map((r) => ({ name: r.name, statement: r.statement, generic: Number(r.generic_plans), custom: Number(r.custom_plans) }));
}

async function preparedClaim(db: TestDatabase, which: (statement: string) => boolean): Promise<PreparedClaim> {
  const found = (await preparedClaims(db)).filter((s) => which(s.statement));
  assert.equal(found.length, 1, 'one prepared statement of that claim');
  return found[0]!;
}

/** Buffers the statement reads, planned now on a connection of the test's own (in a transaction rolled back). */
async function plannedBuffers(db: TestDatabase, text: string, values: unknown[]): Promise<number> {
  const client = await db.pool.connect();
  try {
    await client.query('BEGIN');
    const { rows } = await client.query<{ 'QUERY PLAN': Array<{ Plan: PlanNode }> }>(`EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${text}`, values);
    await client.query('ROLLBACK');
    return buffersOf(rows[0]!['QUERY PLAN'][0]!.Plan);
  } finally {
    client.release();
  }
}

function buffersOf(plan: PlanNode): number {
  return (plan['Shared Hit Blocks'] ?? 0) + (plan['Shared Read Blocks'] ?? 0);
}

/**
 * Has `auto_explain` report, to `notices`, the plan and buffers of every statement the driver's
 * connection runs from now on; false when it cannot be loaded here.
 */
async function explainDriverStatements(db: TestDatabase, notices: string[]): Promise<boolean> {
  const client = await db.driver.pool.connect();
  try {
    await client.query(`LOAD 'auto_explain'`);
  } catch {
    client.release();
    return false;
  }
  client.on('notice', (notice) => notices.push(String(notice.message)));
  for (const setting of ['auto_explain.log_min_duration = 0', `auto_explain.log_level = 'notice'`, 'auto_explain.log_format = json', 'auto_explain.log_analyze = on', 'auto_explain.log_buffers = on', 'client_min_messages = notice']) {
    await client.query(`SET ${setting}`);
  }
  client.release();
  return true;
}

/** The plan `auto_explain` reported last for `statement`. */
function reportedPlan(notices: string[], statement: string): PlanNode {
  for (let i = notices.length - 1; i >= 0; i--) {
    const notice = notices[i]!;
    if (!notice.startsWith('duration:')) continue;
    const report = JSON.parse(notice.slice(notice.indexOf('{'))) as { 'Query Text': string; Plan: PlanNode };
    if (report['Query Text'] === statement) return report.Plan;
  }
  assert.fail('auto_explain reported no plan of the statement');
}

interface Claim {
  which: (statement: string) => boolean;
  values: unknown[];
  /** Runs the claim through the driver; how many rows it took. */
  run: () => Promise<number>;
  /** PostgreSQL keeps a generic plan of it after five executions (the pull claim's `LIMIT $2` leaves that to its costs). */
  keepsGeneric: boolean;
}

describe('prepared claims planned on a nearly empty table, after a backlog arrives (PostgreSQL)', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({ database: { poolMax: 1, preparedStatements: true } });
    for (const table of ['outbox', 'inbox']) await db.query(`ALTER TABLE "${db.schema}".${table} SET (autovacuum_enabled = false)`);
  });
  after(async () => db.drop());

  it('the outbox, relay and pull claims run plans of index scans and nested loops, which read no more than the statement planned for the backlog', { timeout: 60_000 }, async (t) => {
    const notices: string[] = [];
    if (!(await explainDriverStatements(db, notices))) {
      t.skip('auto_explain cannot be loaded here: the plan a claim runs cannot be seen');
      return;
    }
    const outbox = `"${db.schema}".outbox`;
    const inbox = `"${db.schema}".inbox`;
    // A few rows. The window claim while the window fills (60 due rows per claim of 100), then
    // the full claim once it gives nothing; the relay and pull claims on 3 rows each.
    for (let i = 0; i < 7; i++) {
      await db.query(`INSERT INTO ${outbox} (topic, payload) SELECT 't', '{}' FROM generate_series(1, 60)`);
      assert.equal((await db.driver.outboxClaimMany({ limit: 100, leaseMs: LEASE })).length, 60);
    }
    for (let i = 0; i < 7; i++) assert.equal((await db.driver.outboxClaimMany({ limit: 100, leaseMs: LEASE })).length, 0);
    for (let i = 0; i < 7; i++) {
      for (const consumption of ['push', 'pull']) {
        await db.query(`INSERT INTO ${inbox} (source, idempotency_key, aggregate_id, payload, consumption) SELECT $1, $2 || g, 'a' || g, '{}', $1 FROM generate_series(1, 3) g`, [consumption, `few-${i}-`]);
      }
      assert.equal((await db.driver.inboxClaimPushMany({ limit: 100, leaseMs: LEASE })).length, 3);
      assert.equal((await db.driver.pullClaimMany({ source: 'pull', limit: 10, leaseMs: LEASE })).length, 3);
      await db.query(`UPDATE ${inbox} SET state = 'processed' WHERE state = 'processing'`);
    }
    const [windowStatement, fullStatement] = db.driver.claimStatements();
    const outboxClaim = () => db.driver.outboxClaimMany({ limit: 100, leaseMs: LEASE }).then((rows) => rows.length);
    // In claim order: the full claim first (the window gave nothing last), whose window fills
    // now, so the window claim next.
    const claims: Record<string, Claim> = {
      'outbox full': { which: (s) => s === fullStatement!.text, values: [LEASE, null, null, null, null], run: outboxClaim, keepsGeneric: true },
      'outbox window': { which: (s) => s === windowStatement!.text, values: [LEASE], run: outboxClaim, keepsGeneric: true },
      relay: { which: (s) => s.includes(`consumption = 'push'`), values: [LEASE], run: () => db.driver.inboxClaimPushMany({ limit: 100, leaseMs: LEASE }).then((rows) => rows.length), keepsGeneric: true },
      pull: { which: (s) => s.includes(`consumption = 'pull'`), values: ['pull', 10, LEASE], run: () => db.driver.pullClaimMany({ source: 'pull', limit: 10, leaseMs: LEASE }).then((rows) => rows.length), keepsGeneric: false },
    };
    for (const [name, claim] of Object.entries(claims)) {
      const prepared = await preparedClaim(db, claim.which);
      if (claim.keepsGeneric) assert.ok(prepared.generic >= 1, `the ${name} claim keeps a generic plan (${prepared.generic} generic, ${prepared.custom} custom)`);
    }

    // The backlog, in sequence order, never analyzed: 100,000 outbox rows, every other one
    // keyless and the rest over 100 keys; 20,000 push and 20,000 pull rows over 100 aggregates.
    await db.query(`DELETE FROM ${outbox}`);
    await db.query(`INSERT INTO ${outbox} (topic, key, payload) SELECT 't', CASE WHEN g % 2 = 1 THEN 'b' || (g % 100) END, '{}' FROM generate_series(1, 100000) g ORDER BY g`);
    await db.query(`DELETE FROM ${inbox}`);
    for (const consumption of ['push', 'pull']) {
      await db.query(`INSERT INTO ${inbox} (source, idempotency_key, aggregate_id, payload, consumption) SELECT $1, 'b' || g, 'b' || (g / 200), '{}', $1 FROM generate_series(1, 20000) g ORDER BY g`, [consumption]);
    }
    for (const [name, claim] of Object.entries(claims)) {
      const prepared = await preparedClaim(db, claim.which);
      const planned = await plannedBuffers(db, prepared.statement, claim.values);
      assert.ok((await claim.run()) > 0, `the ${name} claim took rows`);
      const after = await preparedClaim(db, claim.which);
      assert.equal(after.generic + after.custom, prepared.generic + prepared.custom + 1, `the ${name} claim ran once`);
      const kept = after.generic === prepared.generic + 1 ? 'kept' : 'new';
      if (claim.keepsGeneric && kept === 'new') t.diagnostic(`the ${name} claim's kept plan was gone (its connection's plan cache was reset): it ran a plan made now`);
      const plan = reportedPlan(notices, prepared.statement);
      const nodes = nodesOf(plan);
      assert.deepEqual(nodes.filter((n) => UNPINNED.test(n)), [], `the ${name} claim's ${kept} plan: ${nodes.join(', ')}`);
      // The shape alone does not say it: joined to the table by id, a plan under these settings
      // drove the join from a scan of a whole index and read the heads again for every row.
      assert.ok(buffersOf(plan) <= planned * 1.5 + 200, `the ${name} claim read ${buffersOf(plan)} buffers with its ${kept} plan, ${planned} planned for the backlog`);
    }
  });

  it('leaves no plan setting on the connection: they hold for the claim’s own transaction', async () => {
    await db.driver.outboxClaimMany({ limit: 100, leaseMs: LEASE });
    await db.driver.inboxClaimPushMany({ limit: 100, leaseMs: LEASE });
    await db.driver.pullClaimMany({ source: 'pull', limit: 10, leaseMs: LEASE });
    const { rows } = await db.driver.pool.query<{ name: string; setting: string }>(
      `SELECT name, setting FROM pg_settings WHERE name IN ('enable_seqscan', 'enable_bitmapscan', 'enable_hashjoin', 'enable_mergejoin', 'enable_material', 'jit') ORDER BY name`,
    );
    const defaults = await db.query<{ name: string; setting: string }>(`SELECT name, boot_val AS setting FROM pg_settings WHERE name IN ('enable_seqscan', 'enable_bitmapscan', 'enable_hashjoin', 'enable_mergejoin', 'enable_material', 'jit') ORDER BY name`);
    assert.deepEqual(rows, defaults);
  });
});

describe('a prepared claim whose statement the server refuses to parse (PostgreSQL)', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({ database: { poolMax: 1, preparedStatements: true } });
  });
  after(async () => db.drop());

  it('leaves the statement unprepared on its connection, so the next claim there parses it again', async () => {
    const inbox = `"${db.schema}".inbox`;
    const pid = async () => (await db.driver.pool.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
    const connection = await pid();
    // The relay claim's transaction rolls back on the error and its connection stays in the pool.
    await db.query(`ALTER TABLE ${inbox} RENAME COLUMN trace_context TO trace_context_away`);
    await assert.rejects(db.driver.inboxClaimPushMany({ limit: 100, leaseMs: LEASE }), /trace_context/);
    await db.query(`ALTER TABLE ${inbox} RENAME COLUMN trace_context_away TO trace_context`);
    assert.equal(await pid(), connection, 'the same connection');
    await db.query(`INSERT INTO ${inbox} (source, idempotency_key, aggregate_id, payload) VALUES ('web', 'k', 'a', '{}')`);
    assert.equal((await db.driver.inboxClaimPushMany({ limit: 100, leaseMs: LEASE })).length, 1);
  });
});
