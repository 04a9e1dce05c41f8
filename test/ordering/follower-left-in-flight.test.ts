/**
 * A pass that stops waiting (signal, deadline) while a follower's call is open settles what
 * answered — the key's first row (`key_first`) is marked `sent` — and leaves the follower
 * `processing` (its call still open, its lease live). The key then has a row in flight and no
 * holder (`key_first` row) in flight, so the claim's in-flight test must be asked of every row in
 * flight, not of the holders only: else a second claim takes a row of the key that is the head (a
 * lower row that committed late, or a replayed row) while the follower is still in flight, and the
 * key has two holders.
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import { enqueue } from '../../lib/index.ts';
import { runOutboxPass } from '../../lib/outbox/outbox-pass.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { insertOutboxRows, passFixture } from '../helpers/outbox-pass-fixture.ts';
import { HangingDestination } from '../helpers/hanging-destination.ts';
import { waitUntil } from '../helpers/wait.ts';


describe('outbox claim: a follower left in flight after its first row was sent still holds its key (PostgreSQL)', () => {
  let db: TestDatabase;
  let table: string;
  before(async () => {
    db = await createTestDatabase({
      destinations: { main: { type: 'sqs', queueUrl: 'http://localhost:1/000000000000/main' } },
      outbox: { routes: [{ topicPattern: '**', destination: 'main' }], claimTimeoutMs: 60_000, pollIntervalMs: 10, rowsPerKey: 2, shutdownTimeoutMs: 100 },
    });
    table = `"${db.schema}".outbox`;
  });
  after(async () => db.drop());
  beforeEach(async () => {
    await db.query(`DELETE FROM ${table}`);
  });

  const holders = async () =>
    (await db.query<{ claim_token: string }>(`SELECT DISTINCT claim_token FROM ${table} WHERE key = 'K' AND state = 'processing'`)).map((r) => r.claim_token);

  /** Runs a pass that sends `head`, hangs on `follower` and stops waiting; returns once it has. */
  const passLeavingFollowerInFlight = async (head: string, follower: string) => {
    const destination = new HangingDestination((m) => m.payload.hang === true);
    const stop = new AbortController();
    const pass = runOutboxPass(passFixture(db, { destinations: [destination], driver: db.newDriver(), timeoutMs: 30_000, signal: stop.signal }));
    await waitUntil('the follower is in a call', () => destination.hung.length === 1);
    stop.abort();
    await pass;
    const rows = await db.query<{ id: string; state: string; key_first: boolean; live: boolean }>(
      `SELECT id, state, key_first, lease_expires_at > clock_timestamp() AS live FROM ${table} WHERE id = ANY($1) ORDER BY sequence`,
      [[head, follower]],
    );
    assert.deepEqual(
      rows.map((r) => [r.state, r.key_first, r.live]),
      [
        ['sent', true, null],
        ['processing', false, true],
      ],
      'the first row left processing before its follower: the follower is in flight with a live lease, the key has no holder',
    );
  };

  it('a lower row that commits late is not claimed while the follower is in flight', async () => {
    const late = await db.pool.connect();
    try {
      await late.query('BEGIN');
      const lowest = await enqueue(late, { topic: 't', key: 'K', payload: { late: true } }, { schema: db.schema });
      const [head, follower] = await insertOutboxRows(db, [
        { topic: 't', key: 'K', payload: { n: 1 } },
        { topic: 't', key: 'K', payload: { n: 2, hang: true } },
      ]);
      await passLeavingFollowerInFlight(head!, follower!);
      await late.query('COMMIT');
      const second = await db.newDriver().outboxClaimMany({ limit: 10, leaseMs: 30_000 });
      assert.deepEqual(
        { claimed: second.map((r) => r.id), holders: (await holders()).length },
        { claimed: [], holders: 1 },
        `a second claim took ${lowest} of key K while the follower ${follower} is in flight`,
      );
    } finally {
      late.release();
    }
  });

  it('a replayed row of the key is not claimed while the follower is in flight', async () => {
    const [head, follower] = await insertOutboxRows(db, [
      { topic: 't', key: 'K', payload: { n: 1 } },
      { topic: 't', key: 'K', payload: { n: 2, hang: true } },
    ]);
    await passLeavingFollowerInFlight(head!, follower!);
    assert.equal(await db.driver.outboxReplay({ ids: [head!] }), 1);
    const second = await db.newDriver().outboxClaimMany({ limit: 10, leaseMs: 30_000 });
    assert.deepEqual(
      { claimed: second.map((r) => r.id), holders: (await holders()).length },
      { claimed: [], holders: 1 },
      `a second claim took the replayed ${head} of key K while the follower ${follower} is in flight`,
    );
  });
});
