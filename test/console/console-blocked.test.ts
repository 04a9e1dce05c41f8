/**
 * The blocked page groups inbox rows as the claims do: per source and aggregate. An aggregate id
 * shared by two sources is two aggregates — one source's healthy head hides nothing of the other,
 * and rows of another source never count as waiting behind a head. An empty key is no key.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { BLOCKED_LIMITS } from '../../lib/console/blocked-page.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';

describe('console: blocked inbox aggregates are per source', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase();
    const i = `"${db.schema}".inbox`;
    const row = (source: string, key: string, aggregate: string, attempt: number, due: string, consumption = 'push') =>
      db.query(`INSERT INTO ${i} (source, idempotency_key, aggregate_id, payload, attempt, scheduled_at, consumption) VALUES ($1, $2, $3, '{}', $4, clock_timestamp() + $5::interval, $6)`, [
        source, key, aggregate, attempt, due, consumption,
      ]);
    // Shared aggregate id "order-1": a healthy head in "shop", then a poison head (and a row behind it) in "payments".
    await row('shop', 's-1', 'order-1', 0, '-1 second');
    await row('payments', 'p-1', 'order-1', 5, '-1 second');
    await row('payments', 'p-2', 'order-1', 0, '-1 second');
    // Shared aggregate id "order-2": a first attempt scheduled later in "shop"; the only row "behind" it is another source's.
    await row('shop', 's-2', 'order-2', 0, '1 hour');
    await row('payments', 'p-3', 'order-2', 0, '-1 second');
    // The same on the pull side, which already grouped per source, stays as it was.
    await row('pulled', 'q-1', 'order-1', 4, '-1 second', 'pull');
    // An empty aggregate id is keyless: a poison row there is not an aggregate's head.
    await row('shop', 's-3', '', 6, '-1 second');
  });
  after(async () => db?.drop());

  it('lists the poison head of one source even when another source has an earlier row of the same aggregate id', async () => {
    const heads = await db.driver.inboxBlockedAggregates(BLOCKED_LIMITS);
    const shown = heads.map((h) => `${h.label}/${h.key} attempt ${h.attempt} waiting ${h.waitingBehind}`).sort();
    assert.deepEqual(shown, ['payments/order-1 attempt 5 waiting 1', 'pulled/order-1 attempt 4 waiting 0']);
  });
});
