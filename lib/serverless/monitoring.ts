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
import { PASS_WORKERS, type PassWorker } from '../db/driver.ts';
import { NO_ROUTE, UNKNOWN_SOURCE } from '../observability/failure-log.ts';
import { METRICS, type MetricKey } from '../observability/metric-names.ts';
import { FUNCTIONS, type FunctionDef } from './functions.ts';
import { parsePluginOptions } from './options.ts';
import { scheduleMaxGapSeconds } from './schedule-gap.ts';

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

/**
 * A Logs Insights table over the functions' log groups: per value of `dimension`, the time of the
 * last EMF line that carries metric `key` (the line itself, so the time a metric was written).
 */
export interface LastSeenQuery {
  key: MetricKey;
  dimension: string;
  functions: FunctionDef[];
  /** Column name of the time. */
  column: string;
}

export interface Panel {
  title: string;
  metrics?: MetricQuery[];
  searches?: MetricSearch[];
  lambda?: LambdaQuery[];
  /** Drawn as a log table instead of a chart. */
  lastSeen?: LastSeenQuery;
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
  comparison: 'GreaterThanThreshold' | 'GreaterThanOrEqualToThreshold' | 'LessThanThreshold';
  /**
   * `notBreaching` for counters, emitted only when something happens (no data: nothing happened),
   * and for the backlog-age gauges, written once at the end of a pass (no data: no pass ended in
   * the period; a function that stopped is its heartbeat alarm's to catch); `breaching` for the
   * heartbeat, whose silence is the failure.
   */
  treatMissingData: 'notBreaching' | 'breaching';
}

/** A scheduled function's schedule and timeout (s), as `custom.queuebox.functions.<name>` sets them. */
export interface ScheduledRun {
  schedule: string;
  timeout: number;
}

/** The schedules and timeouts of the functions that have a heartbeat alarm. */
export type HeartbeatSchedules = Record<PassWorker, ScheduledRun>;

/** The plugin's defaults (`options.ts`): what a template gets when `custom.queuebox.functions` sets nothing. */
export function defaultHeartbeatSchedules(): HeartbeatSchedules {
  const functions = parsePluginOptions({}).functions;
  return { outboxPoller: functions.outboxPoller, inboxRelay: functions.inboxRelay, reclaim: functions.reclaim };
}

/**
 * Time added to a heartbeat alarm's window beyond the schedule's gap and the function's timeout
 * (s): a schedule that fires late, a cold start, and EMF metrics that reach CloudWatch a minute
 * or two after their log line.
 */
export const HEARTBEAT_SLACK_SECONDS = 180;

/** The alarm period for a heartbeat window, finest first, with the longest window each allows (CloudWatch: period × evaluation periods ≤ 1 day below an hour's period, ≤ 7 days from it). */
const HEARTBEAT_PERIODS = [
  { periodSeconds: 60, maxWindowSeconds: 3_600 },
  { periodSeconds: 300, maxWindowSeconds: 86_400 },
  { periodSeconds: 3_600, maxWindowSeconds: 604_800 },
] as const;

/**
 * The window of a heartbeat alarm: no finished pass in `evaluationPeriods` periods of
 * `periodSeconds` is an alarm. The window is at least the longest gap between two scheduled runs
 * plus the timeout (one pass may finish at once, the next only at its timeout) plus
 * `HEARTBEAT_SLACK_SECONDS`, so two normal passes never alarm; or, when no alarm can follow the
 * schedule, why.
 */
export function heartbeatWindow(run: ScheduledRun): { periodSeconds: number; evaluationPeriods: number } | { reason: string } {
  const gap = scheduleMaxGapSeconds(run.schedule);
  if (gap === undefined) return { reason: `its schedule ${run.schedule} does not run at one steady interval (use rate(…), or a cron(…) that runs every day)` };
  const window = gap + run.timeout + HEARTBEAT_SLACK_SECONDS;
  const fit = HEARTBEAT_PERIODS.find((p) => window <= p.maxWindowSeconds);
  if (fit === undefined) return { reason: `its schedule ${run.schedule} leaves more than the 7 days a CloudWatch alarm can watch between two runs` };
  return { periodSeconds: fit.periodSeconds, evaluationPeriods: Math.ceil(window / fit.periodSeconds) };
}

