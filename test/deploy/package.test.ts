/**
 * `npm run package` of this repository as a fresh clone has it: its own `serverless.yml` (the
 * plugin, loaded from source) with the shipped `queuebox.example.yml` (no `queuebox.yml`), offline
 * (`allowMissingDatabase`, as the script sets it), in a scratch copy; then the CloudFormation
 * template is checked. Package contents are read from the zips themselves (no `unzip` needed).
 */
import assert from 'node:assert/strict';
import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { METRIC_NAMES, METRICS } from '../../lib/observability/metric-names.ts';
import { LAMBDA_NODE_TARGET } from '../../lib/serverless/bundle.ts';
import { FUNCTIONS, functionKey, functionLogicalId } from '../../lib/serverless/functions.ts';
import { explain, run } from '../helpers/packed-package.ts';
import { QUIET_OSLS_ENV, scratchRepoService } from '../helpers/repo-service.ts';
import { zipEntries } from '../helpers/zip-entries.ts';

type Resource = { Type: string; Properties: Record<string, unknown>; Condition?: string };

/** Replaces `Ref`s in a `Fn::Join` with readable placeholders and returns the text. */
function joinText(value: unknown): string {
  const join = (value as { 'Fn::Join': [string, unknown[]] })['Fn::Join'];
  return join[1].map((p) => (typeof p === 'string' ? p : `<${(p as { Ref: string }).Ref}>`)).join(join[0]);
}

