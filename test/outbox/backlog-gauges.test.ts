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
 * unless the same driver read them less than BACKLOG_GAUGE_INTERVAL_MS ago, and then only when no
 * one read them within it (a gate row in the database, shared by every driver).
 */
describe('outbox pass: backlog gauges at most once per interval per driver and in all', () => {
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

  /** Moves the database gate of the outbox gauges back an hour: as if no one had read them since. */
  const reopenGate = () => db.query(`UPDATE "${db.schema}".queuebox_maintenance SET last_run_at = last_run_at - interval '1 hour' WHERE name = 'gauges:outbox'`);

  it('a pass that starts right after another on the same driver skips the pending count; another driver finds it read (the database gate) until the interval passes', async () => {
    // Three rows due in an hour: never claimed, always pending.
    await insertOutboxRows(db, Array.from({ length: 3 }, (_, i) => ({ topic: 'orders.later', payload: { i }, delayMs: 3_600_000 })));
    let statsReads = 0;
    let counted = 0;
    const counting = (): OutboxPassDriver =>
      delegatingPassDriver(db.driver, {
        outboxStats: async (scope) => {
          statsReads++;
          const stats = await db.driver.outboxStats(scope);
          if (stats.skipped !== true) counted++;
          return stats;
        },
      });
    const driver = counting();
    const gauges = async (passDriver: OutboxPassDriver) => {
      const fixture = passFixture(db, { destinations: [new RecordingDestination()], driver: passDriver });
      const summary = await runOutboxPass(fixture);
      assert.equal(summary.stoppedBecause, 'drained');
      fixture.metrics.flush();
      return emfValues(fixture.lines).get('queuebox_outbox_messages_pending{}');
    };
    assert.equal(await gauges(driver), 3, 'the first pass reads the backlog');
    assert.deepEqual([statsReads, counted], [1, 1]);
    assert.equal(await gauges(driver), undefined, 'the next pass on the same driver does not ask again');
    assert.deepEqual([statsReads, counted], [1, 1]);
    const other = counting();
    assert.equal(await gauges(other), undefined, 'another driver (another container) asks, and the gate says it was read within the interval: nothing counted');
    assert.deepEqual([statsReads, counted], [2, 1]);
    assert.equal(await gauges(other), undefined, 'that driver does not ask again within the interval either');
    assert.equal(statsReads, 2);
    await reopenGate();
    assert.equal(await gauges(counting()), 3, 'once the interval has passed on the database clock, a new driver reads');
    assert.deepEqual([statsReads, counted], [3, 2]);

    // A read that fails starts no interval: the next pass on that driver tries again.
    await reopenGate();
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
    assert.equal(statsReads, 5);
  });

  it('passes that end together on separate drivers count the backlog once between them', async () => {
    await reopenGate();
    let counted = 0;
    let asked = 0;
    const drivers = Array.from({ length: 6 }, () => db.newDriver());
    const passes = drivers.map(async (pool) => {
      const passDriver = delegatingPassDriver(pool, {
        outboxStats: async (scope) => {
          asked++;
          const stats = await pool.outboxStats(scope);
          if (stats.skipped !== true) counted++;
          return stats;
        },
      });
      const fixture = passFixture(db, { destinations: [new RecordingDestination()], driver: passDriver });
      await runOutboxPass(fixture);
      fixture.metrics.flush();
      return emfValues(fixture.lines).get('queuebox_outbox_messages_pending{}');
    });
    const pending = await Promise.all(passes);
    assert.equal(asked, 6, 'every new driver asks');
    assert.equal(counted, 1, 'one of them counts');
    assert.deepEqual(
      pending.filter((n) => n !== undefined),
      [3],
      'and only that pass emits the gauge',
    );
  });
});
