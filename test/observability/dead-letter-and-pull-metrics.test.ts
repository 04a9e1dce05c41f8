/**
 * Metrics that dashboards and alarms depend on, read from the real EMF output:
 * - the relay counts its retries and dead-letters in `queuebox_inbox_messages_total{status}`, and
 *   an alarm watches exactly that series; per source in `queuebox_inbox_failed_messages_total`,
 *   whose series the dashboard charts per configured source (a source switched from push to pull
 *   still has its earlier push rows relayed);
 * - a pull worker emits `queuebox_pull_messages_total{status}` and its lost claims by default
 *   (standard output, as EMF, at the end of `runOnce`), so the "Pull activity" panel and the pull
 *   alarms get data without any set-up; `metrics: false` turns it off, and the documented API
 *   (`createDeadline`, `QueueBoxMetrics`) is exported from the package.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { alarmResources } from '../../lib/serverless/alarms.ts';
import { dashboardPanels } from '../../lib/serverless/monitoring.ts';
import type { Driver } from '../../lib/db/driver.ts';
import { runRelayPass } from '../../lib/inbox/relay-pass.ts';
import { createDeadline, createPullWorker, METRICS, QueueBoxMetrics } from '../../lib/index.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { emfValue } from '../helpers/emf.ts';
import { fakeLambdaContext } from '../helpers/lambda-context.ts';
import { captureStdout } from '../helpers/stdout-capture.ts';
import { waitUntil } from '../helpers/wait.ts';
import { insertPullRows, readPullRows } from '../pull/pull-fixtures.ts';

type AlarmProps = { MetricName: string; Namespace: string; Dimensions: Array<{ Name: string; Value: string }> };

describe('dead-letter and pull metrics', () => {
  let db: TestDatabase;
  const logger = createLogger({ serviceName: 'test', logLevel: 'SILENT' });
  before(async () => {
    db = await createTestDatabase({
      inbox: { relay: { maxAttempts: 2, retryBaseDelayMs: 1000 }, sources: {
          shop: { type: 'http', path: '/shop', auth: { type: 'none' } },
          // The pull workers below claim from these (a worker refuses a source the config does not declare).
          ...Object.fromEntries(['jobs', 'loop', 'given', 'off'].map((name) => [name, { type: 'sqs', queueName: `${name}-queue`, consumption: 'pull' }])),
          // Switched from push to pull: its rows stored before the switch are still push rows.
          switched: { type: 'http', path: '/switched', auth: { type: 'none' }, consumption: 'pull' },
        },
      },
      observability: { namespace: 'QueueBoxMetricsTest', serviceName: 'orders-svc' },
      lambda: { deadlineMarginMs: 1000 },
    });
  });
  after(async () => db.drop());

  const relayPass = async (driver: Driver) => {
    const lines: string[] = [];
    const metrics = new QueueBoxMetrics({ namespace: db.config.observability.namespace, serviceName: db.config.observability.serviceName, write: (l) => lines.push(l) });
    const summary = await runRelayPass({ config: db.config, driver, logger, metrics, deadline: createDeadline(fakeLambdaContext({ timeoutMs: 10_000 }), 500), mode: 'drain' });
    metrics.flush();
    return { summary, lines };
  };

  it('the relay counts a retried and a dead-lettered row as queuebox_inbox_messages_total{status}', async () => {
    await db.driver.inboxInsert({ source: 'shop', idempotencyKey: 'no-type', eventType: null, payload: {}, consumption: 'push' });
    await db.driver.inboxInsert({ source: 'shop', idempotencyKey: 'refused', eventType: 'created', payload: {}, consumption: 'push' });
    const refuse = { value: async () => Promise.reject(new Error('outbox refused the row')) };
    const failing: Driver = Object.create(db.driver, { inboxForwardMany: refuse, inboxForward: refuse });

    const first = await relayPass(failing);
    assert.deepEqual([first.summary.dead, first.summary.retried], [1, 1]);
    const name = METRICS.inboxMessages.name;
    assert.equal(emfValue(first.lines, name, { status: 'dead', service: 'orders-svc' }), 1, 'the row with no event type is dead at once');
    assert.equal(emfValue(first.lines, name, { status: 'retried' }), 1);
    const failed = METRICS.inboxFailedMessages.name;
    assert.equal(emfValue(first.lines, failed, { service: 'orders-svc', source: 'shop', status: 'dead' }), 1);
    assert.equal(emfValue(first.lines, failed, { service: 'orders-svc', source: 'shop', status: 'retried' }), 1);

    await db.query(`UPDATE "${db.schema}".inbox SET scheduled_at = clock_timestamp() WHERE state = 'pending'`);
    const second = await relayPass(failing);
    assert.equal(second.summary.dead, 1);
    assert.equal(emfValue(second.lines, name, { status: 'dead' }), 1, 'the refused row is dead after its last attempt');
    assert.equal(emfValue(second.lines, name, { status: 'retried' }), 0);
    assert.equal(emfValue(second.lines, failed, { source: 'shop', status: 'dead' }), 1);
    assert.equal(emfValue(second.lines, failed, { source: 'shop', status: 'retried' }), 0);
  });

  it('a push row of a source since switched to pull is relayed, and its failure is counted under the source and charted', async () => {
    // Stored as push before the switch: the relay forwards by the row's own consumption.
    await db.driver.inboxInsert({ source: 'switched', idempotencyKey: 'before-switch', eventType: null, payload: {}, consumption: 'push' });
    const { summary, lines } = await relayPass(db.driver);
    assert.equal(summary.dead, 1, 'the row with no event type is dead at once');
    const failed = METRICS.inboxFailedMessages.name;
    assert.equal(emfValue(lines, failed, { service: 'orders-svc', source: 'switched', status: 'dead' }), 1);
    const bySource = dashboardPanels(db.config).find((p) => p.title === 'Inbox relay retried and dead rows by source')!;
    assert.ok(
      bySource.metrics!.some((m) => m.key === 'inboxFailedMessages' && m.dimensions.source === 'switched' && m.dimensions.status === 'dead'),
      'the dashboard charts the series the relay wrote',
    );
  });

  it('an alarm and the dashboard watch the relay and pull dead-letter series with the dimensions the EMF line carries', () => {
    const alarms = Object.values(alarmResources(db.config)).map((a) => (a as { Properties: AlarmProps }).Properties);
    for (const [metric, dims] of [
      [METRICS.inboxMessages.name, { service: 'orders-svc', status: 'dead' }],
      [METRICS.pullMessages.name, { service: 'orders-svc', status: 'dead' }],
    ] as const) {
      const alarm = alarms.find((a) => a.MetricName === metric && a.Dimensions.some((d) => d.Name === 'status' && d.Value === 'dead'));
      assert.ok(alarm, `an alarm on ${metric}{status="dead"}`);
      assert.equal(alarm.Namespace, 'QueueBoxMetricsTest');
      assert.deepEqual(Object.fromEntries(alarm.Dimensions.map((d) => [d.Name, d.Value])), dims);
    }
    const panels = dashboardPanels(db.config);
    const inboxFlow = panels.find((p) => p.title === 'Inbox flow')!;
    assert.ok(inboxFlow.metrics!.some((m) => m.key === 'inboxMessages' && m.dimensions.status === 'dead'));
    // Per configured source, in name order, and (unknown source), retried and dead.
    const bySource = panels.find((p) => p.title === 'Inbox relay retried and dead rows by source')!;
    assert.deepEqual(bySource.metrics!.map((m) => `${m.key}:${m.dimensions.source}:${m.dimensions.status}:${m.stat}`), [
      ...['given', 'jobs', 'loop', 'off', 'shop', 'switched'].flatMap((source) => [`inboxFailedMessages:${source}:retried:Sum`, `inboxFailedMessages:${source}:dead:Sum`]),
      'inboxFailedMessages:(unknown source):retried:Sum',
      'inboxFailedMessages:(unknown source):dead:Sum',
    ]);
    const pull = panels.find((p) => p.title === 'Pull activity')!;
    assert.deepEqual(pull.metrics!.map((m) => `${m.key}:${Object.values(m.dimensions).join()}`), [
      'pullMessages:completed',
      'pullMessages:retried',
      'pullMessages:dead',
      'pullMessages:released',
      'claimsLost:pull',
    ]);
  });

  it('a pull worker with no metrics option writes its counts as EMF when runOnce ends', async () => {
    await insertPullRows(db, 'jobs', [
      { key: 'ok', payload: { fail: false } },
      { key: 'bad', payload: { fail: true } },
    ]);
    const worker = createPullWorker({
      driver: db.driver,
      config: db.config,
      source: 'jobs',
      retry: { maxAttempts: 2, baseDelayMs: 1, maxDelayMs: 1, jitter: 0 },
      logger: { warn: () => {}, error: () => {} },
      handler: async (message) => {
        if ((message.payload as { fail: boolean }).fail) throw new Error('handler failed');
      },
    });
    const { result: summary, lines } = await captureStdout(() => worker.runOnce({ deadline: createDeadline(fakeLambdaContext({ timeoutMs: 10_000 }), 500) }));
    assert.deepEqual([summary.completed, summary.retried, summary.dead], [1, 1, 1]);
    const name = METRICS.pullMessages.name;
    assert.equal(emfValue(lines, name, { status: 'completed', service: 'orders-svc' }), 1);
    assert.equal(emfValue(lines, name, { status: 'retried' }), 1);
    assert.equal(emfValue(lines, name, { status: 'dead' }), 1);
    const namespaces = new Set(lines.filter((l) => l.includes('"_aws"')).map((l) => (JSON.parse(l) as { _aws: { CloudWatchMetrics: Array<{ Namespace: string }> } })._aws.CloudWatchMetrics[0]!.Namespace));
    assert.deepEqual([...namespaces], ['QueueBoxMetricsTest']);
    assert.deepEqual((await readPullRows(db, 'jobs')).map((r) => r.state).sort(), ['dead', 'processed']);
  });

  it('a long-running pull worker (start) writes its counts when it stops', async () => {
    await insertPullRows(db, 'loop', [{ key: 'x' }, { key: 'y' }]);
    const { lines } = await captureStdout(async () => {
      const worker = createPullWorker({ driver: db.driver, config: db.config, source: 'loop', pollMs: 20, logger: { warn: () => {}, error: () => {} }, handler: async () => {} });
      worker.start();
      await waitUntil('both rows are processed', async () => (await readPullRows(db, 'loop')).every((r) => r.state === 'processed'));
      await worker.stop();
    });
    assert.equal(emfValue(lines, METRICS.pullMessages.name, { status: 'completed', service: 'orders-svc' }), 2);
  });

  it('a pull worker counts into a QueueBoxMetrics it is given (the caller flushes), and writes nothing with metrics: false', async () => {
    await insertPullRows(db, 'given', [{ key: 'a' }, { key: 'b' }]);
    await insertPullRows(db, 'off', [{ key: 'c' }]);
    const given: string[] = [];
    const metrics = new QueueBoxMetrics({ namespace: 'Mine', serviceName: 'mine', write: (l) => given.push(l) });
    const quiet = { warn: () => {}, error: () => {} };
    const { lines } = await captureStdout(async () => {
      await createPullWorker({ driver: db.driver, config: db.config, source: 'given', metrics, logger: quiet, handler: async () => {} }).runOnce();
      await createPullWorker({ driver: db.driver, config: db.config, source: 'off', metrics: false, logger: quiet, handler: async () => {} }).runOnce();
    });
    assert.deepEqual(lines.filter((l) => l.includes('"_aws"')), [], 'nothing written to standard output');
    assert.equal(metrics.value('pullMessages', { status: 'completed' }), 2);
    metrics.flush();
    assert.equal(emfValue(given, METRICS.pullMessages.name, { status: 'completed', service: 'mine' }), 2);
    assert.deepEqual((await readPullRows(db, 'off')).map((r) => r.state), ['processed'], 'the worker with metrics off still worked');
  });
});