/** The backlog-age alarms' threshold (s): a due row pending for longer is a backlog. */
export const BACKLOG_AGE_THRESHOLD_SECONDS = 300;

/** About how long the age must stay above the threshold before the alarm fires (s). */
export const BACKLOG_AGE_ALARM_SECONDS = 300;

/**
 * Time added to a backlog-age period beyond the schedule's gap and the function's timeout (s): a
 * run EventBridge starts late within its minute (up to 60 s), the function's init before the
 * handler (up to 10 s), and a pass that skips the gauge because another one read it less than
 * `BACKLOG_GAUGE_INTERVAL_MS` (10 s) before, with room to spare.
 */
export const BACKLOG_AGE_SLACK_SECONDS = 90;

/** The functions that write a backlog-age gauge, with the metric and the alarm's name part. */
export const BACKLOG_AGE_WRITERS = [
  { worker: 'outboxPoller', key: 'outboxOldestPendingAge', table: 'Outbox' },
  { worker: 'inboxRelay', key: 'inboxOldestPendingAge', table: 'Inbox' },
] as const satisfies ReadonlyArray<{ worker: PassWorker; key: MetricKey; table: string }>;

/**
 * The window of a backlog-age alarm: `Maximum > BACKLOG_AGE_THRESHOLD_SECONDS` in each of
 * `evaluationPeriods` periods of `periodSeconds`, missing data not breaching; or, when no alarm
 * can follow the schedule, why.
 *
 * The gauge has one writer, the function's pass, which writes one sample at its end: a sample per
 * run, not per minute. Two samples are at most the schedule's longest gap plus the timeout apart
 * (one pass may end at once, the next at its timeout), plus `BACKLOG_AGE_SLACK_SECONDS`. The
 * period is at least that (a multiple of 60 s below an hour, of an hour from it, at most a day),
 * so every period of a running function holds a sample, whatever the schedule and wherever a
 * period starts, and a backlog older than the threshold breaches every period. A shorter period
 * leaves periods without a sample, which `notBreaching` counts as good: with 60 s periods and
 * `rate(2 minutes)` every other one, so 5 breaching periods in a row never happen. The alarm is
 * one such period, and never shorter than `BACKLOG_AGE_ALARM_SECONDS` (the spec's "for 5
 * minutes"): 300 s with the defaults; a slow schedule gives a longer one, as it gives no earlier
 * evidence. (The other way, 60 s periods with M of N and missing data ignored,
 * leaves CloudWatch to look back past the window by rules of its own, and needs as many samples.)
 * A healthy backlog writes no sample above the threshold, so it never breaches. A schedule with
 * no steady interval gets no age alarm, as it gets no heartbeat alarm: its gaps are not one number.
 */
export function backlogAgeWindow(run: ScheduledRun): { periodSeconds: number; evaluationPeriods: number } | { reason: string } {
  const gap = scheduleMaxGapSeconds(run.schedule);
  if (gap === undefined) return { reason: `its schedule ${run.schedule} does not run at one steady interval (use rate(…), or a cron(…) that runs every day)` };
  const between = gap + run.timeout + BACKLOG_AGE_SLACK_SECONDS;
  // A period of at most a day, the longest CloudWatch's console offers (the heartbeat's windows
  // are several shorter periods; this one must hold a whole gap in one).
  if (between > 86_400) return { reason: `its schedule ${run.schedule} with timeout ${run.timeout} s leaves more than a day between two passes' ends, the longest period an alarm can give every pass` };
  const unit = between <= 3_600 ? 60 : 3_600;
  // One period, never shorter than the spec's 5 minutes: a backlog older than the threshold in a
  // period of at least `BACKLOG_AGE_ALARM_SECONDS` (with the defaults, `between` is 240 s).
  const periodSeconds = Math.max(Math.ceil(between / unit) * unit, BACKLOG_AGE_ALARM_SECONDS);
  return { periodSeconds, evaluationPeriods: 1 };
}

