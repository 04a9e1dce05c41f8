/**
 * `database.preparedStatements`: off by default (no session state, as poolers need), and when on,
 * the claim statements are named prepared statements on the connection that ran them.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';

async function preparedOnDriverConnection(db: TestDatabase): Promise<string[]> {
  // poolMax 1: the driver's only connection is the one that ran the claims.
  const { rows } = await db.driver.pool.query<{ name: string; statement: string }>('SELECT name, statement FROM pg_prepared_statements ORDER BY name');
  return rows.map((r) => `${r.name}: ${r.statement.trim().slice(0, 40)}`);
}

async function claimEverything(db: TestDatabase): Promise<void> {
  await db.driver.outboxClaimMany({ limit: 10, leaseMs: 60_000 });
  await db.driver.outboxClaimMany({ limit: 10, leaseMs: 60_000 });
  await db.driver.inboxClaimPushMany({ limit: 10, leaseMs: 60_000 });
  await db.driver.pullClaimMany({ source: 'jobs', limit: 10, leaseMs: 60_000 });
}

describe('database.preparedStatements', () => {
  let plain: TestDatabase;
  let prepared: TestDatabase;
  before(async () => {
    plain = await createTestDatabase({ database: { poolMax: 1 } });
    prepared = await createTestDatabase({ database: { poolMax: 1, preparedStatements: true } });
  });
  after(async () => {
    await plain.drop();
    await prepared.drop();
  });

  it('is off by default: the claims leave no prepared statement on the connection', async () => {
    assert.equal(plain.config.database.preparedStatements, false);
    await claimEverything(plain);
    assert.deepEqual(await preparedOnDriverConnection(plain), []);
  });

  it('when on, prepares each claim statement once per connection under a stable name', async () => {
    await claimEverything(prepared);
    const statements = await preparedOnDriverConnection(prepared);
    // The outbox sends its window claim first, then (the window gave nothing) its full claim.
    assert.equal(statements.length, 4, `outbox window and full, relay and pull claims: ${statements.join(' | ')}`);
    for (const s of statements) assert.match(s, /^queuebox_[0-9a-f]{24}: WITH (RECURSIVE\s|retried AS)/);
    const texts = (await prepared.driver.pool.query<{ statement: string }>('SELECT statement FROM pg_prepared_statements')).rows.map((r) => r.statement);
    assert.equal(texts.filter((s) => /WITH retried AS/.test(s) && !s.includes('sweep_next')).length, 1, 'one window claim');
  });

  it('plans the outbox and relay claims once: after five custom plans PostgreSQL keeps a generic plan', async () => {
    // The batch size is a literal in the claim text; with `LIMIT $1` PostgreSQL never switches to
    // the generic plan and plans every execution again (the measured cost this setting removes).
    for (let i = 0; i < 8; i++) {
      await prepared.driver.outboxClaimMany({ limit: 10, leaseMs: 60_000 });
      await prepared.driver.inboxClaimPushMany({ limit: 10, leaseMs: 60_000 });
    }
    const { rows } = await prepared.driver.pool.query<{ statement: string; generic_plans: string; custom_plans: string }>(
      'SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements',
    );
    const claims = {
      outbox: rows.find((r) => r.statement.includes(`"${prepared.schema}"."outbox" c`) && r.statement.includes('LIMIT 10') && r.statement.includes('sweep_next')),
      relay: rows.find((r) => r.statement.includes(`"${prepared.schema}"."inbox" c`) && r.statement.includes(`c.consumption = 'push'`)),
    };
    for (const [claim, row] of Object.entries(claims)) {
      assert.ok(row, `the prepared ${claim} claim`);
      assert.ok(Number(row.generic_plans) >= 3, `${claim} claim: ${row.generic_plans} generic / ${row.custom_plans} custom plans`);
    }
  });

  it('writes the batch size into the claim text, so each batch size is its own statement', async () => {
    await prepared.driver.outboxClaimMany({ limit: 7, leaseMs: 60_000 });
    const { rows } = await prepared.driver.pool.query<{ statement: string }>('SELECT statement FROM pg_prepared_statements');
    assert.ok(rows.some((r) => /LIMIT 7\b/.test(r.statement)), 'a statement with LIMIT 7');
    await assert.rejects(prepared.driver.outboxClaimMany({ limit: 0, leaseMs: 60_000 }), /batch size must be a positive integer/);
  });
});
