/**
 * The one definition of what QueueBox is watched by: dashboard panels and alarms, in terms of
 * `METRICS` keys and the exact dimension sets the code emits. `dashboard.ts` and `alarms.ts`
 * render it into CloudFormation; nothing else names a metric.
 *
 * Dimensions: Powertools Metrics adds `service` (= `observability.serviceName`) to every line, so
 * every QueueBox metric is published with `service` plus the metric's own dimensions
 * (`METRICS[key].dimensions`). A query or alarm with any other dimension set matches nothing.
 */
import type { QueueBoxConfig } from '../config/schema.ts';
import { NO_ROUTE } from '../observability/failure-log.ts';
import { METRICS, type MetricKey } from '../observability/metric-names.ts';
import { FUNCTIONS, type FunctionDef } from './functions.ts';

/** A QueueBox metric with the values of its own dimensions (`service` is added when rendered). */
export interface MetricQuery {
  key: MetricKey;
  dimensions: Record<string, string>;
  stat: 'Sum' | 'Maximum' | 'Average';
  label?: string;
}

/** All series of a metric whatever the values of `dimension` (for values not bounded by config). */
export interface MetricSearch {
  key: MetricKey;
  stat: 'Sum' | 'Maximum' | 'Average';
}

/** A Lambda metric of one of our functions. */
export interface LambdaQuery {
  fn: FunctionDef;
  metric: 'Errors' | 'Throttles' | 'Duration';
  stat: 'Sum' | 'Maximum' | 'Average';
}

export interface Panel {
  title: string;
  metrics?: MetricQuery[];
  searches?: MetricSearch[];
  lambda?: LambdaQuery[];
}

export interface AlarmDef {
  /** CloudFormation logical id suffix. */
  id: string;
  description: string;
  query: MetricQuery | LambdaQuery;
  /** Seconds per datapoint. */
  periodSeconds: number;
  evaluationPeriods: number;
  threshold: number;
  comparison: 'GreaterThanThreshold' | 'GreaterThanOrEqualToThreshold';
}

/** Inputs of the definition: the parts of the config that bound dimension values. */
export type MonitoringConfig = Pick<QueueBoxConfig, 'destinations' | 'tables' | 'observability'>;

const COMPONENTS = ['outbox', 'inbox', 'pull'] as const;

/** The dashboard panels, top to bottom. */
export function dashboardPanels(config: MonitoringConfig): Panel[] {
  const destinationTypes = [...new Set(Object.values(config.destinations).map((d) => d.type))].sort();
  const destinationNames = Object.keys(config.destinations).sort();
  return [
    {
      title: 'Outbox throughput by status',
      metrics: ['sent', 'retried', 'dead'].map((status) => ({ key: 'outboxMessages', dimensions: { status }, stat: 'Sum', label: status })),
    },
    {
      title: 'Oldest pending age (s)',
      metrics: [
        { key: 'outboxOldestPendingAge', dimensions: {}, stat: 'Maximum', label: 'outbox' },
        { key: 'inboxOldestPendingAge', dimensions: {}, stat: 'Maximum', label: 'inbox' },
      ],
    },
    { title: 'Outbox pending rows', metrics: [{ key: 'outboxPending', dimensions: {}, stat: 'Maximum', label: 'pending' }] },
    {
      title: 'Claims lost and reclaimed',
      metrics: [
        ...COMPONENTS.map((component): MetricQuery => ({ key: 'claimsLost', dimensions: { component }, stat: 'Sum', label: `claims lost ${component}` })),
        { key: 'outboxReclaimed', dimensions: {}, stat: 'Sum', label: 'outbox reclaimed' },
      ],
    },
    {
      title: 'Pull activity',
      metrics: [
        ...['completed', 'retried', 'dead', 'released'].map((status): MetricQuery => ({ key: 'pullMessages', dimensions: { status }, stat: 'Sum', label: status })),
        { key: 'claimsLost', dimensions: { component: 'pull' }, stat: 'Sum', label: 'claims lost' },
      ],
    },
    {
      title: 'Publish latency by destination type (s, slowest call per pass)',
      metrics: destinationTypes.map((type) => ({ key: 'outboxPublishDuration', dimensions: { destination_type: type }, stat: 'Maximum', label: type })),
    },
    {
      title: 'Destination answers by destination and outcome',
      metrics: destinationNames.flatMap((destination) =>
        ['sent', 'retryable', 'permanent'].map((outcome) => ({ key: 'outboxDestinationMessages' as const, dimensions: { destination, outcome }, stat: 'Sum' as const, label: `${destination} ${outcome}` })),
      ),
    },
    {
      title: 'Outbox retried and dead rows by destination',
      metrics: [
        ...destinationNames.flatMap((destination) =>
          ['retried', 'dead'].map((status) => ({ key: 'outboxFailedMessages' as const, dimensions: { destination, status }, stat: 'Sum' as const, label: `${destination} ${status}` })),
        ),
        { key: 'outboxFailedMessages', dimensions: { destination: NO_ROUTE, status: 'dead' }, stat: 'Sum', label: `${NO_ROUTE} dead` },
      ],
    },
    {
      title: 'Inbox flow',
      metrics: ['new', 'duplicate', 'forwarded', 'retried', 'dead'].map((status) => ({ key: 'inboxMessages', dimensions: { status }, stat: 'Sum', label: status })),
    },
    { title: 'Inbox rejections by reason', searches: [{ key: 'inboxRejections', stat: 'Sum' }] },
    {
      title: 'Retention: rows deleted',
      metrics: (['outbox', 'inbox'] as const).map((t) => ({ key: 'cleanupDeleted', dimensions: { table: config.tables[t] }, stat: 'Sum', label: config.tables[t] })),
    },
    { title: 'Function errors', lambda: FUNCTIONS.map((fn) => ({ fn, metric: 'Errors', stat: 'Sum' })) },
    { title: 'Function throttles', lambda: FUNCTIONS.map((fn) => ({ fn, metric: 'Throttles', stat: 'Sum' })) },
    { title: 'Function duration (ms, max)', lambda: FUNCTIONS.map((fn) => ({ fn, metric: 'Duration', stat: 'Maximum' })) },
  ];
}

