/**
 * The readable results tables printed after the JSON lines (Markdown, pasteable into docs).
 */
import type { CaseResult } from './case-child.ts';

/** A result line plus its ratios to the floor and to graphile-worker of the same workload in the same run. */
export type RatedResult = CaseResult & { ratioToFloor: number | null; ratioToGraphileWorker: number | null };

const fmt = (value: number | null | undefined, digits = 0) => (value === null || value === undefined ? '–' : value.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits }));

/** Per-key order violations the case's order check counted; – where the case has no check. */
const violations = (r: CaseResult) => (typeof r.notes?.orderViolations === 'number' ? fmt(r.notes.orderViolations) : '–');

/** One Markdown table row per result, grouped by workload in run order. */
export function formatTable(results: readonly RatedResult[]): string {
  const header = '| workload | case | msg/s | × floor | × graphile-worker | runs (msg/s) | p50 ms | p99 ms | round trips/msg | client CPU ms/1k msg | server CPU ms/1k msg | peak RSS MB | moved | order violations | s | load |';
  const rule = '|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|';
  const rows = results.map(
    (r) =>
      `| ${r.workload} | ${r.case} | ${fmt(r.messagesPerSecond)} | ${fmt(r.ratioToFloor, 2)} | ${fmt(r.ratioToGraphileWorker, 2)} | ${r.runs && r.runs.length > 1 ? r.runs.map((n) => fmt(n)).join(' / ') : '–'} | ${fmt(r.p50Ms, 1)} | ${fmt(r.p99Ms, 1)} | ${fmt(r.roundTripsPerMessage, 3)} | ${fmt(r.cpuMsPer1000, 1)} | ${fmt(r.serverCpuMsPer1000, 1)} | ${fmt(r.peakRssMb)} | ${fmt(r.messages)}${r.capped ? ' (capped)' : ''} | ${violations(r)} | ${fmt(r.seconds, 1)} | ${fmt(r.loadAverage, 1)} |`,
  );
  return [header, rule, ...rows].join('\n');
}

/** The floor's and graphile-worker's settings in a few words (`100×2 cte` / `24, lq 2000`). */
export function shortSettings(r: CaseResult): string {
  const t = r.tuning;
  if (!t) return 'defaults';
  if (r.case === 'floor') return `${String(t.batch ?? 100)} × ${String(t.loops ?? 2)} loops, ${String(t.claim ?? 'cte')}${t.prepared === true ? ', prepared' : ''}`;
  return Object.entries(t)
    .map(([k, v]) => `${k} ${String(v)}`)
    .join(', ');
}

/**
 * One row per workload: QueueBox (the `queuebox` case) against the floor and graphile-worker at
 * the settings they ran with (their sweep's best when bench/best-settings.json has the workload).
 */
export function formatSummary(results: readonly RatedResult[]): string {
  const header = '| workload | floor setting | floor msg/s | graphile-worker setting | graphile-worker msg/s | QueueBox msg/s | QueueBox × floor | QueueBox × graphile-worker |';
  const rule = '|---|---|--:|---|--:|--:|--:|--:|';
  const names = [...new Set(results.map((r) => r.workload))];
  const rows = names.map((w) => {
    const find = (c: string) => results.find((r) => r.workload === w && r.case === c);
    const floor = find('floor');
    const peer = find('graphile-worker');
    const qb = find('queuebox');
    return `| ${w} | ${floor ? shortSettings(floor) : '–'} | ${fmt(floor?.messagesPerSecond)} | ${peer ? shortSettings(peer) : '–'} | ${fmt(peer?.messagesPerSecond)}${peer?.capped ? ' (capped)' : ''} | ${fmt(qb?.messagesPerSecond)} | ${fmt(qb?.ratioToFloor, 2)} | ${fmt(qb?.ratioToGraphileWorker, 2)} |`;
  });
  return [header, rule, ...rows].join('\n');
}
