import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import { LOST_LEASE_NOT_CHARGED } from '../../lib/db/postgres/outbox-queries.ts';
import { enqueue } from '../../lib/index.ts';
import { runOutboxPass } from '../../lib/outbox/outbox-pass.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { inspectRows, insertOutboxRows, passFixture, withOutboxDatabase } from '../helpers/outbox-pass-fixture.ts';
import { RecordingDestination } from '../helpers/recording-destination.ts';

/**
 * With `outbox.rowsPerKey` above 1 a claim holds several rows of a key; another claim must still
 * never hold rows of that key at the same time — not after the first claim's lease expired and
 * the reclaim handed the rows to a new claim, and not when a lower row of the key commits late.
 */
describe('several rows of a key in one claim: one holder per key (PostgreSQL)', () => {
  let db: TestDatabase;
  let table: string;
  before(async () => {
    db = await createTestDatabase({ outbox: { rowsPerKey: 3 } });
    table = `"${db.schema}".outbox`;
  });
  after(async () => db.drop());
  beforeEach(async () => {
    await db.query(`DELETE FROM ${table}`);
  });

  /** The claim tokens holding rows of `key` now. */
  const holders = async (key: string) =>
    (await db.query<{ claim_token: string }>(`SELECT DISTINCT claim_token FROM ${table} WHERE key = $1 AND state = 'processing'`, [key])).map((r) => r.claim_token);
  const rowsOf = (n: number) => Array.from({ length: n }, (_, i) => ({ topic: 't', key: 'K', payload: { n: i + 1 } }));

  it('a claim takes the head and the next rows of the key under one token; a second claim takes none of them', async () => {
    const ids = await insertOutboxRows(db, rowsOf(5));
    const first = await db.driver.outboxClaimMany({ limit: 10, leaseMs: 30_000 });
    assert.deepEqual(first.map((r) => r.id), ids.slice(0, 3));
    assert.equal(new Set(first.map((r) => r.claimToken)).size, 1, 'one token for the rows of the key');
    assert.deepEqual(await db.newDriver().outboxClaimMany({ limit: 10, leaseMs: 30_000 }), []);
    assert.equal((await holders('K')).length, 1);
  });

  it('a stale worker whose lease expired: the reclaim hands its rows to one new claim, and the old claim can no longer write', async () => {
    const ids = await insertOutboxRows(db, rowsOf(4));
    const stale = await db.driver.outboxClaimMany({ limit: 10, leaseMs: 30_000 });
    assert.deepEqual(stale.map((r) => r.id), ids.slice(0, 3));
    await db.query(`UPDATE ${table} SET lease_expires_at = clock_timestamp() - interval '1 millisecond' WHERE claim_token = $1`, [stale[0]!.claimToken]);
    assert.equal((await db.driver.outboxReclaimExpired({ throttleMs: 0 })).reclaimed, 3);
    const fresh = await db.newDriver().outboxClaimMany({ limit: 10, leaseMs: 30_000 });
    assert.deepEqual(fresh.map((r) => r.id), ids.slice(0, 3));
    assert.deepEqual(await holders('K'), [fresh[0]!.claimToken]);
    // The stale worker settles as the pass does (the rest of the key first, its first row last): nothing changes.
    assert.deepEqual(await db.driver.outboxReleaseMany({ claims: stale.slice(1).map((r) => ({ id: r.id, token: r.claimToken })) }), []);
    assert.deepEqual(await db.driver.outboxMarkSentMany({ claims: [{ id: stale[0]!.id, token: stale[0]!.claimToken }] }), []);
    // Nor does a stale renewal, retry or dead-letter write of any of its rows.
    const staleClaims = stale.map((r) => ({ id: r.id, token: r.claimToken }));
    assert.deepEqual(await db.driver.outboxRenewMany({ claims: staleClaims, leaseMs: 30_000 }), []);
    assert.deepEqual(await db.driver.outboxRetryMany({ items: staleClaims.map((c) => ({ ...c, delayMs: 0, error: 'stale' })) }), []);
    assert.deepEqual(await db.driver.outboxMarkDeadMany({ items: staleClaims.map((c) => ({ ...c, error: 'stale' })) }), []);
    assert.deepEqual(
      (await db.query<{ state: string; claim_token: string }>(`SELECT state, claim_token FROM ${table} WHERE id = ANY($1) ORDER BY sequence`, [ids.slice(0, 3)])).map((r) => [r.state, r.claim_token]),
      ids.slice(0, 3).map(() => ['processing', fresh[0]!.claimToken]),
    );
    assert.deepEqual(await holders('K'), [fresh[0]!.claimToken]);
    // The database itself refuses a second holder: another first row of the key in flight.
    await assert.rejects(
      db.query(`UPDATE ${table} SET state = 'processing', key_first = true, claim_token = gen_random_uuid(), lease_expires_at = clock_timestamp() + interval '1 minute' WHERE id = $1`, [ids[3]]),
      (error: { code?: string; constraint?: string }) => error.code === '23505' && error.constraint === 'outbox_key_holder_in_flight_idx',
    );
  });

  it('a lower row that commits late is not claimed while a claim holds later rows of its key, and comes first once they are sent', async () => {
    const late = await db.pool.connect();
    try {
      await late.query('BEGIN');
      const lowest = await enqueue(late, { topic: 't', key: 'K', payload: { late: true } }, { schema: db.schema });
      const ids = await insertOutboxRows(db, rowsOf(4));
      const first = await db.driver.outboxClaimMany({ limit: 10, leaseMs: 30_000 });
      assert.deepEqual(first.map((r) => r.id), ids.slice(0, 3), 'the late row is not visible yet');
      await late.query('COMMIT');
      assert.deepEqual(await db.newDriver().outboxClaimMany({ limit: 10, leaseMs: 30_000 }), [], 'the key has a holder');
      assert.equal((await holders('K')).length, 1);
      assert.equal((await db.driver.outboxMarkSentMany({ claims: first.map((r) => ({ id: r.id, token: r.claimToken })) })).length, 3);
      const next = await db.newDriver().outboxClaimMany({ limit: 10, leaseMs: 30_000 });
      assert.deepEqual(next.map((r) => r.id), [lowest, ids[3]], 'the late row is the head now, the last row its follower');
    } finally {
      late.release();
    }
  });

  /** `[state, attempt]` of each of `ids`, in that order. */
  const attempts = async (ids: string[]) => {
    const rows = await db.query<{ id: string; state: string; attempt: number }>(`SELECT id, state, attempt FROM ${table} WHERE id = ANY($1)`, [ids]);
    const byId = new Map(rows.map((r) => [r.id, [r.state, r.attempt]]));
    return ids.map((id) => byId.get(id));
  };
  const expireAll = () => db.query(`UPDATE ${table} SET lease_expires_at = clock_timestamp() - interval '1 millisecond' WHERE state = 'processing'`);

  it('the reclaim of an expired claim charges one attempt per key, to its first row; the followers go back with their attempt unchanged', async () => {
    const keyed = await insertOutboxRows(db, rowsOf(3));
    const [single, keyless] = await insertOutboxRows(db, [
      { topic: 't', key: 'S', payload: { n: 1 } },
      { topic: 't', payload: { n: 1 } },
    ]);
    const claimed = await db.driver.outboxClaimMany({ limit: 10, leaseMs: 30_000 });
    assert.deepEqual(claimed.map((r) => r.id).sort(), [...keyed, single, keyless].sort());
    await expireAll();
    assert.deepEqual(await db.driver.outboxReclaimExpired({ throttleMs: 0 }), { ran: true, reclaimed: 5, dead: 0 });
    assert.deepEqual(await attempts([...keyed, single!, keyless!]), [
      ['pending', 1],
      ['pending', 0],
      ['pending', 0],
      ['pending', 1],
      ['pending', 1],
    ]);
    const errors = await db.query<{ last_error: string | null }>(`SELECT last_error FROM ${table} WHERE id = ANY($1) ORDER BY sequence`, [keyed]);
    assert.match(errors[0]!.last_error ?? '', /lease expired during delivery attempt 1 of 5/);
    assert.deepEqual(errors.slice(1).map((r) => r.last_error), [LOST_LEASE_NOT_CHARGED, LOST_LEASE_NOT_CHARGED], 'a follower says why it was not charged');
    // The next claim takes the key again, head first; the lease of a second claim charges the head again.
    const again = await db.driver.outboxClaimMany({ limit: 10, leaseMs: 30_000 });
    assert.deepEqual(again.filter((r) => r.key === 'K').map((r) => r.id), keyed);
    await expireAll();
    await db.driver.outboxReclaimExpired({ throttleMs: 0 });
    assert.deepEqual((await attempts(keyed)).map((a) => a![1]), [2, 0, 0]);
  });

  it('a claim whose first row spent its last attempt: the first row is dead, the followers pending with their attempt unchanged and the next row heads the key', async () => {
    const keyed = await insertOutboxRows(db, rowsOf(4));
    await db.query(`UPDATE ${table} SET max_attempts = 2, attempt = 1 WHERE id = $1`, [keyed[0]]);
    await db.query(`UPDATE ${table} SET max_attempts = 2, attempt = 1 WHERE id = $1`, [keyed[1]]);
    assert.deepEqual((await db.driver.outboxClaimMany({ limit: 10, leaseMs: 30_000 })).map((r) => r.id), keyed.slice(0, 3));
    await expireAll();
    assert.deepEqual(await db.driver.outboxReclaimExpired({ throttleMs: 0 }), { ran: true, reclaimed: 2, dead: 1 });
    assert.deepEqual(await attempts(keyed), [
      ['dead', 1],
      ['pending', 1],
      ['pending', 0],
      ['pending', 0],
    ]);
    assert.deepEqual((await db.driver.outboxClaimMany({ limit: 10, leaseMs: 30_000 })).map((r) => r.id), keyed.slice(1, 4));
  });

  it('when the first row of a claim already left processing, the lowest row of the key still in the claim is the one charged', async () => {
    const keyed = await insertOutboxRows(db, rowsOf(3));
    const claimed = await db.driver.outboxClaimMany({ limit: 10, leaseMs: 30_000 });
    assert.deepEqual(claimed.map((r) => r.id), keyed);
    // The pass writes this order when it stops waiting with a follower's call open (the answered
    // first row is sent, the follower stays processing: follower-left-in-flight.test.ts); the reclaim must not rely on the first row leaving last.
    assert.deepEqual(await db.driver.outboxMarkSentMany({ claims: [{ id: claimed[0]!.id, token: claimed[0]!.claimToken }] }), [keyed[0]]);
    await expireAll();
    assert.deepEqual(await db.driver.outboxReclaimExpired({ throttleMs: 0 }), { ran: true, reclaimed: 2, dead: 0 });
    assert.deepEqual(await attempts(keyed), [
      ['sent', 0],
      ['pending', 1],
      ['pending', 0],
    ]);
  });

  it('only consecutive due rows follow the head: a row not due ends the run of its key', async () => {
    const ids = await insertOutboxRows(db, rowsOf(4));
    await db.query(`UPDATE ${table} SET scheduled_at = clock_timestamp() + interval '1 hour' WHERE id = $1`, [ids[1]]);
    assert.deepEqual((await db.driver.outboxClaimMany({ limit: 10, leaseMs: 30_000 })).map((r) => r.id), [ids[0]]);
  });
});

