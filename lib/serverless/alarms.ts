/**
 * Renders the alarms of `monitoring.ts` into `AWS::CloudWatch::Alarm` resources. Notifications go
 * to the SNS topic of the `alarmTopicArn` deploy parameter when it is set (condition
 * `QueueBoxAlarmTopicSet`, declared in `serverless.yml`), and nowhere otherwise.
 */
import { METRICS } from '../observability/metric-names.ts';
import { functionLogicalId } from './functions.ts';
import { alarmDefinitions, defaultHeartbeatSchedules, emittedDimensions, type HeartbeatSchedules, type MonitoringConfig } from './monitoring.ts';

/** Name of the CloudFormation condition that is true when an alarm topic was given. */
export const ALARM_TOPIC_CONDITION = 'QueueBoxAlarmTopicSet';
/** Name of the CloudFormation parameter carrying the topic ARN (empty: no notifications). */
export const ALARM_TOPIC_PARAMETER = 'QueueBoxAlarmTopicArn';

/** Alarm resources keyed by logical id (`QueueBoxAlarm<id>`); `schedules` size the heartbeat alarms. */
export function alarmResources(config: MonitoringConfig, schedules: HeartbeatSchedules = defaultHeartbeatSchedules()): Record<string, unknown> {
  const actions = { 'Fn::If': [ALARM_TOPIC_CONDITION, [{ Ref: ALARM_TOPIC_PARAMETER }], { Ref: 'AWS::NoValue' }] };
  const resources: Record<string, unknown> = {};
  for (const alarm of alarmDefinitions(schedules)) {
    const q = alarm.query;
    const metric =
      'key' in q
        ? {
            Namespace: config.observability.namespace,
            MetricName: METRICS[q.key].name,
            Dimensions: Object.entries(emittedDimensions(config, q)).map(([Name, Value]) => ({ Name, Value })),
          }
        : { Namespace: 'AWS/Lambda', MetricName: q.metric, Dimensions: [{ Name: 'FunctionName', Value: { Ref: functionLogicalId(q.fn.name) } }] };
    resources[`QueueBoxAlarm${alarm.id}`] = {
      Type: 'AWS::CloudWatch::Alarm',
      Properties: {
        AlarmDescription: alarm.description,
        ...metric,
        Statistic: q.stat,
        Period: alarm.periodSeconds,
        EvaluationPeriods: alarm.evaluationPeriods,
        DatapointsToAlarm: alarm.evaluationPeriods,
        Threshold: alarm.threshold,
        ComparisonOperator: alarm.comparison,
        // Counters and gauges: no data means no pass reported (no traffic, or the function failed:
        // its Errors alarm fires). The heartbeat: no data means no pass finished, the failure itself.
        TreatMissingData: alarm.treatMissingData,
        AlarmActions: actions,
        OKActions: actions,
      },
    };
  }
  return resources;
}
