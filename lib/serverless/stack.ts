/**
 * Everything the stack derives from the QueueBox configuration, which the Serverless plugin
 * (`plugin.ts`) adds to the service: one least-privilege IAM role per function (`roles.ts`), the
 * inbox triggers (HTTP routes, SQS queues), the names of the source secrets, the dashboard and
 * alarm resources, and the functions' X-Ray tracing mode.
 * Values the template only knows at deploy time are `Fn::Join`s of `Ref`s, never `${…}`.
 */
import type { QueueBoxConfig } from '../config/schema.ts';
import { alarmResources } from './alarms.ts';
import { secretEnvNames } from '../runtime/secrets.ts';
import { dashboardResource } from './dashboard.ts';
import type { Deployment } from './functions.ts';
import { defaultHeartbeatSchedules, type HeartbeatSchedules } from './monitoring.ts';
import { checkedName, roleResources } from './roles.ts';
import { selfInvokingFunctions } from './scale-out-settings.ts';

type Cfn = unknown;

/** What the plugin adds to the service for one configuration. */
export interface StackFragment {
  /** Environment variables the inbox sources read secrets from (each a SecureString under the secrets path). */
  secretNames: string[];
  inboxHttpEvents: Cfn[];
  /** API Gateway route keys of the HTTP sources (`POST /inbox/stripe`): the routes QueueBox throttles. */
  httpRouteKeys: string[];
  inboxSqsEvents: Cfn[];
  resources: { Resources: Record<string, Cfn> };
  /**
   * The functions' tracing: `{ lambda: 'Active' }` when `observability.tracing` is on (each function's
   * role then grants `xray:PutTraceSegments` and `xray:PutTelemetryRecords`, which X-Ray only
   * allows on `*`), else `null`: no tracing setting and no X-Ray rights.
   */
  providerTracing: { lambda: 'Active' } | null;
}

const partition = { Ref: 'AWS::Partition' };
const region = { Ref: 'AWS::Region' };
const account = { Ref: 'AWS::AccountId' };

/**
 * The ARN of an SQS queue from its URL: `https://sqs.<region>.amazonaws.com/<account>/<name>`
 * (or any endpoint with `/<account>/<name>` as its path). Region: the destination's `region`,
 * else the host's, else the stack's.
 */
export function sqsQueueArn(queueUrl: string, destinationRegion?: string): Cfn {
  const url = new URL(queueUrl);
  const [accountId, name] = url.pathname.split('/').filter((p) => p !== '');
  if (accountId === undefined || name === undefined) throw new Error(`cannot derive a queue ARN from ${queueUrl}: expected /<account>/<queue> in the path`);
  checkedName(accountId, /^\d{12}$/, 'account id in queue URL');
  checkedName(name, QUEUE_NAME, 'queue name in queue URL');
  const hostRegion = /^sqs\.([a-z0-9-]+)\.amazonaws\.com/.exec(url.hostname)?.[1];
  const r = destinationRegion ?? hostRegion;
  return { 'Fn::Join': ['', ['arn:', partition, ':sqs:', r ?? region, `:${accountId}:${name}`]] };
}

/** The ARN of an event bus from its name or ARN (a name is in the stack's account and region, or the destination's region). */
export function eventBusArn(eventBusName: string, destinationRegion?: string): Cfn {
  if (eventBusName.startsWith('arn:')) return checkedName(eventBusName, /^arn:[a-z-]+:events:[a-z0-9-]+:\d{12}:event-bus\/[A-Za-z0-9/._-]{1,256}$/, 'event bus ARN');
  checkedName(eventBusName, /^[A-Za-z0-9/._-]{1,256}$/, 'event bus name');
  return { 'Fn::Join': ['', ['arn:', partition, ':events:', destinationRegion ?? region, ':', account, `:event-bus/${eventBusName}`]] };
}

/** SQS queue names: letters, digits, `-` and `_`, up to 80, optionally `.fifo`. */
const QUEUE_NAME = /^[A-Za-z0-9_-]{1,80}(\.fifo)?$/;

/**
 * Builds the fragment for one configuration and deployment (`schedules`: the scheduled functions'
 * schedules and timeouts, which size the heartbeat alarms; `reservedConcurrency`: by function, a
 * reserved concurrency of 1 or 0 keeps scale-out from invoking); throws naming a destination or
 * queue whose name AWS would not accept.
 */
export function buildStackFragment(
  config: QueueBoxConfig,
  deployment: Deployment,
  schedules: HeartbeatSchedules = defaultHeartbeatSchedules(),
  reservedConcurrency: Readonly<Record<string, number | undefined>> = {},
): StackFragment {
  const destinations = Object.values(config.destinations);
  const queues = destinations.flatMap((d) => (d.type === 'sqs' ? [sqsQueueArn(d.queueUrl, d.region)] : []));
  const buses = destinations.flatMap((d) => (d.type === 'eventbridge' ? [eventBusArn(d.eventBusName, d.region)] : []));
  const sources = Object.entries(config.inbox.sources).sort(([a], [b]) => a.localeCompare(b));
  const inboxHttpEvents = sources
    .filter(([, s]) => s.type === 'http')
    .map(([, s]) => ({ httpApi: { method: 'POST', path: `${config.inbox.basePath}${s.path}` } }));
  const inboxSqsEvents = sources
    .filter(([, s]) => s.type === 'sqs')
    .map(([name, s]) => ({
      sqs: {
        arn: { 'Fn::Join': ['', ['arn:', partition, ':sqs:', region, ':', account, `:${checkedName(s.queueName ?? name, QUEUE_NAME, `queue of inbox source ${name}`)}`]] },
        batchSize: 10,
        functionResponseType: 'ReportBatchItemFailures',
      },
    }));
  const triggerQueues = sources.filter(([, s]) => s.type === 'sqs').map(([name, s]) => s.queueName ?? name);
  const secretNames = secretEnvNames(config);
  const roles = roleResources({ destinationQueues: queues, destinationBuses: buses, triggerQueues, secretNames, tracing: config.observability.tracing, deployment, selfInvoking: selfInvokingFunctions(config, reservedConcurrency) });
  return {
    secretNames,
    inboxHttpEvents,
    httpRouteKeys: inboxHttpEvents.map((e) => `${e.httpApi.method} ${e.httpApi.path}`),
    inboxSqsEvents,
    resources: { Resources: { ...roles, ...dashboardResource(config), ...alarmResources(config, schedules) } },
    providerTracing: config.observability.tracing ? { lambda: 'Active' } : null,
  };
}
