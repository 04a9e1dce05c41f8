/**
 * Draws the CloudWatch dashboard body of `dashboard.ts` as an HTML page of SVG line charts, with
 * the values of a recorded run: every widget at its grid place and size (24 columns), every
 * metric row of the widget as a series, summed or maximized per round as its `stat` says, a
 * `SEARCH` expression as one series per value of the metric's own dimension, and a log widget
 * (last finished pass) as a table of the last round each function wrote the metric it queries. `render-dashboard.ts`
 * screenshots the page for the docs.
 */
import type { SampleRound } from './dashboard-sample-run.ts';

type MetricRow = unknown[];
interface Widget {
  type: 'metric' | 'log';
  x: number;
  y: number;
  width: number;
  height: number;
  /** `metrics` on a metric widget, `query` on a log widget. */
  properties: { title: string; metrics?: MetricRow[]; query?: string };
}

/** One line of a chart: a label and a value per round (`null`: no datapoint). */
export interface Series {
  label: string;
  values: Array<number | null>;
}

interface Sample {
  name: string;
  dimensions: Record<string, string>;
  value: number;
}

const COLUMN_PX = 56;
const ROW_PX = 46;
const HEADER_PX = 64;
const COLORS = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f', '#bcbd22', '#17becf'];

function samplesOf(round: SampleRound): Sample[] {
  const samples: Sample[] = [];
  for (const line of round.emf) {
    const doc = JSON.parse(line) as Record<string, unknown> & { _aws: { CloudWatchMetrics: Array<{ Dimensions: string[][]; Metrics: Array<{ Name: string }> }> } };
    for (const directive of doc._aws.CloudWatchMetrics) {
      const dimensions = Object.fromEntries((directive.Dimensions[0] ?? []).map((d) => [d, String(doc[d])]));
      for (const metric of directive.Metrics) samples.push({ name: metric.Name, dimensions, value: Number(doc[metric.Name]) });
    }
  }
  return samples;
}

function aggregate(values: number[], stat: string): number | null {
  if (values.length === 0) return null;
  if (stat === 'Maximum') return Math.max(...values);
  if (stat === 'Average') return values.reduce((a, b) => a + b, 0) / values.length;
  return values.reduce((a, b) => a + b, 0);
}

/** The series of one widget, computed from the run. */
export function widgetSeries(widget: Widget, rounds: SampleRound[]): Series[] {
  const perRound = rounds.map(samplesOf);
  const series: Series[] = [];
  for (const row of widget.properties.metrics ?? []) {
    const last = row[row.length - 1] as { stat?: string; label?: string; expression?: string };
    if (last.expression !== undefined) {
      const name = /MetricName="([^"]+)"/.exec(last.expression)![1]!;
      const stat = /'(Sum|Maximum|Average)'/.exec(last.expression)?.[1] ?? 'Sum';
      const values = new Set(perRound.flat().filter((s) => s.name === name).map((s) => Object.entries(s.dimensions).filter(([k]) => k !== 'service').map(([, v]) => v).join(' ')));
      for (const value of [...values].sort()) {
        series.push({
          label: value,
          values: perRound.map((samples) => aggregate(samples.filter((s) => s.name === name && Object.entries(s.dimensions).filter(([k]) => k !== 'service').map(([, v]) => v).join(' ') === value).map((s) => s.value), stat)),
        });
      }
      continue;
    }
    const [namespace, name, ...rest] = row as [string, string, ...unknown[]];
    const pairs = rest.slice(0, -1) as string[];
    const dims: Record<string, string> = {};
    for (let i = 0; i < pairs.length; i += 2) dims[pairs[i]!] = pairs[i + 1]!;
    const stat = last.stat ?? 'Sum';
    if (namespace === 'AWS/Lambda') {
      const fn = last.label ?? '';
      const values = rounds.map((r) => {
        const call = r.lambda[fn];
        if (call === undefined) return null;
        return name === 'Duration' ? call.durationMs : name === 'Errors' ? Number(call.error) : 0;
      });
      series.push({ label: fn, values });
      continue;
    }
    const matches = (s: Sample) => s.name === name && Object.keys(s.dimensions).length === Object.keys(dims).length && Object.entries(dims).every(([k, v]) => s.dimensions[k] === v);
    series.push({ label: last.label ?? name, values: perRound.map((samples) => aggregate(samples.filter(matches).map((s) => s.value), stat)) });
  }
  return series;
}

