/**
 * Review (attempts + partial): a row whose destination call never started (queued behind
 * `outbox.concurrency` when the pass stopped waiting) was never delivered, yet it is left
 * `processing`; the reclaim then charges it an attempt, and at its last one makes it `dead`
 * without a single delivery.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { runOutboxPass } from '../../lib/outbox/outbox-pass.ts';
import type { TestDatabase } from '../helpers/database.ts';
import { insertOutboxRows, inspectRows, passFixture, withOutboxDatabase } from '../helpers/outbox-pass-fixture.ts';
import { RecordingDestination } from '../helpers/recording-destination.ts';
import { waitUntil } from '../helpers/wait.ts';

describe('outbox rows whose call never started when the pass stopped', () => {
  let db: TestDatabase;
  withOutboxDatabase((d) => {
    db = d;
  });

  it('are not charged an attempt (maxAttempts 1: never made dead without a delivery)', async () => {
    const ids = await insertOutboxRows(db, [
      { topic: 'orders.paid', key: 'a', payload: { hang: true }, maxAttempts: 1 },
      { topic: 'orders.paid', key: 'b', payload: { hang: false }, maxAttempts: 1 },
      { topic: 'orders.paid', key: 'c', payload: { hang: false }, maxAttempts: 1 },
    ]);
    // One row per call, one call at a time: the calls of b and c wait behind a's, which hangs.
    const destination = new RecordingDestination({ maxBatchSize: 1, delayMs: (messages) => (messages.some((m) => m.payload.hang === true) ? 60_000 : 0) });
    const stop = new AbortController();
    const fixture = passFixture(db, { destinations: [destination], outbox: { shutdownTimeoutMs: 200, batchSize: 3, concurrency: 1 }, mode: 'deadline', timeoutMs: 30_000, signal: stop.signal });
    const pass = runOutboxPass(fixture);
    await waitUntil('the hanging call is open', () => destination.calls === 1);
    stop.abort();
    await pass;
    assert.equal(destination.offered.length, 1, 'only a was ever offered to the destination');
    // The leases end (the invocation is over); the next pass's reclaim step runs.
    await db.query(`UPDATE "${db.schema}".outbox SET lease_expires_at = clock_timestamp() - interval '1 second' WHERE state = 'processing'`);
    await db.driver.outboxReclaimExpired({});
    const rows = await inspectRows(db, ids);
    assert.equal(rows[0]!.state, 'dead', 'a: its only delivery outlived its lease');
    assert.deepEqual(
      rows.slice(1).map((r) => [r.state, r.attempt]),
      [
        ['pending', 0],
        ['pending', 0],
      ],
      'b and c were never delivered: no attempt spent, not dead',
    );
  });
});
