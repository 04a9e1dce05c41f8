/**
 * The scheduled functions the local runner invokes, and their schedules as `serverless.yml`
 * declares them (`events: - schedule: rate(…)` and `timeout`, resolving `${param:…}` from
 * `params.default`). Without the file, or for a schedule it cannot read (e.g. `cron(…)`), a
 * function runs every minute with a 60 s timeout.
 *
 * To run another scheduled function locally, add it to `LOCAL_FUNCTIONS`.
 */
import { existsSync, readFileSync } from 'node:fs';
import type { Context } from 'aws-lambda';
import { parse as parseYaml } from 'yaml';

/** A scheduled Lambda handler as the runner calls it. */
export type ScheduledHandler = (event: unknown, context: Context) => Promise<unknown>;

/** A function the local runner schedules: its `serverless.yml` name and how to load its handler. */
export interface LocalFunction {
  name: string;
  load: () => Promise<ScheduledHandler>;
}

/** Scheduled functions run by `queuebox local`, in start order. */
export const LOCAL_FUNCTIONS: readonly LocalFunction[] = [
  { name: 'outboxPoller', load: async () => (await import('../../functions/outbox-poller.ts')).handler },
  { name: 'inboxRelay', load: async () => (await import('../../functions/inbox-relay.ts')).handler },
];

/** When and for how long a function runs (ms). */
export interface Schedule {
  periodMs: number;
  timeoutMs: number;
  /** The schedule expression as read, for display. */
  expression: string;
}

export const DEFAULT_SCHEDULE: Schedule = { periodMs: 60_000, timeoutMs: 60_000, expression: 'rate(1 minute)' };

const UNIT_MS: Record<string, number> = { minute: 60_000, minutes: 60_000, hour: 3_600_000, hours: 3_600_000, day: 86_400_000, days: 86_400_000 };

/** Milliseconds of a `rate(N unit)` expression; undefined for anything else. */
export function rateMs(expression: string): number | undefined {
  const match = /^rate\(\s*(\d+)\s+([a-z]+)\s*\)$/.exec(expression.trim());
  const unit = match ? UNIT_MS[match[2]!] : undefined;
  return match && unit ? Number(match[1]) * unit : undefined;
}

/** Reads each function's schedule from `serverless.yml` at `path`; missing entries get the default. */
export function readSchedules(path = 'serverless.yml'): Map<string, Schedule> {
  const out = new Map<string, Schedule>();
  if (!existsSync(path)) return out;
  const doc = (parseYaml(readFileSync(path, 'utf8')) ?? {}) as {
    params?: { default?: Record<string, unknown> };
    functions?: Record<string, { timeout?: unknown; events?: unknown }>;
  };
  const params = doc.params?.default ?? {};
  const resolve = (value: unknown): string =>
    String(value ?? '').replace(/\$\{param:([A-Za-z0-9_]+)(?:\s*,\s*([^}]*))?\}/g, (_all, name: string, fallback?: string) => String(params[name] ?? fallback ?? ''));
  for (const [name, fn] of Object.entries(doc.functions ?? {})) {
    const events = Array.isArray(fn.events) ? (fn.events as Array<Record<string, unknown>>) : [];
    const schedule = events.map((e) => e.schedule).find((s) => s !== undefined);
    if (schedule === undefined) continue;
    const expression = resolve(typeof schedule === 'object' && schedule !== null ? (schedule as { rate?: unknown }).rate : schedule);
    const timeoutSeconds = Number(resolve(fn.timeout));
    out.set(name, {
      periodMs: rateMs(expression) ?? DEFAULT_SCHEDULE.periodMs,
      timeoutMs: Number.isFinite(timeoutSeconds) && timeoutSeconds > 0 ? timeoutSeconds * 1000 : DEFAULT_SCHEDULE.timeoutMs,
      expression,
    });
  }
  return out;
}
