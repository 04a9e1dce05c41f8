import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { runOutboxPass } from '../../lib/outbox/outbox-pass.ts';
import type { TestDatabase } from '../helpers/database.ts';
import { emfValues, insertOutboxRows, passFixture, withShortLeaseOutbox } from '../helpers/outbox-pass-fixture.ts';
import { RecordingDestination } from '../helpers/recording-destination.ts';
import { waitUntil } from '../helpers/wait.ts';

/**
 * Reclaim and lost-claim counts are emitted right after the step that produced them, so an
 * invocation killed later in its pass does not take them with it.
 */
describe('outbox pass: metrics emitted when they happen', () => {
  let db: TestDatabase;
  withShortLeaseOutbox((d) => {
    db = d;
  });

  it('emits the reclaim count before the pass publishes, and a lost claim as soon as the renewal finds it', async () => {
    await insertOutboxRows(db, Array.from({ length: 4 }, (_, i) => ({ topic: 'orders.paid', payload: { i } })));
    // Two rows left behind by a dead owner: the reclaim step returns them.
    await db.query(
      `UPDATE "${db.schema}".outbox SET state = 'processing', claim_token = gen_random_uuid(), claimed_at = clock_timestamp(),
              lease_expires_at = clock_timestamp() - interval '1 second'
        WHERE id IN (SELECT id FROM "${db.schema}".outbox ORDER BY sequence LIMIT 2)`,
    );
    const destination = new RecordingDestination({ delayMs: 60_000 });
    const stop = new AbortController();
    const fixture = passFixture(db, { destinations: [destination], mode: 'deadline', signal: stop.signal });
    const pass = runOutboxPass(fixture);
    await waitUntil('the publish starts', () => destination.calls >= 1);
    // The first claim goes out beside the reclaim: when it answered first, the reclaimed rows come
    // in a second claim, once the reclaim has ended (a second batch, a second call).
    await waitUntil('every row offered to the destination', () => destination.offered.length === 4);
    assert.equal(emfValues(fixture.lines).get('queuebox_outbox_messages_reclaimed_total{}'), 2, 'emitted before the pass ends');
    await db.query(`UPDATE "${db.schema}".outbox SET lease_expires_at = clock_timestamp() - interval '1 millisecond'`);
    await waitUntil('the renewal finds the claims lost', () => destination.abortedCalls === destination.calls);
    assert.equal(emfValues(fixture.lines).get('queuebox_claims_lost_total{component=outbox}'), 4, 'emitted right after the renewal');
    stop.abort();
    const summary = await pass;
    assert.deepEqual([summary.reclaimed, summary.claimsLost], [2, 4]);
    fixture.metrics.flush();
    const totals = emfValues(fixture.lines);
    assert.equal(totals.get('queuebox_claims_lost_total{component=outbox}'), 4, 'counted once across flushes');
  });
});
