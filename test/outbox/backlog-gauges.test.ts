import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { BACKLOG_GAUGE_INTERVAL_MS, backlogGaugeDue, backlogGaugeRead } from '../../lib/observability/backlog-gauge-gate.ts';
import { runOutboxPass } from '../../lib/outbox/outbox-pass.ts';
import type { OutboxPassDriver } from '../../lib/outbox/pass-context.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { delegatingPassDriver, emfValues, insertOutboxRows, passFixture } from '../helpers/outbox-pass-fixture.ts';
import { RecordingDestination } from '../helpers/recording-destination.ts';

/**
 * The backlog gauges count the pending rows (about 100 ms at 1,000,000 rows): a pass reads them
 * unless the same driver read them less than BACKLOG_GAUGE_INTERVAL_MS ago.
 */
describe('outbox pass: backlog gauges at most once per interval per driver', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({
      destinations: { main: { type: 'sqs', queueUrl: 'http://localhost:1/000000000000/main' } },
      outbox: { routes: [{ topicPattern: '**', destination: 'main' }] },
    });
  });
  after(async () => db.drop());

  it('the gate: due at first, not again within the interval of a recorded read, due after it; drivers and tables apart', () => {
    const driver = {};
    const other = {};
    assert.equal(backlogGaugeDue(driver, 'outbox', 1_000_000), true);
    assert.equal(backlogGaugeDue(driver, 'outbox', 1_000_000), true, 'asking records nothing: only a read that succeeded does');
    backlogGaugeRead(driver, 'outbox', 1_000_000);
    assert.equal(backlogGaugeDue(driver, 'outbox', 1_000_000 + BACKLOG_GAUGE_INTERVAL_MS - 1), false);
    assert.equal(backlogGaugeDue(driver, 'inbox', 1_000_000 + 1), true, 'each table has its own clock');
    assert.equal(backlogGaugeDue(other, 'outbox', 1_000_000 + 1), true, 'each driver has its own clock');
    assert.equal(backlogGaugeDue(driver, 'outbox', 1_000_000 + BACKLOG_GAUGE_INTERVAL_MS), true);
  });

  it('a pass that starts right after another on the same driver skips the pending count; another driver reads it', async () => {
    // Three rows due in an hour: never claimed, always pending.
    await insertOutboxRows(db, Array.from({ length: 3 }, (_, i) => ({ topic: 'orders.later', payload: { i }, delayMs: 3_600_000 })));
    let statsReads = 0;
    const counting = (): OutboxPassDriver => delegatingPassDriver(db.driver, { outboxStats: (scope) => (statsReads++, db.driver.outboxStats(scope)) });
    const driver = counting();
    const gauges = async (passDriver: OutboxPassDriver) => {
      const fixture = passFixture(db, { destinations: [new RecordingDestination()], driver: passDriver });
      const summary = await runOutboxPass(fixture);
      assert.equal(summary.stoppedBecause, 'drained');
      fixture.metrics.flush();
      return emfValues(fixture.lines).get('queuebox_outbox_messages_pending{}');
    };
    assert.equal(await gauges(driver), 3, 'the first pass reads the backlog');
    assert.equal(statsReads, 1);
    assert.equal(await gauges(driver), undefined, 'the next pass on the same driver does not count again');
    assert.equal(statsReads, 1);
    assert.equal(await gauges(counting()), 3, 'another driver (another container) reads its own');
    assert.equal(statsReads, 2);

    // A read that fails starts no interval: the next pass on that driver tries again.
    let failNext = true;
    const flaky: OutboxPassDriver = {
      ...counting(),
      outboxStats: (scope) => {
        statsReads++;
        if (failNext) {
          failNext = false;
          return Promise.reject(new Error('connection reset'));
        }
        return db.driver.outboxStats(scope);
      },
    };
    assert.equal(await gauges(flaky), undefined, 'the failed read emits nothing');
    assert.equal(await gauges(flaky), 3, 'and the next pass reads');
    assert.equal(statsReads, 4);
  });
});
