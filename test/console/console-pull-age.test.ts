/**
 * The console's inbox age of pull rows on PostgreSQL (`inboxStatsByState`, `oldestPullDueFromSql`):
 * a row at `-infinity` written at an infinite time is aged as `queuebox status` ages it (since the
 * earliest time), and the read looks at the first `PULL_AGE_SOURCE_LIMIT` sources with open pull
 * rows only, whatever their number (the conformance suite covers the ages of both dialects).
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import { PULL_AGE_SOURCE_LIMIT } from '../../lib/db/driver.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';

describe('console: the inbox age of pull rows (PostgreSQL)', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase();
  });
  after(async () => db.drop());
  beforeEach(async () => {
    await db.query(`TRUNCATE "${db.schema}".inbox`);
  });
  const inbox = () => `"${db.schema}".inbox`;

  it('a pull row at -infinity written at an infinite time is aged from the earliest time, as status ages it, beside one written 7 minutes ago', async () => {
    await db.query(
      `INSERT INTO ${inbox()} (source, idempotency_key, payload, consumption, scheduled_at, created_at) VALUES
         ('jobs', 'finite', '{}', 'pull', '-infinity', clock_timestamp() - interval '7 minutes'),
         ('jobs', 'infinite', '{}', 'pull', '-infinity', 'infinity')`,
    );
    const console = await db.driver.inboxStatsByState({ countCap: 100 });
    const status = await db.driver.inboxStats();
    assert.ok(console.oldestPendingAgeSeconds > 1e11, `aged since 4714 BC: ${console.oldestPendingAgeSeconds}`);
    assert.ok(Math.abs(console.oldestPendingAgeSeconds - status.oldestPendingAgeSeconds) < 5, `console ${console.oldestPendingAgeSeconds}, status ${status.oldestPendingAgeSeconds}`);
  });

  it(`looks at the first ${PULL_AGE_SOURCE_LIMIT} sources with open pull rows, by name`, async () => {
    // One row due now per source, and in the source after the limit a row an hour late.
    await db.query(
      `INSERT INTO ${inbox()} (source, idempotency_key, payload, consumption, scheduled_at)
       SELECT 's' || lpad(g::text, 5, '0'), 'k', '{}', 'pull', CASE WHEN g = $1 + 1 THEN clock_timestamp() - interval '1 hour' ELSE clock_timestamp() - interval '10 seconds' END
         FROM generate_series(1, $1 + 1) g`,
      [PULL_AGE_SOURCE_LIMIT],
    );
    const within = await db.driver.inboxStatsByState({ countCap: 100 });
    assert.ok(within.oldestPendingAgeSeconds >= 9 && within.oldestPendingAgeSeconds < 600, `the source past the limit is not looked at: ${within.oldestPendingAgeSeconds}`);
    // The late row in the first source: it counts.
    await db.query(`UPDATE ${inbox()} SET scheduled_at = clock_timestamp() - interval '1 hour' WHERE source = 's00001'`);
    const first = await db.driver.inboxStatsByState({ countCap: 100 });
    assert.ok(first.oldestPendingAgeSeconds >= 3599 && first.oldestPendingAgeSeconds < 3700, `the first source's late row: ${first.oldestPendingAgeSeconds}`);
  });
});
