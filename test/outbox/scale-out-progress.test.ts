/**
 * What the scale-out check of an outbox pass counts as done: rows finished (sent, retried or
 * dead), not rows claimed. A claim grown to `outbox.maxBatchSize`, with a second batch claimed
 * while the first publishes, puts up to 2,000 rows in hand long before a destination took them;
 * counting those would promise the check a rate the pass does not have, and it would start too
 * few passes. Real PostgreSQL, a destination held until the test lets it answer.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { runOutboxPass } from '../../lib/outbox/outbox-pass.ts';
import type { ScaleOutHook } from '../../lib/runtime/scale-out.ts';
import type { TestDatabase } from '../helpers/database.ts';
import { insertOutboxRows, passFixture, withOutboxDatabase } from '../helpers/outbox-pass-fixture.ts';
import { RecordingDestination } from '../helpers/recording-destination.ts';

describe('the scale-out check of an outbox pass', { timeout: 60_000 }, () => {
  let db: TestDatabase;
  withOutboxDatabase((d) => (db = d));

  it('counts rows finished (sent, retried, dead), not rows claimed and still being published', async () => {
    await insertOutboxRows(db, [
      ...Array.from({ length: 30 }, (_, i) => ({ topic: 'orders.created', payload: { i } })),
      ...Array.from({ length: 5 }, (_, i) => ({ topic: 'orders.retry', payload: { i } })),
      ...Array.from({ length: 5 }, (_, i) => ({ topic: 'orders.poison', payload: { i } })),
    ]);
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    let callStarted!: () => void;
    const started = new Promise<void>((resolve) => (callStarted = resolve));
    const destination = new RecordingDestination({
      name: 'main',
      waitFor: () => {
        callStarted();
        return held;
      },
      answer: (m) => (m.topic === 'orders.retry' ? { status: 'retryable', error: 'busy' } : m.topic === 'orders.poison' ? { status: 'permanent', error: 'malformed', deadNow: true } : 'sent'),
    });
    let finished: (() => number) | undefined;
    const hook: ScaleOutHook = {
      passStarted: (read) => {
        finished = read;
      },
      passEnded: async () => {},
    };
    const pass = runOutboxPass({ ...passFixture(db, { destinations: [destination], mode: 'drain' }), scaleOut: hook });
    await started;
    const processing = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".outbox WHERE state = 'processing'`);
    assert.equal(processing[0]!.n, 40, 'every row is claimed and its call is open');
    assert.ok(finished, 'the pass handed the check its progress');
    assert.equal(finished(), 0, 'claimed rows whose calls are open are not finished');
    release();
    const summary = await pass;
    assert.deepEqual([summary.sent, summary.retried, summary.dead], [30, 5, 5]);
    assert.equal(summary.claimed, 40);
    assert.equal(finished(), 40, 'sent, retried and dead rows count');
  });
});