describe('npm run package (offline, queuebox.example.yml)', { timeout: 300_000 }, () => {
  let service: string;
  let templateText: string;
  let template: { Resources: Record<string, Resource>; Conditions?: Record<string, unknown> };
  let resources: Record<string, Resource>;
  const ofType = (type: string) => Object.entries(resources).filter(([, r]) => r.Type === type);

  before(async () => {
    service = scratchRepoService('qb-package-');
    const env: NodeJS.ProcessEnv = { ...process.env, ...QUIET_OSLS_ENV, AWS_ACCESS_KEY_ID: '', AWS_PROFILE: '' };
    delete env.QUEUEBOX_CONFIG;
    const packaged = await run('npm', ['run', 'package', '--', '--stage', 'test'], { cwd: service, env, timeoutMs: 240_000 });
    assert.equal(packaged.code, 0, explain(packaged));
    assert.match(packaged.stderr, /no queuebox\.yml: building with queuebox\.example\.yml/);
    assert.match(packaged.stdout + packaged.stderr, /stage test has no database location \(allowMissingDatabase\)/);
    templateText = readFileSync(join(service, '.serverless/cloudformation-template-update-stack.json'), 'utf8');
    template = JSON.parse(templateText);
    resources = template.Resources;
  }, { timeout: 280_000 });
  after(() => rmSync(service, { recursive: true, force: true }));

  it('declares every function on nodejs24.x arm64 (the esbuild target and `engines` match), each shipping only its own bundle', () => {
    assert.equal(LAMBDA_NODE_TARGET, 'node24');
    assert.equal((JSON.parse(readFileSync('package.json', 'utf8')) as { engines: { node: string } }).engines.node, '>=24');
    const functions = ofType('AWS::Lambda::Function');
    assert.deepEqual(functions.map(([id]) => id).sort(), FUNCTIONS.map((f) => functionLogicalId(f.name)).sort());
    for (const fn of FUNCTIONS) {
      const props = resources[functionLogicalId(fn.name)]!.Properties;
      assert.equal(props.Runtime, 'nodejs24.x');
      assert.deepEqual(props.Architectures, ['arm64']);
      assert.equal(props.Handler, `.queuebox/${fn.name}/index.handler`);
      assert.equal(props.FunctionName, `queuebox-test-${functionKey(fn.name)}`);
      assert.equal((props.Environment as { Variables: Record<string, string> }).Variables.QUEUEBOX_CONFIG, '.queuebox/queuebox.yml', 'relative to /var/task, the working directory on Lambda');
      const shipped = zipEntries(join(service, `.serverless/${functionKey(fn.name)}.zip`));
      assert.deepEqual(shipped.filter((f) => !f.startsWith(`.queuebox/${fn.name}/`)), ['.queuebox/queuebox.yml'], 'nothing of another function');
      for (const file of ['index.js', 'index.js.map', 'package.json']) assert.ok(shipped.includes(`.queuebox/${fn.name}/${file}`), `${fn.name} ships ${file}`);
    }
    assert.equal(readFileSync(join(service, '.queuebox/queuebox.yml'), 'utf8'), readFileSync('queuebox.example.yml', 'utf8'), 'the shipped configuration is the example');
  });

  it('schedules the pollers, reclaim and retention, with a timeout that fits the schedule', () => {
    const rules = ofType('AWS::Events::Rule');
    const scheduled = FUNCTIONS.filter((f) => f.scheduled);
    assert.equal(rules.length, scheduled.length);
    for (const fn of scheduled) {
      const [, rule] = rules.find(([, r]) => JSON.stringify(r.Properties.Targets).includes(functionLogicalId(fn.name)))!;
      const match = /^rate\((\d+) (minute|minutes|hour|hours)\)$/.exec(String(rule.Properties.ScheduleExpression));
      assert.ok(match, `${fn.name}: ${String(rule.Properties.ScheduleExpression)}`);
      const periodSeconds = Number(match[1]) * (match[2]!.startsWith('hour') ? 3600 : 60);
      const timeout = resources[functionLogicalId(fn.name)]!.Properties.Timeout as number;
      assert.ok(timeout <= periodSeconds && timeout <= 900, `${fn.name}: timeout ${timeout}s must fit its ${periodSeconds}s schedule`);
    }
    assert.equal(resources.QueueboxOutboxPollerEventsRuleSchedule1!.Properties.ScheduleExpression, 'rate(1 minute)');
  });

  it('turns async retries off for every function (EventInvokeConfig MaximumRetryAttempts 0)', () => {
    const configs = ofType('AWS::Lambda::EventInvokeConfig');
    assert.equal(configs.length, FUNCTIONS.length);
    for (const [, c] of configs) assert.equal(c.Properties.MaximumRetryAttempts, 0);
  });

  it('wires the inbox: no HTTP API for a configuration without http sources, an SQS trigger with partial batch responses', () => {
    assert.deepEqual(ofType('AWS::ApiGatewayV2::Route'), []);
    assert.equal(resources.HttpApiStage, undefined);
    const [mapping] = ofType('AWS::Lambda::EventSourceMapping');
    assert.deepEqual(mapping![1].Properties.FunctionResponseTypes, ['ReportBatchItemFailures']);
    assert.match(joinText(mapping![1].Properties.EventSourceArn), /:sqs:<AWS::Region>:<AWS::AccountId>:partner-events$/);
  });

  it('gives every function its own role with only what it uses: the HTTP receiver can publish nowhere', () => {
    type Statement = { Action: string[]; Resource: unknown[] };
    const statementsOf = (fn: string): Statement[] => {
      const fnProps = resources[functionLogicalId(fn)]!.Properties as { Role: { 'Fn::GetAtt': [string, string] } };
      const role = resources[fnProps.Role['Fn::GetAtt'][0]]!.Properties as { Policies: Array<{ PolicyDocument: { Statement: unknown[] } }> };
      return role.Policies.flatMap((p) => p.PolicyDocument.Statement).flatMap((st) => {
        const s = st as Statement & { 'Fn::If'?: [string, Statement, unknown] };
        return s['Fn::If'] ? [s['Fn::If'][1]] : [s];
      });
    };
    const roles = new Set(FUNCTIONS.map((fn) => JSON.stringify((resources[functionLogicalId(fn.name)]!.Properties as { Role: unknown }).Role)));
    assert.equal(roles.size, FUNCTIONS.length, 'one role per function');
    assert.equal(resources.IamRoleLambdaExecution, undefined, 'no shared role');
    const text = (r: unknown) => (typeof r === 'string' ? r : joinText(r));
    const granted = (fn: string, action: string) => statementsOf(fn).filter((s) => s.Action.includes(action)).flatMap((s) => s.Resource.map(text));
    for (const fn of FUNCTIONS) {
      for (const s of statementsOf(fn.name)) {
        for (const action of s.Action) assert.ok(!action.includes('*'), `wildcard action ${action}`);
        assert.ok(!s.Resource.includes('*'), `${fn.name}: nothing on *`);
      }
      assert.deepEqual(granted(fn.name, 'logs:PutLogEvents'), [`arn:<AWS::Partition>:logs:<AWS::Region>:<AWS::AccountId>:log-group:/aws/lambda/queuebox-test-${functionKey(fn.name)}:*`]);
      assert.deepEqual(statementsOf(fn.name).filter((s) => s.Action.includes('secretsmanager:GetSecretValue')).flatMap((s) => s.Resource), [{ Ref: 'QueueBoxDatabaseSecretArn' }]);
    }
    assert.deepEqual(granted('outboxPoller', 'sqs:SendMessage'), ['arn:<AWS::Partition>:sqs:eu-west-1:123456789012:orders.fifo']);
    assert.deepEqual(granted('outboxPoller', 'events:PutEvents'), ['arn:<AWS::Partition>:events:<AWS::Region>:<AWS::AccountId>:event-bus/app-bus']);
    assert.deepEqual(granted('inboxSqs', 'sqs:ReceiveMessage'), ['arn:<AWS::Partition>:sqs:<AWS::Region>:<AWS::AccountId>:partner-events']);
    assert.deepEqual(granted('inboxHttp', 'ssm:GetParameter').filter((r) => !r.includes('QueueBoxDatabaseUrlParameter')), [], 'the example has no source secret');
    for (const fn of FUNCTIONS.filter((f) => f.name !== 'outboxPoller')) {
      assert.deepEqual([...granted(fn.name, 'sqs:SendMessage'), ...granted(fn.name, 'events:PutEvents')], [], `${fn.name} publishes nowhere`);
    }
  });

  it('keeps the database secret out of the template: the functions get where it is, not what it is', () => {
    assert.ok(!/postgres(ql)?:\/\/|mssql:\/\//.test(templateText), 'no connection string');
    for (const fn of FUNCTIONS) {
      const variables = (resources[functionLogicalId(fn.name)]!.Properties.Environment as { Variables: Record<string, string> }).Variables;
      assert.equal(variables.QUEUEBOX_DATABASE_URL, undefined);
      assert.ok('QUEUEBOX_DATABASE_SECRET_ID' in variables && 'QUEUEBOX_DATABASE_URL_PARAMETER' in variables);
    }
    const http = (resources.QueueboxInboxHttpLambdaFunction!.Properties.Environment as { Variables: Record<string, string> }).Variables;
    assert.equal(http.QUEUEBOX_SECRETS_PARAMETER_PATH, '/queuebox/test');
  });

  it('reserves concurrency for the receivers by default', () => {
    assert.equal(resources.QueueboxInboxHttpLambdaFunction!.Properties.ReservedConcurrentExecutions, 10);
    assert.equal(resources.QueueboxInboxSqsLambdaFunction!.Properties.ReservedConcurrentExecutions, 5);
  });

  it('has a heartbeat alarm per scheduled pass (poller, relay, reclaim): missing data breaching, on the emitted dimensions, over a window that two normal runs on the rule\'s schedule never reach', () => {
    type Alarm = { MetricName: string; Namespace: string; Dimensions: Array<{ Name: string; Value: unknown }>; Statistic: string; Period: number; EvaluationPeriods: number; DatapointsToAlarm: number; Threshold: number; ComparisonOperator: string; TreatMissingData: string };
    const heartbeats = ofType('AWS::CloudWatch::Alarm').map(([id, a]) => [id, a.Properties as Alarm] as const).filter(([, a]) => a.MetricName === METRICS.passesFinished.name);
    assert.deepEqual(heartbeats.map(([id]) => id).sort(), ['QueueBoxAlarmInboxRelayHeartbeat', 'QueueBoxAlarmOutboxPollerHeartbeat', 'QueueBoxAlarmReclaimHeartbeat']);
    for (const [id, a] of heartbeats) {
      const fn = a.Dimensions.find((d) => d.Name === 'function')!.Value as string;
      assert.deepEqual(a.Dimensions, [{ Name: 'service', Value: 'queuebox' }, { Name: 'function', Value: fn }], `${id}: exactly the dimensions the handler emits`);
      assert.deepEqual([a.Namespace, a.Statistic, a.Threshold, a.ComparisonOperator, a.TreatMissingData], ['QueueBox', 'Sum', 1, 'LessThanThreshold', 'breaching'], id);
      assert.equal(a.DatapointsToAlarm, a.EvaluationPeriods, `${id}: every period of the window without a finished pass`);
      const [, rule] = ofType('AWS::Events::Rule').find(([, r]) => JSON.stringify(r.Properties.Targets).includes(functionLogicalId(fn)))!;
      const match = /^rate\((\d+) (minutes?|hours?)\)$/.exec(String(rule.Properties.ScheduleExpression))!;
      const every = Number(match[1]) * (match[2]!.startsWith('hour') ? 3600 : 60);
      const timeout = resources[functionLogicalId(fn)]!.Properties.Timeout as number;
      const window = a.Period * a.EvaluationPeriods;
      // One pass may finish at once and the next only at its timeout: runs finish up to every + timeout apart.
      assert.ok(window >= every + timeout + 120, `${id}: ${window} s covers ${every} s between runs, a ${timeout} s timeout and late metrics`);
      assert.ok(window <= every + timeout + 300, `${id}: ${window} s is not much longer than needed`);
    }
    const poller = heartbeats.find(([id]) => id === 'QueueBoxAlarmOutboxPollerHeartbeat')![1];
    assert.deepEqual([poller.Period, poller.EvaluationPeriods], [60, 5], 'rate(1 minute), 60 s timeout: 5 minutes without a finished pass');
  });

  it('passes cfn-lint with zero errors, and no warning about a resource of QueueBox\'s', async () => {
    const lint = await run('cfn-lint', ['.serverless/cloudformation-template-update-stack.json'], { cwd: service, timeoutMs: 120_000 });
    assert.ok(!/ENOENT/.test(lint.stderr), 'cfn-lint is not installed: pip install cfn-lint');
    // Exit status bits: 1 fatal, 2 errors, 4 warnings, 8 informational.
    assert.equal(lint.code & 3, 0, `cfn-lint errors:\n${lint.stdout}${lint.stderr}`);
    // One finding per paragraph: its rule and message, then the file and line.
    const ours = lint.stdout.split(/\n\s*\n/).filter((finding) => /^W\d/.test(finding.trim()) && /Queue[Bb]ox|HttpApiRoutePostInbox/.test(finding));
    assert.deepEqual(ours, [], 'cfn-lint warns about QueueBox\'s resources');
  });

  it('has a dashboard whose body is JSON naming only metrics the code emits, with the emitted dimensions', () => {
    const [[, dashboard]] = ofType('AWS::CloudWatch::Dashboard') as [[string, Resource]];
    const body = JSON.parse(joinText(dashboard.Properties.DashboardBody)) as { widgets: Array<{ type: string; properties: { title: string; metrics: unknown[][]; query?: string } }> };
    const named = new Set<string>();
    const logWidgets = body.widgets.filter((w) => w.type === 'log');
    for (const widget of body.widgets.filter((w) => w.type === 'metric')) {
      assert.ok(widget.properties.metrics.length > 0, `widget ${widget.properties.title} has metrics`);
      for (const row of widget.properties.metrics) {
        if (row[0] === 'QueueBox') {
          const name = row[1] as string;
          named.add(name);
          const metric = Object.values(METRICS).find((m) => m.name === name)!;
          assert.ok(metric, `${name} is in METRICS`);
          const dims = row.slice(2, -1).filter((_, i) => i % 2 === 0);
          assert.deepEqual([...dims].sort(), ['service', ...metric.dimensions].sort(), `${name} dimensions`);
        } else if (row[0] === 'AWS/Lambda') {
          assert.ok(['Errors', 'Throttles', 'Duration'].includes(row[1] as string));
        } else {
          const expression = (row[0] as { expression: string }).expression;
          const name = /MetricName="([^"]+)"/.exec(expression)![1]!;
          assert.ok(METRIC_NAMES.includes(name as never), `${name} in METRICS`);
          named.add(name);
        }
      }
    }
    for (const m of ['queuebox_outbox_messages_total', 'queuebox_claims_lost_total', 'queuebox_outbox_messages_reclaimed_total', 'queuebox_outbox_oldest_pending_age_seconds', 'queuebox_inbox_oldest_pending_age_seconds', 'queuebox_inbox_messages_total', 'queuebox_inbox_failed_messages_total', 'queuebox_inbox_rejections_total', 'queuebox_outbox_publish_duration_seconds']) {
      assert.ok(named.has(m), `dashboard shows ${m}`);
    }
    // The last finished pass: a Logs Insights table over the three functions' log groups, reading
    // the heartbeat's EMF lines (the same metric, service and dimension the alarms watch).
    assert.deepEqual(logWidgets.map((w) => w.properties.title), ['Last finished pass']);
    const scheduled = ['outboxPoller', 'inboxRelay', 'reclaim'];
    assert.equal(
      logWidgets[0]!.properties.query,
      `${scheduled.map((fn) => `SOURCE '/aws/lambda/<${functionLogicalId(fn)}>'`).join(' | ')} | filter ispresent(queuebox_passes_finished_total) and service = "queuebox" | stats max(@timestamp) as last_finished_pass by \`function\` | sort \`function\``,
    );
    const logGroups = ofType('AWS::Logs::LogGroup').map(([, g]) => g.Properties.LogGroupName);
    for (const fn of scheduled) assert.ok(logGroups.includes(`/aws/lambda/${String(resources[functionLogicalId(fn)]!.Properties.FunctionName)}`), `${fn}'s log group is the function's name`);
    const lambdaRows = body.widgets.flatMap((w) => w.properties.metrics ?? []).filter((r) => r[0] === 'AWS/Lambda');
    for (const fn of FUNCTIONS) for (const metric of ['Errors', 'Throttles', 'Duration']) {
      assert.ok(lambdaRows.some((r) => r[1] === metric && r[3] === `<${functionLogicalId(fn.name)}>`), `${fn.name} ${metric}`);
    }
  });

  it('has the spec alarms, each on an emitted metric with exactly the emitted dimensions, notifying the optional topic', () => {
    const alarms = ofType('AWS::CloudWatch::Alarm').map(([, a]) => a.Properties as { MetricName: string; Namespace: string; Dimensions: Array<{ Name: string; Value: unknown }>; Threshold: number; Period: number; EvaluationPeriods: number; AlarmActions: unknown });
    const queuebox = alarms.filter((a) => a.Namespace === 'QueueBox');
    for (const a of queuebox) {
      const metric = Object.values(METRICS).find((m) => m.name === a.MetricName);
      assert.ok(metric, `${a.MetricName} is in METRICS`);
      assert.deepEqual(a.Dimensions.map((d) => d.Name).sort(), ['service', ...metric.dimensions].sort());
      assert.equal(a.Dimensions.find((d) => d.Name === 'service')!.Value, 'queuebox');
      assert.deepEqual(a.AlarmActions, { 'Fn::If': ['QueueBoxAlarmTopicSet', [{ Ref: 'QueueBoxAlarmTopicArn' }], { Ref: 'AWS::NoValue' }] });
    }
    const age = queuebox.filter((a) => a.MetricName.endsWith('oldest_pending_age_seconds'));
    assert.equal(age.length, 2);
    for (const a of age) assert.equal(a.Period * a.EvaluationPeriods, 300, "for 5 minutes");
    for (const a of age) assert.equal(a.Threshold, 300);
    assert.deepEqual(queuebox.filter((a) => a.MetricName === 'queuebox_claims_lost_total').map((a) => a.Dimensions.find((d) => d.Name === 'component')!.Value).sort(), ['inbox', 'outbox', 'pull']);
    assert.deepEqual(queuebox.filter((a) => a.MetricName === 'queuebox_outbox_messages_total').map((a) => a.Dimensions.find((d) => d.Name === 'status')!.Value), ['dead']);
    const errors = alarms.filter((a) => a.Namespace === 'AWS/Lambda' && a.MetricName === 'Errors');
    assert.equal(errors.length, FUNCTIONS.length);
    assert.ok(template.Conditions?.QueueBoxAlarmTopicSet, 'the topic condition is declared');
  });
});