/**
 * Why a scheduled function gets no heartbeat alarm, or no backlog-age alarm, one line each (the
 * plugin warns with them).
 */
export function heartbeatWarnings(schedules: HeartbeatSchedules): string[] {
  return PASS_WORKERS.flatMap((worker) => {
    const window = heartbeatWindow(schedules[worker]);
    const age = BACKLOG_AGE_WRITERS.some((w) => w.worker === worker) ? backlogAgeWindow(schedules[worker]) : {};
    return [...('reason' in window ? [`no heartbeat alarm for ${worker}: ${window.reason}`] : []), ...('reason' in age ? [`no backlog-age alarm for ${worker}: ${age.reason}`] : [])];
  });
}

/** Inputs of the definition: the parts of the config that bound dimension values. */
export type MonitoringConfig = Pick<QueueBoxConfig, 'destinations' | 'inbox' | 'tables' | 'observability'>;

const COMPONENTS = ['outbox', 'inbox', 'pull'] as const;

/** The dashboard panels, top to bottom. */
export function dashboardPanels(config: MonitoringConfig): Panel[] {
  const destinationTypes = [...new Set(Object.values(config.destinations).map((d) => d.type))].sort();
  const destinationNames = Object.keys(config.destinations).sort();
  // Every configured source, pull sources too: the relay forwards the rows stored as push, and a
  // source switched from push to pull keeps its earlier rows push until they are forwarded.
  const sourceNames = Object.keys(config.inbox.sources).sort();
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
      title: 'Passes finished (heartbeat)',
      metrics: PASS_WORKERS.map((worker): MetricQuery => ({ key: 'passesFinished', dimensions: { function: worker }, stat: 'Sum', label: worker })),
    },
    {
      title: 'Last finished pass',
      lastSeen: { key: 'passesFinished', dimension: 'function', functions: PASS_WORKERS.map((w) => FUNCTIONS.find((f) => f.name === w)!), column: 'last_finished_pass' },
    },
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
      metrics: [
        ...['new', 'duplicate', 'forwarded', 'retried', 'dead'].map((status) => ({ key: 'inboxMessages' as const, dimensions: { status }, stat: 'Sum' as const, label: status })),
        { key: 'inboxStoreFailures', dimensions: {}, stat: 'Sum', label: 'store failed' },
      ],
    },
    {
      title: 'Inbox relay retried and dead rows by source',
      metrics: [...sourceNames, UNKNOWN_SOURCE].flatMap((source) =>
        ['retried', 'dead'].map((status) => ({ key: 'inboxFailedMessages' as const, dimensions: { source, status }, stat: 'Sum' as const, label: `${source} ${status}` })),
      ),
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

/**
 * The alarms: backlog age (sized from the poller's and the relay's schedules), any lost claim, any
 * dead message (outbox, relay, pull), any function error, and a heartbeat per scheduled pass (no
 * pass finished within its schedule's window).
 * Failures per destination or per source have no alarm of their own: the dead-message alarms fire
 * on any dead row, and the dashboard's per-destination and per-source panels show which one.
 */
export function alarmDefinitions(schedules: HeartbeatSchedules = defaultHeartbeatSchedules()): AlarmDef[] {
  // Sized from the schedule of the function that writes the gauge (`backlogAgeWindow`).
  const ages = BACKLOG_AGE_WRITERS.flatMap(({ worker, key, table }): AlarmDef[] => {
    const run = schedules[worker];
    const window = backlogAgeWindow(run);
    if ('reason' in window) return [];
    const minutes = Math.round(window.periodSeconds / 60);
    const periods = window.evaluationPeriods === 1 ? `a ${minutes}-minute period` : `${window.evaluationPeriods} periods of ${minutes} minutes in a row`;
    return [
      {
        id: `${table}OldestPendingAge`,
        description: `QueueBox ${table.toLowerCase()}: the oldest due pending row was older than ${BACKLOG_AGE_THRESHOLD_SECONDS} s in ${periods} (each holds the age written at the end of at least one pass: schedule ${run.schedule}, timeout ${run.timeout} s): a backlog. If ${worker} stopped, no age is written and this alarm stays quiet: its heartbeat alarm fires. See docs/operations.md.`,
        query: { key, dimensions: {}, stat: 'Maximum' },
        ...window,
        threshold: BACKLOG_AGE_THRESHOLD_SECONDS,
        comparison: 'GreaterThanThreshold',
        treatMissingData: 'notBreaching',
      },
    ];
  });
  return [
    ...ages,
    ...COMPONENTS.map(
      (component): AlarmDef => ({
        id: `ClaimsLost${component.charAt(0).toUpperCase()}${component.slice(1)}`,
        description: `QueueBox: a ${component} claim was lost (work outlived its lease; duplicates possible). See docs/operations.md.`,
        query: { key: 'claimsLost', dimensions: { component }, stat: 'Sum' },
        periodSeconds: 60,
        evaluationPeriods: 1,
        threshold: 0,
        comparison: 'GreaterThanThreshold',
        treatMissingData: 'notBreaching',
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
      treatMissingData: 'notBreaching',
    },
    {
      id: 'InboxDeadMessages',
      description: 'QueueBox inbox: a message went dead (an SQS record stored dead at receipt, its topic could not be rendered, or forwarding failed inbox.relay.maxAttempts times). `queuebox status` lists dead rows with their errors.',
      query: { key: 'inboxMessages', dimensions: { status: 'dead' }, stat: 'Sum' },
      periodSeconds: 60,
      evaluationPeriods: 1,
      threshold: 0,
      comparison: 'GreaterThanThreshold',
      treatMissingData: 'notBreaching',
    },
    {
      id: 'InboxStoreFailures',
      description: 'QueueBox inbox: a message could not be stored (the database refused the write or did not answer: webhooks answered 500 or 503, SQS records left for redelivery), or an SQS record came from a queue no inbox source reads. The log lines "inbox store failed" and "no sqs inbox source for this queue" say why. See docs/operations.md.',
      query: { key: 'inboxStoreFailures', dimensions: {}, stat: 'Sum' },
      periodSeconds: 60,
      evaluationPeriods: 1,
      threshold: 0,
      comparison: 'GreaterThanThreshold',
      treatMissingData: 'notBreaching',
    },
    {
      id: 'PullDeadMessages',
      description: 'QueueBox pull workers: a message went dead (the handler failed on its last attempt). `queuebox status` lists dead rows with their errors.',
      query: { key: 'pullMessages', dimensions: { status: 'dead' }, stat: 'Sum' },
      periodSeconds: 60,
      evaluationPeriods: 1,
      threshold: 0,
      comparison: 'GreaterThanThreshold',
      treatMissingData: 'notBreaching',
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
        treatMissingData: 'notBreaching',
      }),
    ),
    ...PASS_WORKERS.flatMap((worker): AlarmDef[] => {
      const run = schedules[worker];
      const window = heartbeatWindow(run);
      if ('reason' in window) return [];
      const minutes = Math.round((window.periodSeconds * window.evaluationPeriods) / 60);
      return [
        {
          id: `${worker.charAt(0).toUpperCase()}${worker.slice(1)}Heartbeat`,
          description: `QueueBox function ${worker}: no pass finished for ${minutes} minutes (schedule ${run.schedule}, timeout ${run.timeout} s): the schedule is off, or every run fails or never starts. See docs/operations.md.`,
          query: { key: 'passesFinished', dimensions: { function: worker }, stat: 'Sum' },
          ...window,
          threshold: 1,
          comparison: 'LessThanThreshold',
          treatMissingData: 'breaching',
        },
      ];
    }),
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
