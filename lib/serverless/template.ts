/**
 * What the plugin adds to the compiled CloudFormation template once osls has compiled the
 * functions and events: the roles, dashboard and alarms of `stack.ts`, the deploy-time
 * parameters and conditions they refer to, throttling and an access log for QueueBox's HTTP
 * routes only, and the removal of QueueBox's trigger queues from the service's shared role.
 * Every logical id it adds starts with `QueueBox`; one the service already has stops packaging.
 * On an HTTP API the service does not create (`provider.httpApi.id`) there is no stage to set:
 * that is said (a warning), or refused when `custom.queuebox.httpApi` asked for throttling.
 */
import { FUNCTIONS, functionLogicalId } from './functions.ts';
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
  /** The `custom.queuebox.httpApi` throttling keys the service set itself (not defaults). */
  explicitHttpApiThrottling: string[];
}

/**
 * True when one of `functionIds` (QueueBox's compiled functions) runs in a VPC. Read from the
 * compiled `VpcConfig`, not `provider.vpc`: osls's function compiler sets an empty `provider.vpc`
 * for a service with none, and drops a `VpcConfig` without both subnets and security groups.
 */
export function functionsInVpc(template: Template, functionIds: readonly string[]): boolean {
  const given = (value: unknown) => value !== undefined && value !== null && (!Array.isArray(value) || value.length > 0);
  return functionIds.some((id) => {
    const vpc = template.Resources[id]?.Properties?.VpcConfig as { SubnetIds?: unknown; SecurityGroupIds?: unknown } | undefined;
    return vpc !== undefined && given(vpc.SubnetIds) && given(vpc.SecurityGroupIds);
  });
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

/**
 * Adds QueueBox's part to the compiled template in place and returns warnings to show; throws
 * naming a logical id that would collide, or explicit route throttling that cannot be applied.
 */
export function extendTemplate(template: Template, inputs: TemplateInputs): string[] {
  const { fragment, options } = inputs;
  const warnings: string[] = [];
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
  if (stage === undefined && routeIds.length > 0) warnings.push(sharedHttpApiCheck(fragment.httpRouteKeys, options, inputs.explicitHttpApiThrottling));
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
  // osls makes each function depend on its role and each route on its integration, which their
  // properties reference already (cfn-lint W3005 on every QueueBox function and route).
  for (const id of [...FUNCTIONS.map((f) => functionLogicalId(f.name)), ...routeIds]) {
    const resource = template.Resources[id];
    if (resource !== undefined) dropRedundantDependsOn(resource);
  }
  return warnings;
}

/** Removes from a resource's `DependsOn` the resources its properties name by `Ref` or `Fn::GetAtt` (CloudFormation orders those already). */
function dropRedundantDependsOn(resource: { DependsOn?: string | string[]; Properties?: Record<string, unknown> }): void {
  if (resource.DependsOn === undefined) return;
  const named = new Set<string>();
  const walk = (node: unknown): void => {
    if (Array.isArray(node)) node.forEach(walk);
    else if (node !== null && typeof node === 'object') {
      for (const [key, value] of Object.entries(node)) {
        if (key === 'Ref' && typeof value === 'string') named.add(value);
        else if (key === 'Fn::GetAtt') named.add(Array.isArray(value) ? String(value[0]) : String(value).split('.')[0]!);
        else walk(value);
      }
    }
  };
  walk(resource.Properties);
  const kept = [resource.DependsOn].flat().filter((id) => !named.has(id));
  if (kept.length === 0) delete resource.DependsOn;
  else resource.DependsOn = kept;
}

/**
 * osls creates no stage for an HTTP API it does not create (`provider.httpApi.id`): QueueBox's
 * routes join that API's stage, which this stack cannot change, so their throttling and access
 * log would silently be missing. A warning; explicit throttling, which cannot be had, stops packaging.
 */
function sharedHttpApiCheck(routeKeys: string[], options: PluginOptions, explicitThrottling: string[]): string {
  const routes = routeKeys.join(', ');
  const keys = explicitThrottling.map((k) => `custom.queuebox.httpApi.${k}`).join(' and ');
  if (explicitThrottling.length > 0) {
    throw new Error(
      `${keys} cannot be applied: the inbox routes (${routes}) are on an existing HTTP API (provider.httpApi.id) whose stage this stack does not create. ` +
        `Remove ${keys} and set route throttling for ${routes} on that API's stage instead`,
    );
  }
  const missing = options.httpApi.accessLogs ? 'no throttling (custom.queuebox.httpApi) and no access log' : 'no throttling (custom.queuebox.httpApi)';
  return (
    `the inbox routes (${routes}) are on an existing HTTP API (provider.httpApi.id) whose stage this stack does not create: they get ${missing} from QueueBox. ` +
    `Configure route throttling for ${routes}${options.httpApi.accessLogs ? ' and an access log' : ''} on that API's stage`
  );
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