describe('the pass publishes the rows of a key one after another (outbox.rowsPerKey 4)', () => {
  let db!: TestDatabase;
  withOutboxDatabase((started) => (db = started));

  it('one row of a key per call, in sequence order; every row sent', async () => {
    const rows = ['a', 'b', 'c'].flatMap((key) => Array.from({ length: 4 }, (_, i) => ({ topic: 't', key, payload: { n: i } })));
    const ids = await insertOutboxRows(db, rows);
    const destination = new RecordingDestination();
    const summary = await runOutboxPass(passFixture(db, { destinations: [destination], outbox: { rowsPerKey: 4 } }));
    assert.equal(summary.sent, 12);
    assert.equal(summary.batches, 1, 'one claim took every row');
    assert.deepEqual(destination.overlaps, [], 'no call carried two rows of a key, and no row of a key was offered while another was in a call');
    for (const key of ['a', 'b', 'c']) {
      assert.deepEqual(destination.deliveries.filter((d) => d.key === key).map((d) => d.payload.n), [0, 1, 2, 3], `${key}: in sequence order`);
    }
    assert.ok((await inspectRows(db, ids)).every((r) => r.state === 'sent'));
  });

  it('at the first failure of a key the rest of its rows go back to pending unpublished, no attempt spent; the failed row is retried', async () => {
    const ids = await insertOutboxRows(db, [...Array.from({ length: 4 }, (_, n) => ({ topic: 't', key: 'K', payload: { n } })), { topic: 't', key: 'L', payload: { n: 0 } }]);
    const destination = new RecordingDestination({ answer: (m) => (m.key === 'K' && m.payload.n === 1 ? { status: 'retryable', error: 'throttled' } : 'sent') });
    const summary = await runOutboxPass(passFixture(db, { destinations: [destination], outbox: { rowsPerKey: 4 } }));
    assert.deepEqual(destination.offered.map((m) => `${m.key}${String(m.payload.n)}`).sort(), ['K0', 'K1', 'L0']);
    assert.deepEqual({ sent: summary.sent, retried: summary.retried, released: summary.released, claimsLost: summary.claimsLost }, { sent: 2, retried: 1, released: 2, claimsLost: 0 });
    const byId = new Map((await inspectRows(db, ids)).map((r) => [r.id, r]));
    assert.deepEqual(
      ids.map((id) => [byId.get(id)!.state, byId.get(id)!.attempt]),
      [
        ['sent', 0],
        ['pending', 1],
        ['pending', 0],
        ['pending', 0],
        ['sent', 0],
      ],
    );
    assert.ok(ids.slice(2, 4).every((id) => byId.get(id)!.last_error === null), 'released rows carry no error');
  });
});

