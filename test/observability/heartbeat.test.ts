/**
 * The heartbeat, end to end against PostgreSQL: the real poller, relay and reclaim handlers, each
 * invoked with a counting-down Lambda context, emit `queuebox_passes_finished_total` in exactly
 * the namespace, metric name and dimension set their heartbeat alarm watches (an EMF line with
 * other dimensions would leave the alarm without data, so it would fire forever), and stamp their
 * last finished pass in the maintenance table, which `queuebox status` shows. A pass that throws
 * records nothing; a stamp that fails does not fail the pass.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { handler as relayHandler } from '../../functions/inbox-relay.ts';
import { createOutboxPoller } from '../../functions/outbox-poller.ts';
import { handler as reclaimHandler } from '../../functions/reclaim.ts';
import type { Driver, PassWorker } from '../../lib/db/driver.ts';
import { METRICS } from '../../lib/observability/metric-names.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { collectStatus, formatStatus } from '../../lib/operations/status.ts';
import { setContainer } from '../../lib/runtime/container.ts';
import { alarmResources } from '../../lib/serverless/alarms.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { emfSamples } from '../helpers/emf.ts';
import { fakeLambdaContext } from '../helpers/lambda-context.ts';

type AlarmProps = { Namespace: string; MetricName: string; Dimensions: Array<{ Name: string; Value: string }>; TreatMissingData: string };

describe('heartbeat of the scheduled functions', () => {
  let db: TestDatabase;
  let lines: string[];
  const logger = createLogger({ serviceName: 'orders-svc', logLevel: 'SILENT' });
  const useDriver = (driver: Driver) => setContainer({ config: db.config, driver, logger, env: {}, writeMetrics: (line) => lines.push(line) });
  const poller = createOutboxPoller({ buildDestinations: () => new Map() });
  const invoke: Record<PassWorker, () => Promise<unknown>> = {
    // Past the deadline margin and the least claim window (1 s each): the pass claims.
    outboxPoller: () => poller({ source: 'aws.events' }, fakeLambdaContext({ timeoutMs: 2200 })),
    inboxRelay: () => relayHandler({ source: 'aws.events' }, fakeLambdaContext({ timeoutMs: 2200 })),
    reclaim: () => reclaimHandler({ source: 'aws.events' }, fakeLambdaContext({ timeoutMs: 1300 })),
  };

  before(async () => {
    db = await createTestDatabase({
      observability: { namespace: 'QueueBoxHeartbeatTest', serviceName: 'orders-svc' },
      lambda: { deadlineMarginMs: 1000 },
      outbox: { pollIntervalMs: 50 },
      inbox: { relay: { pollIntervalMs: 50 } },
    });
  });
  after(async () => {
    setContainer(undefined);
    await db.drop();
  });

  for (const worker of ['outboxPoller', 'inboxRelay', 'reclaim'] as const) {
    it(`${worker}: a finished pass emits the metric its heartbeat alarm watches (same namespace, name and dimensions) and stamps its time on the database clock`, async () => {
      lines = [];
      useDriver(db.driver);
      const before = await db.driver.clockNow();
      await invoke[worker]();
      const after = await db.driver.clockNow();

      const beats = emfSamples(lines).filter((s) => s.name === METRICS.passesFinished.name);
      assert.deepEqual(beats, [{ name: 'queuebox_passes_finished_total', namespace: 'QueueBoxHeartbeatTest', dimensions: { service: 'orders-svc', function: worker }, value: 1 }]);
      const alarm = Object.values(alarmResources(db.config))
        .map((a) => (a as { Properties: AlarmProps }).Properties)
        .find((a) => a.MetricName === METRICS.passesFinished.name && a.Dimensions.some((d) => d.Name === 'function' && d.Value === worker));
      assert.ok(alarm, `a heartbeat alarm for ${worker}`);
      assert.equal(alarm.Namespace, beats[0]!.namespace);
      assert.deepEqual(Object.fromEntries(alarm.Dimensions.map((d) => [d.Name, d.Value])), beats[0]!.dimensions, 'the alarm queries exactly the dimension set of the EMF line');
      assert.equal(alarm.TreatMissingData, 'breaching');

      const stamped = (await db.driver.passListFinished()).find((p) => p.worker === worker);
      assert.ok(stamped, `${worker}'s last pass is recorded`);
      assert.ok(stamped.finishedAt >= before && stamped.finishedAt <= after, `${stamped.finishedAt.toISOString()} within the invocation`);
    });
  }

  it('queuebox status shows each worker\'s last finished pass and how long ago, and "never" for one with none', async () => {
    await db.query(`DELETE FROM "${db.schema}".queuebox_maintenance WHERE name = 'pass:reclaim:outbox'`);
    const report = await collectStatus(db.driver, db.config);
    assert.deepEqual(Object.keys(report.passes), ['outboxPoller', 'inboxRelay', 'reclaim']);
    assert.equal(report.passes.reclaim, null);
    const poller = report.passes.outboxPoller!;
    assert.ok(poller.ageSeconds >= 0 && poller.ageSeconds < 60, `age ${poller.ageSeconds}`);
    const text = formatStatus(report);
    assert.match(text, new RegExp(`^function\\s+last finished pass\\s+ago$`, 'm'));
    assert.match(text, new RegExp(`^outboxPoller\\s+${poller.finishedAt.toISOString().replaceAll('.', '\\.')}\\s+\\d+s$`, 'm'));
    assert.match(text, /^inboxRelay\s+\S+Z\s+\d+s$/m);
    assert.match(text, /^reclaim\s+never$/m);
  });

  it('a pass that throws emits no heartbeat and leaves the last finished pass as it was', async () => {
    lines = [];
    const stampedBefore = (await db.driver.passListFinished()).find((p) => p.worker === 'outboxPoller')!.finishedAt;
    const broken: Driver = Object.create(db.driver, { outboxReclaimExpired: { value: async () => Promise.reject(new Error('database is gone')) } });
    useDriver(broken);
    await assert.rejects(invoke.outboxPoller(), /outbox pass failed: database is gone/);
    assert.equal(emfSamples(lines).filter((s) => s.name === METRICS.passesFinished.name).length, 0, 'no heartbeat: the alarm sees a missing datapoint');
    assert.deepEqual((await db.driver.passListFinished()).find((p) => p.worker === 'outboxPoller')!.finishedAt, stampedBefore);
  });

  for (const worker of ['outboxPoller', 'inboxRelay'] as const) {
    it(`${worker}: an invocation whose timeout leaves no time to claim past the deadline margin records no heartbeat and logs an error naming the settings`, async () => {
      lines = [];
      const errors = createLogger({ serviceName: 'orders-svc', logLevel: 'ERROR' });
      setContainer({ config: db.config, driver: db.driver, logger: errors, env: {}, writeMetrics: (line) => lines.push(line) });
      const logged: string[] = [];
      const write = process.stderr.write.bind(process.stderr);
      process.stderr.write = ((chunk: string | Uint8Array, ...rest: never[]) => (typeof chunk === 'string' ? logged.push(chunk) > 0 : write(chunk, ...rest))) as typeof process.stderr.write;
      // 1.5 s: past the 1 s margin, but not by the 1 s a pass needs to claim.
      const context = fakeLambdaContext({ timeoutMs: 1500 });
      await (worker === 'outboxPoller' ? poller({ source: 'aws.events' }, context) : relayHandler({ source: 'aws.events' }, context)).finally(() => {
        process.stderr.write = write;
      });
      assert.equal(emfSamples(lines).filter((s) => s.name === METRICS.passesFinished.name).length, 0, 'no heartbeat: the alarm fires');
      const error = logged.join('').split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Record<string, unknown>).find((l) => l.level === 'ERROR');
      assert.match(String(error?.message), /no time to claim: \d+ ms left at its start, lambda\.deadlineMarginMs 1000/);
      assert.equal(error?.worker, worker);
    });
  }

  it('a stamp the database refuses is logged as a warning; the pass still returns and still counts its heartbeat', async () => {
    lines = [];
    const refusing: Driver = Object.create(db.driver, { passRecordFinished: { value: async () => Promise.reject(new Error('permission denied for table queuebox_maintenance')) } });
    const warnings = createLogger({ serviceName: 'orders-svc', logLevel: 'WARN' });
    setContainer({ config: db.config, driver: refusing, logger: warnings, env: {}, writeMetrics: (line) => lines.push(line) });
    // Powertools writes a warning with console.warn: to standard error.
    const logged: string[] = [];
    const write = process.stderr.write.bind(process.stderr);
    process.stderr.write = ((chunk: string | Uint8Array, ...rest: never[]) => (typeof chunk === 'string' ? logged.push(chunk) > 0 : write(chunk, ...rest))) as typeof process.stderr.write;
    const result = await reclaimHandler({ source: 'aws.events' }, fakeLambdaContext({ timeoutMs: 1300 })).finally(() => {
      process.stderr.write = write;
    });
    assert.deepEqual(result, { outbox: 0, inbox: 0, outboxDead: 0, inboxDead: 0, throttled: true });
    assert.equal(emfSamples(lines).filter((s) => s.name === METRICS.passesFinished.name && s.dimensions.function === 'reclaim').length, 1);
    const warning = logged.join('').split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Record<string, unknown>).find((l) => l.level === 'WARN');
    assert.equal(warning?.message, 'the finished pass was not recorded in the database: queuebox status shows an earlier one');
    assert.equal(warning?.worker, 'reclaim');
    assert.match(String(warning?.error), /permission denied/);
  });
});