/** The alarms: backlog age, any lost claim, any dead message (outbox, relay, pull), any function error. */
export function alarmDefinitions(): AlarmDef[] {
  const age = (key: MetricKey, table: string): AlarmDef => ({
    id: `${table}OldestPendingAge`,
    description: `QueueBox ${table}: the oldest due pending row has been older than 300 s for 5 minutes (backlog or stopped ${table === 'Outbox' ? 'poller' : 'relay'}).`,
    query: { key, dimensions: {}, stat: 'Maximum' },
    periodSeconds: 60,
    evaluationPeriods: 5,
    threshold: 300,
    comparison: 'GreaterThanThreshold',
  });
  return [
    age('outboxOldestPendingAge', 'Outbox'),
    age('inboxOldestPendingAge', 'Inbox'),
    ...COMPONENTS.map(
      (component): AlarmDef => ({
        id: `ClaimsLost${component.charAt(0).toUpperCase()}${component.slice(1)}`,
        description: `QueueBox: a ${component} claim was lost (work outlived its lease; duplicates possible). See docs/operations.md.`,
        query: { key: 'claimsLost', dimensions: { component }, stat: 'Sum' },
        periodSeconds: 60,
        evaluationPeriods: 1,
        threshold: 0,
        comparison: 'GreaterThanThreshold',
      }),
    ),
    {
      id: 'OutboxDeadMessages',
      description: 'QueueBox outbox: a message went dead. `queuebox status` lists dead rows with their errors; `queuebox replay` moves them back.',
      query: { key: 'outboxMessages', dimensions: { status: 'dead' }, stat: 'Sum' },
      periodSeconds: 60,
      evaluationPeriods: 1,
      threshold: 0,
      comparison: 'GreaterThanThreshold',
    },
    {
      id: 'InboxDeadMessages',
      description: 'QueueBox inbox relay: a message went dead (its topic could not be rendered, or forwarding failed inbox.relay.maxAttempts times). `queuebox status` lists dead rows with their errors.',
      query: { key: 'inboxMessages', dimensions: { status: 'dead' }, stat: 'Sum' },
      periodSeconds: 60,
      evaluationPeriods: 1,
      threshold: 0,
      comparison: 'GreaterThanThreshold',
    },
    {
      id: 'PullDeadMessages',
      description: 'QueueBox pull workers: a message went dead (the handler failed on its last attempt). `queuebox status` lists dead rows with their errors.',
      query: { key: 'pullMessages', dimensions: { status: 'dead' }, stat: 'Sum' },
      periodSeconds: 60,
      evaluationPeriods: 1,
      threshold: 0,
      comparison: 'GreaterThanThreshold',
    },
    ...FUNCTIONS.map(
      (fn): AlarmDef => ({
        id: `${fn.name.charAt(0).toUpperCase()}${fn.name.slice(1)}Errors`,
        description: `QueueBox function ${fn.name} reported errors.`,
        query: { fn, metric: 'Errors', stat: 'Sum' },
        periodSeconds: 60,
        evaluationPeriods: 1,
        threshold: 0,
        comparison: 'GreaterThanThreshold',
      }),
    ),
  ];
}

/** The full dimension map a QueueBox metric is published with. */
export function emittedDimensions(config: MonitoringConfig, query: MetricQuery): Record<string, string> {
  const allowed = METRICS[query.key].dimensions as readonly string[];
  const own = Object.keys(query.dimensions).sort();
  if (own.join() !== [...allowed].sort().join()) {
    throw new Error(`${METRICS[query.key].name} is emitted with dimensions [${allowed.join(', ')}], not [${own.join(', ')}]`);
  }
  return { service: config.observability.serviceName, ...query.dimensions };
}
