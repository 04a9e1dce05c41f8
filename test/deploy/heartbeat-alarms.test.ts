/**
 * The heartbeat alarms follow each scheduled function's `custom.queuebox.functions.<name>`
 * schedule and timeout: the window (period × evaluation periods) always covers the longest gap
 * between two scheduled runs plus the timeout plus the slack, so two normal passes never alarm,
 * and is not much longer; it stays inside CloudWatch's limits; a schedule no alarm can follow (a
 * cron on weekdays only) gets no alarm and a packaging warning instead.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import QueueBoxServerlessPlugin from '../../lib/serverless/index.ts';
import { HEARTBEAT_SLACK_SECONDS, heartbeatWarnings, heartbeatWindow, defaultHeartbeatSchedules } from '../../lib/serverless/monitoring.ts';
import { scheduleMaxGapSeconds } from '../../lib/serverless/schedule-gap.ts';

type Alarm = { Properties: { MetricName: string; Dimensions: Array<{ Name: string; Value: string }>; Period: number; EvaluationPeriods: number; DatapointsToAlarm: number; TreatMissingData: string; AlarmDescription: string } };

describe('heartbeat alarms from the schedules', () => {
  const service = mkdtempSync(join(tmpdir(), 'qb-heartbeat-'));
  writeFileSync(join(service, 'queuebox.yml'), '{}\n');
  after(() => rmSync(service, { recursive: true, force: true }));

  it('reads the longest gap between runs of rate() and of every-day cron() schedules, and no gap from others', () => {
    assert.equal(scheduleMaxGapSeconds('rate(1 minute)'), 60);
    assert.equal(scheduleMaxGapSeconds('rate(5 minutes)'), 300);
    assert.equal(scheduleMaxGapSeconds('rate(2 hours)'), 7200);
    assert.equal(scheduleMaxGapSeconds('rate(1 day)'), 86_400);
    assert.equal(scheduleMaxGapSeconds('cron(0/10 * * * ? *)'), 600);
    assert.equal(scheduleMaxGapSeconds('cron(*/15 * ? * * *)'), 900);
    assert.equal(scheduleMaxGapSeconds('cron(0,5,30 * * * ? *)'), 1800, '30 → 0 of the next hour');
    assert.equal(scheduleMaxGapSeconds('cron(0 8-17 * * ? *)'), 15 * 3600, '17:00 → 08:00 the next day');
    assert.equal(scheduleMaxGapSeconds('cron(30 2 * * ? *)'), 86_400, 'once a day');
    for (const other of ['cron(0/5 8-17 ? * MON-FRI *)', 'cron(0 0 1 * ? *)', 'cron(0 12 L * ? *)', 'cron(0 * * * ? 2027)', 'cron(0 * * *)', 'cron(61 * * * ? *)', 'every 5 minutes']) {
      assert.equal(scheduleMaxGapSeconds(other), undefined, other);
    }
  });

  it('sizes every window to cover gap + timeout + slack, at most one period more, within CloudWatch\'s limits', () => {
    const schedules = ['rate(1 minute)', 'rate(2 minutes)', 'rate(5 minutes)', 'rate(7 minutes)', 'rate(1 hour)', 'rate(3 hours)', 'rate(1 day)', 'rate(6 days)', 'cron(0/10 * * * ? *)', 'cron(0 8-17 * * ? *)'];
    for (const schedule of schedules) {
      for (const timeout of [10, 30, 60, 300, 900]) {
        const window = heartbeatWindow({ schedule, timeout });
        assert.ok(!('reason' in window), `${schedule}, ${timeout} s: ${JSON.stringify(window)}`);
        const needed = scheduleMaxGapSeconds(schedule)! + timeout + HEARTBEAT_SLACK_SECONDS;
        const total = window.periodSeconds * window.evaluationPeriods;
        assert.ok(total >= needed && total < needed + window.periodSeconds, `${schedule}, ${timeout} s: ${total} s for ${needed} s`);
        assert.ok(window.periodSeconds % 60 === 0 && total <= (window.periodSeconds < 3600 ? 86_400 : 604_800), `${schedule}: ${window.periodSeconds} s × ${window.evaluationPeriods}`);
      }
    }
    assert.match((heartbeatWindow({ schedule: 'rate(7 days)', timeout: 60 }) as { reason: string }).reason, /more than the 7 days a CloudWatch alarm can watch/);
  });

  it('the plugin sizes each alarm from custom.queuebox.functions, and a schedule no alarm can follow gets a warning instead of an alarm', async () => {
    const serverless = {
      serviceDir: service,
      service: {
        service: 'shop',
        provider: { compiledCloudFormationTemplate: { Resources: {} as Record<string, Alarm> } },
        functions: {},
        custom: {
          queuebox: {
            allowMissingDatabase: true,
            functions: {
              outboxPoller: { schedule: 'cron(0/5 8-17 ? * MON-FRI *)' },
              inboxRelay: { schedule: 'cron(0/10 * * * ? *)', timeout: 120 },
              reclaim: { schedule: 'rate(15 minutes)', timeout: 60 },
            },
          },
        },
        package: {},
      },
      getProvider: () => ({ getStage: () => 'dev' }),
      classes: { Error },
    };
    const plugin = new QueueBoxServerlessPlugin(serverless as never, {}, { log: { notice: () => {}, info: () => {}, warning: () => {} } });
    await plugin.hooks.initialize!();
    await plugin.hooks['after:package:compileEvents']!();
    const alarms = serverless.service.provider.compiledCloudFormationTemplate.Resources;
    assert.equal(alarms.QueueBoxAlarmOutboxPollerHeartbeat, undefined, 'weekdays only: an alarm would fire every night');
    assert.equal(alarms.QueueBoxAlarmOutboxOldestPendingAge, undefined, 'weekdays only: no period can be sized from its gaps either');
    const relayAge = alarms.QueueBoxAlarmInboxOldestPendingAge!.Properties;
    assert.deepEqual([relayAge.Period, relayAge.EvaluationPeriods, relayAge.DatapointsToAlarm, relayAge.TreatMissingData], [840, 1, 1, 'notBreaching'], '600 s + 120 s + 90 s, in whole minutes');
    const relay = alarms.QueueBoxAlarmInboxRelayHeartbeat!.Properties;
    assert.deepEqual([relay.Period, relay.EvaluationPeriods, relay.DatapointsToAlarm, relay.TreatMissingData], [60, 15, 15, 'breaching'], '600 s + 120 s + 180 s');
    assert.deepEqual(relay.Dimensions, [{ Name: 'service', Value: 'queuebox' }, { Name: 'function', Value: 'inboxRelay' }]);
    const reclaim = alarms.QueueBoxAlarmReclaimHeartbeat!.Properties;
    assert.deepEqual([reclaim.Period, reclaim.EvaluationPeriods], [60, 19], '900 s + 60 s + 180 s');
    assert.match(reclaim.AlarmDescription, /no pass finished for 19 minutes \(schedule rate\(15 minutes\), timeout 60 s\)/);
    assert.deepEqual(heartbeatWarnings({ ...defaultHeartbeatSchedules(), outboxPoller: { schedule: 'cron(0/5 8-17 ? * MON-FRI *)', timeout: 60 } }), [
      'no heartbeat alarm for outboxPoller: its schedule cron(0/5 8-17 ? * MON-FRI *) does not run at one steady interval (use rate(…), or a cron(…) that runs every day)',
      'no backlog-age alarm for outboxPoller: its schedule cron(0/5 8-17 ? * MON-FRI *) does not run at one steady interval (use rate(…), or a cron(…) that runs every day)',
    ]);
    assert.deepEqual(heartbeatWarnings({ ...defaultHeartbeatSchedules(), inboxRelay: { schedule: 'rate(1 day)', timeout: 60 }, reclaim: { schedule: 'cron(0 0 1 * ? *)', timeout: 60 } }), [
      "no backlog-age alarm for inboxRelay: its schedule rate(1 day) with timeout 60 s leaves more than a day between two passes' ends, the longest period an alarm can give every pass",
      'no heartbeat alarm for reclaim: its schedule cron(0 0 1 * ? *) does not run at one steady interval (use rate(…), or a cron(…) that runs every day)',
    ], 'reclaim writes no age: only its heartbeat');
    assert.deepEqual(heartbeatWarnings(defaultHeartbeatSchedules()), []);
  });
});