/**
 * The full claim extends its heads with followers as the window claim does, through claim
 * functions and as statements. Key a's head is in flight and 39 rows wait behind it: the oldest
 * window (30 rows at a batch of 10) holds a's rows only, so the window claim takes nothing and
 * every row below comes from the full claim's sweep and key turn.
 */
for (const rowsPerKey of [4, 10]) {
  for (const functions of [true, false]) {
    describe(`the full claim takes followers too (outbox.rowsPerKey ${rowsPerKey}, ${functions ? 'claim functions' : 'statements'})`, () => {
      let db: TestDatabase;
      before(async () => {
        db = await createTestDatabase({ outbox: { batchSize: 10, rowsPerKey }, ...(functions ? {} : { database: { claimFunctions: false } }) });
      });
      after(async () => db.drop());

      it('past a window held by a key in flight: the heads of b, c, d, then their next rows by rank, one token per key', async () => {
        const rows = [
          ...Array.from({ length: 40 }, (_, n) => ({ topic: 't', key: 'a', payload: { n } })),
          ...['b', 'c', 'd'].flatMap((key) => Array.from({ length: 12 }, (_, n) => ({ topic: 't', key, payload: { n } }))),
        ];
        await insertOutboxRows(db, rows);
        assert.deepEqual((await db.newDriver().outboxClaimMany({ limit: 1, leaseMs: 60_000 })).map((r) => `${r.key}${String(r.payload.n)}`), ['a0']);
        const driver = db.newDriver();
        const full = await driver.outboxClaimMany({ limit: 10, leaseMs: 60_000 });
        assert.deepEqual(
          full.map((r) => `${r.key}${String(r.payload.n)}`),
          ['b0', 'b1', 'b2', 'b3', 'c0', 'c1', 'c2', 'd0', 'd1', 'd2'],
          'the three heads, every key its second and third row, then b its fourth (rowsPerKey at least 4)',
        );
        for (const key of ['b', 'c', 'd']) assert.equal(new Set(full.filter((r) => r.key === key).map((r) => r.claimToken)).size, 1, `${key}: one token`);
        const inFlight = await db.query<{ key: string; first: string; n: string }>(
          `SELECT key, count(*) FILTER (WHERE key_first)::text AS first, count(*)::text AS n FROM "${db.schema}".outbox WHERE state = 'processing' GROUP BY key ORDER BY key`,
        );
        assert.deepEqual(inFlight.map((r) => [r.key, r.first, r.n]), [['a', '1', '1'], ['b', '1', '4'], ['c', '1', '3'], ['d', '1', '3']], 'one first row per key in flight');
        assert.deepEqual(await db.newDriver().outboxClaimMany({ limit: 10, leaseMs: 60_000 }), [], 'nothing more: every key has a holder');
        assert.equal(driver.ctx.claimFunctions?.missing.size, functions ? 0 : undefined, 'the claim went the path under test');
      });
    });
  }
}
