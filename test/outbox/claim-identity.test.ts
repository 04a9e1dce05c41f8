import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { OutboxPassDriver } from '../../lib/outbox/pass-context.ts';
import { runOutboxPass } from '../../lib/outbox/outbox-pass.ts';
import type { TestDatabase } from '../helpers/database.ts';
import { emfValues, insertOutboxRows, inspectRows, passFixture, withShortLeaseOutbox } from '../helpers/outbox-pass-fixture.ts';
import { RecordingDestination } from '../helpers/recording-destination.ts';
import { createGate, waitUntil } from '../helpers/wait.ts';

/** A claim is its token: what a pass remembers about one claim of a row never acts on a later claim of it. */
describe('outbox pass: a row that comes back to the same pass', () => {
  let db: TestDatabase;
  withShortLeaseOutbox((d) => {
    db = d;
  });

  it('publishes and settles a row it lost at renewal and then claimed again (re-claim inside one pass)', async () => {
    const ids = await insertOutboxRows(db, [
      { topic: 'orders.paid', key: 'k1', payload: { n: 1 } },
      { topic: 'orders.paid', key: 'k2', payload: { n: 2 } },
    ]);
    // The first offer of each row hangs (until aborted); every later offer answers at once.
    const seen = new Set<string>();
    const destination = new RecordingDestination({ delayMs: (messages) => (messages.some((m) => seen.has(m.id)) ? 0 : (messages.forEach((m) => seen.add(m.id)), 60_000)) });
    const stop = new AbortController();
    const fixture = passFixture(db, { destinations: [destination], mode: 'deadline', timeoutMs: 30_000, signal: stop.signal });
    const pass = runOutboxPass(fixture);
    await waitUntil('the first publish starts', () => destination.calls === 1);
    // The pass stalls past its lease (as a paused process would): its next renewal changes no row.
    await db.query(`UPDATE "${db.schema}".outbox SET lease_expires_at = clock_timestamp() - interval '1 millisecond'`);
    await waitUntil('the renewal loses both claims and aborts the publish', () => destination.abortedCalls === 1);
    // A second replica's reclaim step returns the rows; the same pass claims them again (new tokens).
    assert.equal((await db.driver.outboxReclaimExpired({})).reclaimed, 2);
    await waitUntil('the re-claimed rows are sent', async () => (await inspectRows(db, ids)).every((r) => r.state === 'sent'), 8000).finally(() => stop.abort());
    const summary = await pass;
    assert.equal(destination.deliveries.length, 2, 'each row delivered once, by its second claim');
    assert.deepEqual([summary.claimed, summary.sent, summary.claimsLost, summary.abandoned], [4, 2, 2, 0]);
    fixture.metrics.flush();
    assert.equal(emfValues(fixture.lines).get('queuebox_claims_lost_total{component=outbox}'), 2);
  });

  it('reports as abandoned only the rows whose settle did not land before the pass returned', async () => {
    const ids = await insertOutboxRows(db, Array.from({ length: 20 }, (_, i) => ({ topic: 'orders.paid', payload: { i } })));
    const settleStarted = createGate();
    const slowSettle: OutboxPassDriver = {
      ...db.driver,
      // The mark-sent reaches the database only after the pass has stopped waiting for it.
      outboxMarkSentMany: async (p) => {
        settleStarted.open();
        await new Promise((resolve) => setTimeout(resolve, 700));
        return db.driver.outboxMarkSentMany(p);
      },
    };
    const destination = new RecordingDestination();
    const fixture = passFixture(db, { destinations: [destination], driver: slowSettle, outbox: { shutdownTimeoutMs: 100, batchSize: 20 }, mode: 'deadline', timeoutMs: 30_000, signal: AbortSignal.timeout(300) });
    const summary = await runOutboxPass(fixture);
    const states = (await inspectRows(db, ids)).map((r) => r.state);
    const sentNow = states.filter((s) => s === 'sent').length;
    assert.equal(summary.sent, sentNow, 'the summary counts every row its settle marked sent');
    assert.equal(summary.abandoned, states.filter((s) => s === 'processing').length, 'abandoned: rows the pass left processing');
    assert.equal(summary.sent + summary.abandoned + summary.claimsLost + summary.retried + summary.dead, summary.claimed, 'each claimed row is counted once');
    assert.equal(sentNow, 20);
    assert.ok(fixture.logger.at('warn').every((l) => !/abandon|stopped with rows in flight/.test(l.message)), 'no warning about abandoned rows that were in fact sent');
  });

  it('settles the rows whose calls answered when it stops with another call of their batch still open; only that call\'s row is left to its lease', async () => {
    const ids = await insertOutboxRows(db, [
      { topic: 'orders.paid', key: 'a', payload: { hang: false } },
      { topic: 'orders.paid', key: 'b', payload: { hang: true } },
      { topic: 'orders.paid', key: 'c', payload: { hang: false } },
    ]);
    // One row per call: the call of row b never answers (until the pass aborts it).
    const destination = new RecordingDestination({ maxBatchSize: 1, delayMs: (messages) => (messages.some((m) => m.payload.hang === true) ? 60_000 : 0) });
    const stop = new AbortController();
    const fixture = passFixture(db, { destinations: [destination], outbox: { shutdownTimeoutMs: 200, batchSize: 3 }, mode: 'deadline', timeoutMs: 30_000, signal: stop.signal });
    const pass = runOutboxPass(fixture);
    await waitUntil('the two answering calls are delivered', () => destination.deliveries.length === 2);
    stop.abort();
    const summary = await pass;
    assert.deepEqual(
      (await inspectRows(db, ids)).map((r) => r.state),
      ['sent', 'processing', 'sent'],
      'the delivered rows are sent although their batch had a call still open; the open call\'s row stays processing',
    );
    assert.deepEqual([summary.claimed, summary.sent, summary.abandoned], [3, 2, 1]);
    assert.equal(destination.abortedCalls, 1, 'the open call was aborted when the pass stopped waiting');
  });
});
