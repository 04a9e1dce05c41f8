/**
 * The best settings of the floor and graphile-worker per workload, as `npm run bench:sweep`
 * found them on this machine (bench/best-settings.json). `npm run bench` runs each workload's
 * floor and graphile-worker with them, so "× floor" and "× graphile-worker" compare QueueBox with
 * what raw SQL and the peer reach at their best here, not with one fixed setting.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { CaseSettings } from './bench-case.ts';
import type { Sizes } from './workloads.ts';

/** The file the sweep writes and the bench reads by default. */
export const BEST_SETTINGS_PATH = join(dirname(fileURLToPath(import.meta.url)), 'best-settings.json');

/** The winner of one case's sweep on one workload. */
export interface BestSetting {
  settings: CaseSettings;
  /** The winner's msg/s in the sweep (median of its rounds). */
  messagesPerSecond: number;
  /** Candidates tried, and the runner-up's rate (how clear the win was). */
  candidates: number;
  runnerUp: number | null;
  sizes: Sizes;
  /** 1-minute load average at the winner's drain (the machine is shared). */
  load: number;
  measuredAt: string;
}

/** case name → workload name → best setting. */
export type BestSettings = Record<string, Record<string, BestSetting>>;

/** Reads the file; an absent file is no settings (every case runs its defaults). */
export function readBestSettings(path = BEST_SETTINGS_PATH): BestSettings {
  if (!existsSync(path)) return {};
  const parsed = JSON.parse(readFileSync(path, 'utf8')) as unknown;
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw new Error(`${path}: not an object of case → workload → setting`);
  return parsed as BestSettings;
}

/** Writes `best` merged over the file's other cases and workloads (a partial sweep keeps the rest). */
export function writeBestSettings(best: BestSettings, path = BEST_SETTINGS_PATH): void {
  const merged = readBestSettings(path);
  for (const [caseName, byWorkload] of Object.entries(best)) merged[caseName] = { ...merged[caseName], ...byWorkload };
  writeFileSync(path, `${JSON.stringify(merged, null, 2)}\n`);
}

/**
 * A backlog workload not swept runs with its small-table workload's best (the same keys and
 * statement; a sweep of a 1,000,000-row backlog seeds that table once per candidate).
 */
export const BACKLOG_FALLBACK: Readonly<Record<string, string>> = {
  backlog: 'unkeyed',
  'keys-100-backlog': 'keys-100',
  'keys-1000-backlog': 'keys-1000',
  'hot-keys': 'hot-keys-small',
};

/** The settings `caseName` runs `workload` with, and the workload whose sweep chose them. */
export function bestFor(best: BestSettings, caseName: string, workload: string): { settings: CaseSettings; from: string } | undefined {
  const own = best[caseName]?.[workload];
  if (own) return { settings: own.settings, from: workload };
  const small = BACKLOG_FALLBACK[workload];
  const fallback = small === undefined ? undefined : best[caseName]?.[small];
  return fallback ? { settings: fallback.settings, from: small! } : undefined;
}
