/**
 * The readable results table printed after the JSON lines (Markdown, pasteable into docs).
 */
import type { CaseResult } from './case-child.ts';

/** A result line plus its ratio to the floor of the same workload in the same run. */
export type RatedResult = CaseResult & { ratioToFloor: number | null };

const fmt = (value: number | null, digits = 0) => (value === null ? '–' : value.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits }));

/** One Markdown table row per result, grouped by workload in run order. */
export function formatTable(results: readonly RatedResult[]): string {
  const header = '| workload | case | msg/s | × floor | runs (msg/s) | p50 ms | p99 ms | round trips/msg | client CPU ms/1k msg | peak RSS MB | moved | s | load |';
  const rule = '|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|';
  const rows = results.map(
    (r) =>
      `| ${r.workload} | ${r.case} | ${fmt(r.messagesPerSecond)} | ${fmt(r.ratioToFloor, 2)} | ${r.runs && r.runs.length > 1 ? r.runs.map((n) => fmt(n)).join(' / ') : '–'} | ${fmt(r.p50Ms, 1)} | ${fmt(r.p99Ms, 1)} | ${fmt(r.roundTripsPerMessage, 3)} | ${fmt(r.cpuMsPer1000, 1)} | ${fmt(r.peakRssMb)} | ${fmt(r.messages)}${r.capped ? ' (capped)' : ''} | ${fmt(r.seconds, 1)} | ${fmt(r.loadAverage, 1)} |`,
  );
  return [header, rule, ...rows].join('\n');
}
