/**
 * A database (or role) with `extra_float_digits = -15`: PostgreSQL then writes a float8 with one
 * significant digit (`300.25` as `3e+02`), and `pg` parses that text. Every age and span QueueBox
 * reads is the exact one whatever the setting, as every time already is (`epochMs`): the backlog
 * age of `queuebox status` and of the passes' gauges (outbox and relay), the console's oldest
 * pending age, its claims' lease left and its blocked heads' due time, and the age of each
 * worker's last finished pass. So is every time of an outbox claim's rows (`createdAt`,
 * `leaseExpiresAt`).
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, beforeEach, describe, it } from 'node:test';
import pg from 'pg';
import { passRowName } from '../../lib/db/pass-row-name.ts';
import { createTestDatabase, testDatabaseUrl, type TestDatabase } from '../helpers/database.ts';

/** A time long past (its age in seconds has 8 digits before the point) and the ms it is. */
const PAST = { sql: '2024-03-17 12:34:56.789123+00', ms: Date.parse('2024-03-17T12:34:56.789Z') };

describe('a database with extra_float_digits = -15', () => {
  let db: TestDatabase;
  let name: string;
  const server = testDatabaseUrl();

  before(async () => {
    name = `qb_float_digits_${randomBytes(5).toString('hex')}`;
    const admin = new pg.Client({ connectionString: server });
    await admin.connect();
    try {
      await admin.query(`CREATE DATABASE "${name}"`);
      await admin.query(`ALTER DATABASE "${name}" SET extra_float_digits = -15`);
    } finally {
      await admin.end();
    }
    const url = new URL(server);
    url.pathname = `/${name}`;
    // `createTestDatabase` reads DATABASE_URL before its first await: it makes its schema in this database.
    const saved = process.env.DATABASE_URL;
    process.env.DATABASE_URL = url.href;
    let created: Promise<TestDatabase>;
    try {
      created = createTestDatabase({ inbox: { sources: { hooks: { type: 'sqs', consumption: 'push' } } } });
    } finally {
      process.env.DATABASE_URL = saved;
    }
    db = await created;
  });
  after(async () => {
    await db?.drop();
    const cleanup = new pg.Client({ connectionString: server });
    await cleanup.connect();
    try {
      await cleanup.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
    } finally {
      await cleanup.end();
    }
  });
  beforeEach(async () => {
    await db.query(`TRUNCATE "${db.schema}".outbox, "${db.schema}".inbox, "${db.schema}".queuebox_maintenance`);
  });

  const outbox = () => `"${db.schema}".outbox`;
  const inbox = () => `"${db.schema}".inbox`;

  /** The database clock in ms since the epoch, read exactly (a bigint's text). */
  const clockMs = async () => Number((await db.query<{ ms: string }>(`SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint::text AS ms`))[0]!.ms);

  /**
   * `read` run between two reads of the database clock, and the bounds of what it must return:
   * `expected(clock)` at the clock before and after (whichever is lower first), widened by 1 ms
   * each way for the rounding to whole ms.
   */
  async function between<T>(read: () => Promise<T>, expected: (clock: number) => number): Promise<{ value: T; low: number; high: number }> {
    const before = await clockMs();
    const value = await read();
    const after = await clockMs() + 1;
    const [a, b] = [expected(before), expected(after)];
    return { value, low: Math.min(a, b) - 1, high: Math.max(a, b) + 1 };
  }

  const assertWithin = (actual: number, bounds: { low: number; high: number }, what: string) =>
    assert.ok(actual >= bounds.low && actual <= bounds.high, `${what}: ${actual} not within [${bounds.low}, ${bounds.high}]`);

  it('the session writes a float8 with one significant digit (the case this file is about)', async () => {
    const [row] = await db.query<{ setting: string; text: string }>(`SELECT current_setting('extra_float_digits') AS setting, 300.25::float8::text AS text`);
    assert.deepEqual({ ...row }, { setting: '-15', text: '3e+02' });
  });

  it('the backlog age of status and of the passes’ gauges is exact: outbox, relay; every row, and the pending rows only', async () => {
    await db.query(`INSERT INTO ${outbox()} (topic, payload, scheduled_at) VALUES ('digits', '{}', '${PAST.sql}')`);
    await db.query(`INSERT INTO ${inbox()} (source, idempotency_key, payload, consumption, scheduled_at) VALUES ('hooks', 'k1', '{}', 'push', '${PAST.sql}')`);
    const reads = {
      'outbox status': () => db.driver.outboxStats(),
      'outbox gauge': () => db.driver.outboxStats({ pendingOnly: true }),
      'inbox status': () => db.driver.inboxStats(),
      'relay gauge': () => db.driver.inboxStats({ pendingOnly: true }),
    };
    for (const [what, read] of Object.entries(reads)) {
      const { value, low, high } = await between(read, (clock) => clock - PAST.ms);
      assertWithin(value.oldestPendingAgeSeconds * 1000, { low, high }, what);
    }
  });

  it('the console’s oldest pending age is exact, outbox and inbox', async () => {
    await db.query(`INSERT INTO ${outbox()} (topic, payload, scheduled_at) VALUES ('digits', '{}', '${PAST.sql}')`);
    await db.query(`INSERT INTO ${inbox()} (source, idempotency_key, payload, consumption, scheduled_at) VALUES ('hooks', 'k1', '{}', 'push', '${PAST.sql}')`);
    for (const [what, read] of [
      ['outbox', () => db.driver.outboxStatsByState({ countCap: 1000 })],
      ['inbox', () => db.driver.inboxStatsByState({ countCap: 1000 })],
    ] as const) {
      const { value, low, high } = await between(read, (clock) => clock - PAST.ms);
      assertWithin(value.oldestPendingAgeSeconds * 1000, { low, high }, `${what} oldest pending age (ms)`);
      assert.equal(value.counts.pending, 1);
    }
  });

  it('the console’s claims in flight and blocked heads read the lease left and the due time exactly', async () => {
    // A claim whose lease ends in a day and 0.25 s, one whose lease ended an hour and 0.25 s ago,
    // and a head whose retry is due in two days and 0.25 s, with a row waiting behind it.
    await db.query(
      `INSERT INTO ${outbox()} (topic, key, payload, state, attempt, claim_token, claimed_at, lease_expires_at, scheduled_at, sequence) VALUES
         ('digits', 'live', '{}', 'processing', 0, gen_random_uuid(), clock_timestamp(), clock_timestamp() + interval '1 day 0.25 seconds', clock_timestamp(), 1),
         ('digits', 'lost', '{}', 'processing', 0, gen_random_uuid(), clock_timestamp(), clock_timestamp() - interval '1 hour 0.25 seconds', clock_timestamp(), 2),
         ('digits', 'retry', '{}', 'pending', 1, NULL, NULL, NULL, clock_timestamp() + interval '2 days 0.25 seconds', 3),
         ('digits', 'retry', '{}', 'pending', 0, NULL, NULL, NULL, clock_timestamp(), 4)`,
    );
    const stored = new Map(
      (
        await db.query<{ key: string; lease_ms: string | null; scheduled_ms: string }>(
          `SELECT key, floor(extract(epoch FROM lease_expires_at) * 1000)::bigint::text AS lease_ms, floor(extract(epoch FROM scheduled_at) * 1000)::bigint::text AS scheduled_ms
             FROM ${outbox()} WHERE sequence IN (1, 2, 3)`,
        )
      ).map((r) => [r.key, { lease: Number(r.lease_ms), scheduled: Number(r.scheduled_ms) }]),
    );
    const live = await between(() => db.driver.outboxClaimsInFlight({ limit: 10 }), (clock) => stored.get('live')!.lease - clock);
    const liveClaim = live.value.find((c) => c.key === 'live')!;
    assertWithin(liveClaim.leaseLeftMs, live, 'lease left of a live claim');
    const lost = await between(() => db.driver.outboxClaimsInFlight({ limit: 10 }), (clock) => stored.get('lost')!.lease - clock);
    assertWithin(lost.value.find((c) => c.key === 'lost')!.leaseLeftMs, lost, 'lease left of an expired claim');

    const params = { limit: 10, scanLimit: 100, poisonAttempts: 5, waitingCap: 100 };
    const retry = await between(() => db.driver.outboxBlockedKeys(params), (clock) => stored.get('retry')!.scheduled - clock);
    const head = retry.value.find((h) => h.key === 'retry');
    assert.ok(head, 'the head waiting for its retry is blocked');
    assertWithin(head.dueInMs, retry, 'due in of a head waiting for its retry');
    const expired = await between(() => db.driver.outboxBlockedKeys(params), (clock) => stored.get('lost')!.lease - clock);
    assertWithin(expired.value.find((h) => h.key === 'lost')!.leaseLeftMs, expired, 'lease left of a blocked head whose lease ended');
  });

  it('an outbox claim reads its rows’ created time and lease end exactly: the window claim and the full claim', async () => {
    // The driver sends the window claim first; once a window claim filled less than half its
    // batch (the first here), it sends the full claim.
    for (const [what, key] of [
      ['window claim', null],
      ['full claim', 'held'],
    ] as const) {
      await db.query(`TRUNCATE ${outbox()}`);
      if (key !== null) {
        await db.query(
          `INSERT INTO ${outbox()} (topic, key, payload, state, claim_token, claimed_at, lease_expires_at, created_at, sequence)
           VALUES ('digits', 'busy', '{}', 'processing', gen_random_uuid(), clock_timestamp(), clock_timestamp() + interval '1 hour', '${PAST.sql}', 1)`,
        );
      }
      await db.query(`INSERT INTO ${outbox()} (topic, key, payload, created_at, sequence) VALUES ('digits', $1, '{}', '${PAST.sql}', 2)`, [key]);
      const leaseMs = 86_400_250;
      const { value, low, high } = await between(() => db.driver.outboxClaimMany({ limit: 10, leaseMs }), (clock) => clock + leaseMs);
      assert.equal(value.length, 1, `${what}: the free row is claimed`);
      const [row] = value;
      assert.equal(row!.createdAt.getTime(), PAST.ms, `${what}: createdAt`);
      assertWithin(row!.leaseExpiresAt.getTime(), { low, high }, `${what}: leaseExpiresAt`);
      const [stored] = await db.query<{ ms: string }>(`SELECT floor(extract(epoch FROM lease_expires_at) * 1000)::bigint::text AS ms FROM ${outbox()} WHERE id = $1`, [row!.id]);
      assert.equal(row!.leaseExpiresAt.getTime(), Number(stored!.ms), `${what}: leaseExpiresAt is the stored lease end, to the ms`);
    }
  });

  it('the age of each worker’s last finished pass is exact', async () => {
    await db.query(`INSERT INTO "${db.schema}".queuebox_maintenance (name, last_run_at) VALUES ($1, '${PAST.sql}')`, [passRowName('outboxPoller', db.config.tables.outbox)]);
    const { value, low, high } = await between(() => db.driver.passListFinished(), (clock) => clock - PAST.ms);
    const pass = value.find((p) => p.worker === 'outboxPoller');
    assert.ok(pass, 'the pass is listed');
    assert.equal(pass.finishedAt.getTime(), PAST.ms);
    assertWithin(pass.ageSeconds * 1000, { low, high }, 'age of the last outbox pass (ms)');
  });
});
