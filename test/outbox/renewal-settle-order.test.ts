import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { OutboxPassDriver } from '../../lib/outbox/pass-context.ts';
import { runOutboxPass } from '../../lib/outbox/outbox-pass.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { insertOutboxRows, inspectRows, passFixture } from '../helpers/outbox-pass-fixture.ts';
import { RecordingDestination } from '../helpers/recording-destination.ts';
import { createGate, delay, waitUntil } from '../helpers/wait.ts';

/**
 * A pass's lease renewal and its own settle of the same rows must never run at once: the two
 * statements lock the rows in different orders (the renewal in watch order, the settle in the
 * order the destination calls answered), so together they can deadlock.
 */
describe('outbox pass: renewal and settle of the same rows', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({
      destinations: { main: { type: 'sqs', queueUrl: 'http://localhost:1/000000000000/main' } },
      outbox: { routes: [{ topicPattern: '**', destination: 'main' }], claimTimeoutMs: 1500, pollIntervalMs: 10, batchSize: 20 },
    });
    // Enough finished rows that PostgreSQL fetches the batch's rows by id in the arrays' order.
    await db.query(
      `INSERT INTO "${db.schema}".outbox (topic, payload, state) SELECT 'old.done', '{}'::jsonb, 'sent' FROM generate_series(1, 3000)`,
    );
    await db.query(`ANALYZE "${db.schema}".outbox`);
  });
  after(async () => db.drop());

  it('do not deadlock: the settle waits for a renewal already under way', async () => {
    const ids = await insertOutboxRows(db, Array.from({ length: 20 }, (_, i) => ({ topic: 'orders.paid', payload: { i } })));
    const firstRow = ids[0]!;
    const answer = createGate();
    // Two calls of 10 rows; the second call answers first, so the settle lists its rows first.
    const destination = new RecordingDestination({
      maxBatchSize: 10,
      waitFor: answer.wait,
      delayMs: (messages) => ((messages[0]!.payload.i as number) < 10 ? 150 : 0),
    });
    const blocker = await db.pool.connect();
    let renewals = 0;
    let settleCalled = false;
    const errors: string[] = [];
    let unblocked: Promise<void> | undefined;
    const unblock = () =>
      (unblocked ??= (async () => {
        await blocker.query('COMMIT');
      })());
    const driver: OutboxPassDriver = {
      ...db.driver,
      outboxRenewMany: async (p) => {
        renewals++;
        if (renewals === 1) {
          // Hold the first row so the renewal waits on it, then let the publishes answer.
          await blocker.query('BEGIN');
          await blocker.query(`SELECT 1 FROM "${db.schema}".outbox WHERE id = $1 FOR UPDATE`, [firstRow]);
          setTimeout(() => void unblock(), 800);
          answer.open();
        }
        try {
          return await db.driver.outboxRenewMany(p);
        } catch (error) {
          errors.push(`renewal: ${String(error)}`);
          throw error;
        }
      },
      outboxMarkSentMany: async (p) => {
        settleCalled = true;
        const settle = db.driver.outboxMarkSentMany(p).catch((error: unknown) => {
          errors.push(`settle: ${String(error)}`);
          throw error;
        });
        // Let the settle lock its first rows and wait on the held one, then release the holder.
        await delay(150);
        await unblock();
        return settle;
      },
    };
    try {
      const summary = await runOutboxPass(passFixture(db, { destinations: [destination], driver }));
      assert.ok(settleCalled);
      assert.deepEqual(errors, [], 'neither statement failed');
      assert.ok(renewals >= 1, 'a renewal ran while the batch was settling');
      assert.deepEqual([summary.sent, summary.claimsLost, summary.abandoned], [20, 0, 0]);
      assert.deepEqual((await inspectRows(db, ids)).map((r) => r.state), Array(20).fill('sent'));
    } finally {
      await waitUntil('the blocker is released', () => unblocked !== undefined).catch(() => {});
      await unblocked;
      blocker.release();
    }
  });
});
