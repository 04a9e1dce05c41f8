/**
 * A destination that never answers: each invocation's call outlives the invocation, so its lease
 * ends with the call still open. The next reclaim counts that lease as a failed delivery; after
 * `max_attempts` deliveries the row is `dead` with a `last_error` that says so, and its key moves
 * on. Two pollers run each invocation, each with its own connection pool.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { runOutboxPass } from '../../lib/outbox/outbox-pass.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { emfValues, insertOutboxRows, inspectRows, passFixture } from '../helpers/outbox-pass-fixture.ts';
import { HangingDestination } from '../helpers/hanging-destination.ts';
import { waitUntil } from '../helpers/wait.ts';

/** Invocation length: the lease of every claim ends with it (a pass claims until 1 s is left). */
const INVOCATION_MS = 2500;


describe('outbox: a destination that never answers', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({
      destinations: { main: { type: 'sqs', queueUrl: 'http://localhost:1/000000000000/main' } },
      // One row per claimed batch: a pass settles a claimed batch as a whole, so a row that shared
      // a batch with the hung call would be left to its lease too (and charged; see reliability.md).
      outbox: { routes: [{ topicPattern: '**', destination: 'main' }], claimTimeoutMs: 60_000, pollIntervalMs: 10, batchSize: 1 },
    });
  });
  after(async () => db.drop());

  it('spends an attempt per invocation the call outlives: after max_attempts deliveries the row is dead and its key moves on', async () => {
    const [head, next, free] = await insertOutboxRows(db, [
      { topic: 'hang', key: 'k', payload: { n: 1 }, maxAttempts: 3 },
      { topic: 'ok', key: 'k', payload: { n: 2 } },
      { topic: 'ok', payload: { n: 3 } },
    ]);
    const destination = new HangingDestination((m) => m.topic === 'hang', 1);
    const lines: string[] = [];
    const logs: string[] = [];
    let reclaimed = 0;
    const invocation = async (): Promise<void> => {
      // The reclaim gate would let one reclaim run per claimTimeoutMs / 5; each invocation here
      // stands for one that comes after that.
      await db.query(`DELETE FROM "${db.schema}".queuebox_maintenance`);
      const fixtures = [1, 2].map(() => passFixture(db, { destinations: [destination], driver: db.newDriver(), timeoutMs: INVOCATION_MS, mode: 'deadline' }));
      for (const summary of await Promise.all(fixtures.map((f) => runOutboxPass(f)))) reclaimed += summary.reclaimed;
      for (const f of fixtures) {
        f.metrics.flush();
        lines.push(...f.lines);
        logs.push(...f.logger.entries.map((e) => `${e.level} ${e.message}`));
      }
      // The invocation is over; the hung call's lease ends with it.
      await waitUntil('no live lease is left', async () => (await db.query(`SELECT 1 FROM "${db.schema}".outbox WHERE state = 'processing' AND lease_expires_at > clock_timestamp()`)).length === 0);
    };

    for (let n = 1; n <= 3; n++) {
      await invocation();
      assert.equal(destination.hung.length, n, `invocation ${n}: the head was delivered ${n} times`);
      const [row] = await inspectRows(db, [head!]);
      assert.equal(row!.state, 'processing', `invocation ${n}: the hung call holds the row until its lease ends`);
    }
    assert.deepEqual(destination.hung.map((m) => m.attempt), [0, 1, 2], 'X-Attempt counts the lost leases');
    assert.deepEqual(destination.recording.deliveries.map((d) => d.id), [free], 'the key waits behind its head; the keyless row is sent');

    // The next invocation's reclaim finds the third lease lost: the row is dead, the key moves on.
    await invocation();
    assert.equal(destination.hung.length, 3, 'never delivered a fourth time');
    const rows = await inspectRows(db, [head!, next!]);
    assert.deepEqual(
      rows.map((r) => [r.state, r.attempt, r.last_error]),
      [
        ['dead', 2, 'gave up after 3 of 3 attempts: the lease of the last one expired during the delivery (the call did not finish within its lease)'],
        ['sent', 0, null],
      ],
    );
    assert.deepEqual(destination.recording.deliveries.map((d) => d.id), [free, next]);
    const emf = emfValues(lines);
    assert.equal(emf.get('queuebox_outbox_messages_total{status=dead}'), 1, 'the dead row is counted');
    assert.equal(reclaimed, 2, 'two lost leases went back to pending, the third made the row dead');
    assert.ok(logs.includes('error outbox rows dead: the lease of their last attempt expired during the delivery'), logs.join('\n'));
  });

  it('a reclaimed row waiting for its next delivery says which attempt its lease was lost on', async () => {
    await db.query(`DELETE FROM "${db.schema}".outbox`);
    const [id] = await insertOutboxRows(db, [{ topic: 'hang', payload: {}, maxAttempts: 4 }]);
    const [claimed] = await db.driver.outboxClaimMany({ limit: 1, leaseMs: 60_000 });
    assert.equal(claimed!.id, id);
    await db.query(`UPDATE "${db.schema}".outbox SET lease_expires_at = clock_timestamp() - interval '1 second' WHERE id = $1`, [id]);
    assert.deepEqual(await db.driver.outboxReclaimExpired({}), { ran: true, reclaimed: 1, dead: 0 });
    const [row] = await inspectRows(db, [id!]);
    assert.deepEqual([row!.state, row!.attempt, row!.last_error], ['pending', 1, 'lease expired during delivery attempt 1 of 4 (the call did not finish within its lease)']);
  });
});
