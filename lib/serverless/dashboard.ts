/**
 * Renders the dashboard panels of `monitoring.ts` into an `AWS::CloudWatch::Dashboard` resource.
 *
 * The body is JSON text with placeholders for values only CloudFormation knows (the region and
 * each function's physical name); `toJoin` turns it into an `Fn::Join` whose parts are strings
 * and `Ref`s, so no `${…}` reaches the Serverless variable resolver.
 */
import { METRICS } from '../observability/metric-names.ts';
import { functionLogicalId } from './functions.ts';
import { dashboardPanels, emittedDimensions, type LastSeenQuery, type MonitoringConfig, type Panel } from './monitoring.ts';

/** Placeholder for the stack's region in the body text. */
export const REGION_TOKEN = '@@region@@';
/** Placeholder for a function's physical name: `@@fn:<name>@@`. */
export const fnToken = (name: string) => `@@fn:${name}@@`;

type Json = unknown;

/**
 * The dashboard body as JSON text with placeholders (tests parse it after substitution). A panel
 * whose series the config leaves empty (the destination panels of a config without destinations,
 * such as an inbox of pull sources only) is left out: CloudWatch refuses a metric widget without
 * metrics, and the whole dashboard with it. The others close up, two to a row.
 */
export function dashboardBodyText(config: MonitoringConfig): string {
  const namespace = config.observability.namespace;
  const drawn = dashboardPanels(config).flatMap((panel): Array<{ type: 'log' | 'metric'; properties: Record<string, Json> }> => {
    if (panel.lastSeen) return [{ type: 'log', properties: { title: panel.title, region: REGION_TOKEN, view: 'table', query: lastSeenQuery(config, panel.lastSeen) } }];
    const metrics = panelMetrics(config, namespace, panel);
    if (metrics.length === 0) return [];
    return [{ type: 'metric', properties: { title: panel.title, region: REGION_TOKEN, view: 'timeSeries', stacked: false, period: 60, metrics } }];
  });
  const widgets = drawn.map(({ type, properties }, index) => ({ type, x: (index % 2) * 12, y: Math.floor(index / 2) * 6, width: 12, height: 6, properties }));
  return JSON.stringify({ widgets });
}

/**
 * The Logs Insights query of a `lastSeen` panel: the functions' log groups, the EMF lines of this
 * service that carry the metric (Logs Insights reads their JSON fields), the latest per dimension value.
 */
export function lastSeenQuery(config: MonitoringConfig, q: LastSeenQuery): string {
  const sources = q.functions.map((fn) => `SOURCE '/aws/lambda/${fnToken(fn.name)}'`).join(' | ');
  const name = METRICS[q.key].name;
  return `${sources} | filter ispresent(${name}) and service = "${config.observability.serviceName}" | stats max(@timestamp) as ${q.column} by \`${q.dimension}\` | sort \`${q.dimension}\``;
}

function panelMetrics(config: MonitoringConfig, namespace: string, panel: Panel): Json[] {
  const rows: Json[] = [];
  for (const q of panel.metrics ?? []) {
    const dims = emittedDimensions(config, q);
    rows.push([namespace, METRICS[q.key].name, ...Object.entries(dims).flat(), { stat: q.stat, ...(q.label ? { label: q.label } : {}) }]);
  }
  (panel.searches ?? []).forEach((s, i) => {
    const dimensionNames = ['service', ...METRICS[s.key].dimensions].join(',');
    // The namespace in double quotes: CloudWatch requires them around a name with spaces or other
    // non-alphanumeric characters (the configuration refuses a name holding a quote).
    const expression = `SEARCH('{"${namespace}",${dimensionNames}} MetricName="${METRICS[s.key].name}" service="${config.observability.serviceName}"', '${s.stat}', 60)`;
    rows.push([{ expression, id: `search${i}`, label: '' }]);
  });
  for (const l of panel.lambda ?? []) {
    rows.push(['AWS/Lambda', l.metric, 'FunctionName', fnToken(l.fn.name), { stat: l.stat, label: l.fn.name }]);
  }
  return rows;
}

/** Splits placeholder text into `Fn::Join` parts (strings and `Ref`s). */
export function toJoin(text: string): { 'Fn::Join': [string, Json[]] } {
  const parts: Json[] = [];
  const pattern = /@@(region|fn:[A-Za-z0-9]+)@@/g;
  let last = 0;
  for (const match of text.matchAll(pattern)) {
    parts.push(text.slice(last, match.index));
    const token = match[1]!;
    parts.push(token === 'region' ? { Ref: 'AWS::Region' } : { Ref: functionLogicalId(token.slice(3)) });
    last = match.index + match[0].length;
  }
  parts.push(text.slice(last));
  return { 'Fn::Join': ['', parts.filter((p) => p !== '')] };
}

/** The CloudFormation resource (logical id `QueueBoxDashboard`). */
export function dashboardResource(config: MonitoringConfig): Record<string, Json> {
  return {
    QueueBoxDashboard: {
      Type: 'AWS::CloudWatch::Dashboard',
      Properties: { DashboardBody: toJoin(dashboardBodyText(config)) },
    },
  };
}