function niceMax(value: number): number {
  if (value <= 0) return 1;
  const magnitude = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 2.5, 5, 10]) if (step * magnitude >= value) return step * magnitude;
  return 10 * magnitude;
}

function format(value: number): string {
  if (value >= 1000) return `${(value / 1000).toFixed(value >= 10_000 ? 0 : 1)}k`;
  return Number.isInteger(value) ? String(value) : value.toFixed(value < 10 ? 2 : 1);
}

function escape(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}

/** One widget as an SVG chart of `width` × `height` pixels. */
function chart(title: string, series: Series[], width: number, height: number): string {
  const pad = { left: 44, right: 12, top: 30, bottom: 22 };
  const legendRows = Math.ceil(series.length / Math.max(1, Math.floor((width - 20) / 150)));
  const plotH = height - pad.top - pad.bottom - legendRows * 15 - 6;
  const plotW = width - pad.left - pad.right;
  const all = series.flatMap((s) => s.values.filter((v): v is number => v !== null));
  const max = niceMax(Math.max(0, ...all));
  const n = Math.max(1, ...series.map((s) => s.values.length));
  const x = (i: number) => pad.left + (n === 1 ? 0 : (i * plotW) / (n - 1));
  const y = (v: number) => pad.top + plotH - (v / max) * plotH;
  const parts: string[] = [`<rect x="0.5" y="0.5" width="${width - 1}" height="${height - 1}" rx="3" fill="#fff" stroke="#d5dbdb"/>`];
  parts.push(`<text x="12" y="19" class="title">${escape(title)}</text>`);
  for (let t = 0; t <= 4; t++) {
    const v = (max * t) / 4;
    parts.push(`<line x1="${pad.left}" x2="${width - pad.right}" y1="${y(v)}" y2="${y(v)}" stroke="#eaeded"/>`);
    parts.push(`<text x="${pad.left - 6}" y="${y(v) + 4}" class="axis" text-anchor="end">${format(v)}</text>`);
  }
  for (let i = 0; i < n; i += 5) parts.push(`<text x="${x(i)}" y="${pad.top + plotH + 14}" class="axis" text-anchor="middle">${i + 1}</text>`);
  if (all.length === 0) parts.push(`<text x="${pad.left + plotW / 2}" y="${pad.top + plotH / 2}" class="empty" text-anchor="middle">No data in this run</text>`);
  series.forEach((s, index) => {
    const color = COLORS[index % COLORS.length]!;
    let path = '';
    s.values.forEach((v, i) => {
      if (v === null) return;
      path += `${path === '' || s.values[i - 1] === null ? 'M' : 'L'}${x(i).toFixed(1)},${y(v).toFixed(1)} `;
    });
    if (path !== '') parts.push(`<path d="${path}" fill="none" stroke="${color}" stroke-width="1.8"/>`);
    // A datapoint with no neighbour draws no line: mark it, as CloudWatch does.
    s.values.forEach((v, i) => {
      if (v !== null && (s.values[i - 1] ?? null) === null && (s.values[i + 1] ?? null) === null) parts.push(`<circle cx="${x(i).toFixed(1)}" cy="${y(v).toFixed(1)}" r="2.6" fill="${color}"/>`);
    });
    const perRow = Math.max(1, Math.floor((width - 20) / 150));
    const lx = 12 + (index % perRow) * 150;
    const ly = height - 8 - (legendRows - 1 - Math.floor(index / perRow)) * 15;
    parts.push(`<rect x="${lx}" y="${ly - 8}" width="10" height="3" fill="${color}"/><text x="${lx + 14}" y="${ly - 3}" class="legend">${escape(s.label)}</text>`);
  });
  return `<svg width="${width}" height="${height}" viewBox="0 0 ${width} ${height}">${parts.join('')}</svg>`;
}

