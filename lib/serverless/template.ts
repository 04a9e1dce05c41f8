/**
 * What the plugin adds to the compiled CloudFormation template once osls has compiled the
 * functions and events: the roles, dashboard and alarms of `stack.ts`, the deploy-time
 * parameters and conditions they refer to, throttling and an access log for QueueBox's HTTP
 * routes only, and the removal of QueueBox's trigger queues from the service's shared role.
 * Every logical id it adds starts with `QueueBox`; one the service already has stops packaging.
 */
import type { PluginOptions } from './options.ts';
import type { StackFragment } from './stack.ts';

type Cfn = Record<string, unknown>;

/** The compiled template (the part the plugin touches). */
export interface Template {
  Resources: Record<string, Cfn & { Type?: string; Properties?: Cfn; DependsOn?: string | string[] }>;
  Parameters?: Record<string, unknown>;
  Conditions?: Record<string, unknown>;
}

/** Deploy-time inputs of `extendTemplate`. */
export interface TemplateInputs {
  fragment: StackFragment;
  options: PluginOptions;
  /** `custom.queuebox.secretsParameterPath` or its default `/queuebox/<stage>`. */
  secretsParameterPath: string;
  /** Attach the VPC access policy to the roles. */
  vpcAccess: boolean;
  /** Log retention (days) of the access log group. */
  logRetentionInDays: number;
  /** Logical ids in the service's own `resources` (they would replace ours silently). */
  serviceResourceIds: Set<string>;
  /** SQS ARNs the service's own functions are triggered by (kept in the shared role). */
  serviceSqsArns: unknown[];
}

const notEmpty = (parameter: string) => ({ 'Fn::Not': [{ 'Fn::Equals': [{ Ref: parameter }, ''] }] });

/** The access log line: one JSON object per request, with the route it matched. */
const ACCESS_LOG_FORMAT = JSON.stringify({
  requestId: '$context.requestId',
  ip: '$context.identity.sourceIp',
  requestTime: '$context.requestTime',
  routeKey: '$context.routeKey',
  status: '$context.status',
  responseLength: '$context.responseLength',
  integrationError: '$context.integrationErrorMessage',
});

/** Adds QueueBox's part to the compiled template in place; throws naming a logical id that would collide. */
export function extendTemplate(template: Template, inputs: TemplateInputs): void {
  const { fragment, options } = inputs;
  const parameters: Record<string, unknown> = {
    QueueBoxAlarmTopicArn: { Type: 'String', Default: options.alarmTopicArn, Description: 'SNS topic for alarm notifications (empty for none)' },
    QueueBoxDatabaseSecretArn: { Type: 'String', Default: options.databaseSecretArn, Description: 'Secrets Manager secret holding the database connection string (empty for none)' },
    QueueBoxDatabaseUrlParameter: { Type: 'String', Default: options.databaseUrlParameter, Description: 'SSM SecureString holding the database connection string (empty for none)' },
    QueueBoxVpcAccessParam: { Type: 'String', Default: String(inputs.vpcAccess), AllowedValues: ['true', 'false'], Description: 'Whether the functions run in a VPC' },
  };
  // Only a configuration with source secrets grants reading them.
  if (fragment.secretNames.length > 0) {
    parameters.QueueBoxSecretsParameterPath = { Type: 'String', Default: inputs.secretsParameterPath, Description: 'SSM path of the inbox source secrets' };
  }
  const conditions: Record<string, unknown> = {
    QueueBoxAlarmTopicSet: notEmpty('QueueBoxAlarmTopicArn'),
    QueueBoxDatabaseSecretSet: notEmpty('QueueBoxDatabaseSecretArn'),
    QueueBoxDatabaseUrlParameterSet: notEmpty('QueueBoxDatabaseUrlParameter'),
    QueueBoxVpcAccess: { 'Fn::Equals': [{ Ref: 'QueueBoxVpcAccessParam' }, 'true'] },
  };
  const resources: Template['Resources'] = { ...(fragment.resources.Resources as Template['Resources']) };
  const stage = template.Resources.HttpApiStage;
  const routeIds = Object.entries(template.Resources)
    .filter(([, r]) => r.Type === 'AWS::ApiGatewayV2::Route' && fragment.httpRouteKeys.includes(String(r.Properties?.RouteKey)))
    .map(([id]) => id);
  const addAccessLog = stage !== undefined && fragment.httpRouteKeys.length > 0 && options.httpApi.accessLogs && stage.Properties?.AccessLogSettings === undefined;
  if (addAccessLog) {
    resources.QueueBoxHttpApiAccessLogs = { Type: 'AWS::Logs::LogGroup', Properties: { RetentionInDays: inputs.logRetentionInDays } };
  }

  for (const [section, added] of [['Resources', resources], ['Parameters', parameters], ['Conditions', conditions]] as const) {
    const existing = (template[section] ??= {}) as Record<string, unknown>;
    for (const id of Object.keys(added)) {
      if (id in existing || inputs.serviceResourceIds.has(id)) throw new Error(`the service already defines ${id} (${section}); QueueBox's plugin adds a resource of that logical id: rename yours`);
      existing[id] = added[id];
    }
  }

  if (stage !== undefined && fragment.httpRouteKeys.length > 0) {
    const properties = (stage.Properties ??= {});
    const routeSettings = (properties.RouteSettings ?? {}) as Record<string, unknown>;
    for (const key of fragment.httpRouteKeys) {
      routeSettings[key] = { ThrottlingRateLimit: options.httpApi.throttlingRateLimit, ThrottlingBurstLimit: options.httpApi.throttlingBurstLimit };
    }
    properties.RouteSettings = routeSettings;
    // Route settings name routes by key: the stage must be created after them.
    stage.DependsOn = [...new Set([...[stage.DependsOn ?? []].flat(), ...routeIds])];
    if (addAccessLog) {
      properties.AccessLogSettings = { DestinationArn: { 'Fn::GetAtt': ['QueueBoxHttpApiAccessLogs', 'Arn'] }, Format: ACCESS_LOG_FORMAT };
    }
  }
  removeTriggerQueuesFromSharedRole(template, fragment, inputs.serviceSqsArns);
}

/**
 * osls grants every function's SQS trigger queues to the shared role of the service's own
 * functions; QueueBox's trigger queues are for `queueboxInboxSqs` (its own role) alone.
 */
function removeTriggerQueuesFromSharedRole(template: Template, fragment: StackFragment, serviceSqsArns: unknown[]): void {
  const role = template.Resources.IamRoleLambdaExecution?.Properties as { Policies?: Array<{ PolicyDocument: { Statement: Array<{ Action?: unknown; Resource?: unknown }> } }> } | undefined;
  const statements = role?.Policies?.[0]?.PolicyDocument.Statement;
  if (statements === undefined) return;
  const ours = new Set(fragment.inboxSqsEvents.map((e) => JSON.stringify((e as { sqs: { arn: unknown } }).sqs.arn)));
  const theirs = new Set(serviceSqsArns.map((arn) => JSON.stringify(arn)));
  for (let i = statements.length - 1; i >= 0; i--) {
    const statement = statements[i]!;
    if (!Array.isArray(statement.Action) || !statement.Action.includes('sqs:ReceiveMessage') || !Array.isArray(statement.Resource)) continue;
    statement.Resource = statement.Resource.filter((r) => !ours.has(JSON.stringify(r)) || theirs.has(JSON.stringify(r)));
    if ((statement.Resource as unknown[]).length === 0) statements.splice(i, 1);
  }
}
