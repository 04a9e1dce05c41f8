import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Driver } from '../../lib/db/driver.ts';
import { runOutboxPass } from '../../lib/outbox/outbox-pass.ts';
import { createInvocationContext } from '../../lib/runtime/invocation-context.ts';
import type { TestDatabase } from '../helpers/database.ts';
import { insertOutboxRows, passFixture, stateCounts, withOutboxDatabase } from '../helpers/outbox-pass-fixture.ts';
import { RecordingDestination } from '../helpers/recording-destination.ts';
import { waitUntil } from '../helpers/wait.ts';

/**
 * A container frozen while a claim is on its way (the claim checked the deadline, then the
 * process stopped) resumes past its invocation's end: the claim is not sent, and the pass stops
 * at its deadline with a summary of what it did; it is not an error of the pass.
 */
describe('outbox pass: a claim reached after the invocation ended', () => {
  let db!: TestDatabase;
  withOutboxDatabase((created) => (db = created));

  it('stops at the deadline, its summary matching the database', { timeout: 60_000 }, async () => {
    await insertOutboxRows(db, Array.from({ length: 5 }, (_, i) => ({ topic: 'orders.paid', key: `k${i}`, payload: { i } })));
    let frozenMs = 0;
    const context = createInvocationContext({ timeoutMs: 30_000, now: () => Date.now() + frozenMs });
    let claims = 0;
    const claimMany: Driver['outboxClaimMany'] = async (p) => {
      // The second claim passed the pass's deadline check, after the first batch was settled;
      // then the container is frozen past its invocation's end.
      if (++claims === 2) {
        await waitUntil('the first batch is settled', async () => (await stateCounts(db)).sent === 5);
        frozenMs = 60_000;
      }
      return db.driver.outboxClaimMany(p);
    };
    const driver = new Proxy(db.driver, {
      get(target, key) {
        if (key === 'outboxClaimMany') return claimMany;
        const value: unknown = Reflect.get(target, key, target);
        return typeof value === 'function' ? value.bind(target) : value;
      },
    });
    const options = passFixture(db, { destinations: [new RecordingDestination({ maxBatchSize: 10 })], context, driver });
    const summary = await runOutboxPass(options);
    assert.equal(claims, 2);
    assert.equal(summary.stoppedBecause, 'deadline');
    const counts = await stateCounts(db);
    assert.deepEqual({ sent: summary.sent, abandoned: summary.abandoned }, { sent: counts.sent ?? 0, abandoned: counts.processing ?? 0 });
    assert.deepEqual(counts, { sent: 5 });
  });
});