/**
 * The rows of a log widget's table (`lastSeenQuery` of `dashboard.ts`): per value of the `by`
 * dimension, the last round whose EMF lines carry the metric the query filters on.
 */
export function logTableRows(widget: Widget, rounds: SampleRound[]): Array<[string, string]> {
  const query = widget.properties.query ?? '';
  const metric = /ispresent\(([a-z_]+)\)/.exec(query)?.[1];
  const by = /by `([^`]+)`/.exec(query)?.[1];
  const last = new Map<string, number>();
  rounds.forEach((round, i) => {
    for (const s of samplesOf(round)) if (s.name === metric && by !== undefined && s.dimensions[by] !== undefined) last.set(s.dimensions[by], i + 1);
  });
  return [...last].sort(([a], [b]) => a.localeCompare(b)).map(([value, round]) => [value, `round ${round}`]);
}

/** A log widget as an SVG table of `width` × `height` pixels. */
function logTable(title: string, rows: Array<[string, string]>, width: number, height: number): string {
  const parts: string[] = [`<rect x="0.5" y="0.5" width="${width - 1}" height="${height - 1}" rx="3" fill="#fff" stroke="#d5dbdb"/>`];
  parts.push(`<text x="12" y="19" class="title">${escape(title)}</text>`);
  parts.push(`<text x="12" y="46" class="legend" font-weight="bold">function</text><text x="${width / 2}" y="46" class="legend" font-weight="bold">last finished pass</text>`);
  rows.forEach(([value, when], i) => {
    parts.push(`<text x="12" y="${68 + i * 20}" class="legend">${escape(value)}</text><text x="${width / 2}" y="${68 + i * 20}" class="legend">${escape(when)}</text>`);
  });
  if (rows.length === 0) parts.push(`<text x="${width / 2}" y="${height / 2}" class="empty" text-anchor="middle">No data in this run</text>`);
  return `<svg width="${width}" height="${height}" viewBox="0 0 ${width} ${height}">${parts.join('')}</svg>`;
}

/** The page size the dashboard needs, in pixels. */
export function pageSize(bodyText: string): { width: number; height: number } {
  const widgets = (JSON.parse(bodyText) as { widgets: Widget[] }).widgets;
  return { width: 24 * COLUMN_PX + 16, height: HEADER_PX + Math.max(...widgets.map((w) => w.y + w.height)) * ROW_PX + 8 };
}

/** The HTML page: the dashboard body (`dashboardBodyText`, placeholders allowed) drawn with `rounds`. */
export function dashboardHtml(bodyText: string, rounds: SampleRound[], caption: string): string {
  const widgets = (JSON.parse(bodyText) as { widgets: Widget[] }).widgets;
  const size = pageSize(bodyText);
  const cells = widgets.map((w) => {
    const width = w.width * COLUMN_PX - 8;
    const height = w.height * ROW_PX - 8;
    const svg = w.type === 'log' ? logTable(w.properties.title, logTableRows(w, rounds), width, height) : chart(w.properties.title, widgetSeries(w, rounds), width, height);
    return `<div class="widget" style="left:${8 + w.x * COLUMN_PX}px;top:${HEADER_PX + w.y * ROW_PX}px">${svg}</div>`;
  });
  return `<!doctype html><html><head><meta charset="utf-8"><title>QueueBox dashboard</title><style>
body{margin:0;background:#f2f3f3;font-family:"DejaVu Sans",Arial,sans-serif;width:${size.width}px;height:${size.height}px;position:relative}
h1{position:absolute;left:16px;top:10px;margin:0;font-size:19px;color:#16191f}
p.caption{position:absolute;left:16px;top:36px;margin:0;font-size:12px;color:#545b64}
.widget{position:absolute}
.title{font-size:13px;font-weight:bold;fill:#16191f}.axis{font-size:10px;fill:#687078}.legend{font-size:10.5px;fill:#16191f}.empty{font-size:12px;fill:#879596}
</style></head><body><h1>QueueBoxDashboard</h1><p class="caption">${escape(caption)}</p>${cells.join('')}</body></html>`;
}
