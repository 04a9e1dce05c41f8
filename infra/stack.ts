/**
 * Everything the stack derives from the QueueBox configuration, written by `infra/build.ts` to
 * `dist/stack.json` and read by `serverless.yml` through `${file(dist/stack.json):…}`:
 * least-privilege IAM statements, the inbox triggers (HTTP routes, SQS queues) and the
 * dashboard and alarm resources, and the functions' X-Ray tracing mode.
 *
 * IAM: `sqs:SendMessage` on each SQS destination queue, `events:PutEvents` on each EventBridge
 * destination bus. Nothing else: the SQS trigger's receive/delete rights are added by the
 * framework on exactly the trigger queues, and logs rights by the framework on the service's log
 * groups. Values the template only knows at deploy time are `Fn::Join`s of `Ref`s, never `${…}`.
 */
import type { QueueBoxConfig } from '../lib/config/schema.ts';
import { alarmResources } from './alarms.ts';
import { dashboardResource } from './dashboard.ts';

type Cfn = unknown;

/** `dist/stack.json`. */
export interface StackFragment {
  iamStatements: Cfn[];
  inboxHttpEvents: Cfn[];
  inboxSqsEvents: Cfn[];
  resources: { Resources: Record<string, Cfn> };
  /**
   * `provider.tracing`: `{ lambda: 'Active' }` when `observability.tracing` is on (the framework
   * then grants `xray:PutTraceSegments` and `xray:PutTelemetryRecords`, which X-Ray only allows on
   * `*`), else `null`: no tracing setting and no X-Ray rights.
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
  const hostRegion = /^sqs\.([a-z0-9-]+)\.amazonaws\.com/.exec(url.hostname)?.[1];
  const r = destinationRegion ?? hostRegion;
  return { 'Fn::Join': ['', ['arn:', partition, ':sqs:', r ?? region, `:${accountId}:${name}`]] };
}

/** The ARN of an event bus from its name or ARN (a name is in the stack's account and region, or the destination's region). */
export function eventBusArn(eventBusName: string, destinationRegion?: string): Cfn {
  if (eventBusName.startsWith('arn:')) return eventBusName;
  return { 'Fn::Join': ['', ['arn:', partition, ':events:', destinationRegion ?? region, ':', account, `:event-bus/${eventBusName}`]] };
}

/** Builds the fragment for one configuration. */
export function buildStackFragment(config: QueueBoxConfig): StackFragment {
  const destinations = Object.values(config.destinations);
  const queues = destinations.flatMap((d) => (d.type === 'sqs' ? [sqsQueueArn(d.queueUrl, d.region)] : []));
  const buses = destinations.flatMap((d) => (d.type === 'eventbridge' ? [eventBusArn(d.eventBusName, d.region)] : []));
  const iamStatements: Cfn[] = [];
  if (queues.length > 0) iamStatements.push({ Effect: 'Allow', Action: ['sqs:SendMessage'], Resource: queues });
  if (buses.length > 0) iamStatements.push({ Effect: 'Allow', Action: ['events:PutEvents'], Resource: buses });

  const sources = Object.entries(config.inbox.sources).sort(([a], [b]) => a.localeCompare(b));
  const inboxHttpEvents = sources
    .filter(([, s]) => s.type === 'http')
    .map(([, s]) => ({ httpApi: { method: 'POST', path: `${config.inbox.basePath}${s.path}` } }));
  const inboxSqsEvents = sources
    .filter(([, s]) => s.type === 'sqs')
    .map(([name, s]) => ({
      sqs: {
        arn: { 'Fn::Join': ['', ['arn:', partition, ':sqs:', region, ':', account, `:${s.queueName ?? name}`]] },
        batchSize: 10,
        functionResponseType: 'ReportBatchItemFailures',
      },
    }));
  return {
    iamStatements,
    inboxHttpEvents,
    inboxSqsEvents,
    resources: { Resources: { ...dashboardResource(config), ...alarmResources(config) } },
    providerTracing: config.observability.tracing ? { lambda: 'Active' } : null,
  };
}
