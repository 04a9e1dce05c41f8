/**
 * The scheduled functions the local runner invokes, and their schedules as `serverless.yml`
 * declares them for the Serverless plugin (`custom.queuebox.functions.<name>.schedule` and
 * `timeout`, else the plugin's defaults). For a schedule it cannot read (e.g. `cron(…)`), a
 * function runs every minute.
 *
 * To run another scheduled function locally, add it to `LOCAL_FUNCTIONS`.
 */
import { existsSync, readFileSync } from 'node:fs';
import type { Context } from 'aws-lambda';
import type { QueueBoxConfig } from '../config/schema.ts';
import { createDestinations, type ClientOverrides } from '../destinations/create-destinations.ts';
import { traceClient } from '../observability/tracing.ts';
import { parse as parseYaml } from 'yaml';
import type { InvokeAsync } from '../runtime/self-invoke.ts';
import { pluginOptionsSchema } from '../serverless/options.ts';

/** A scheduled Lambda handler as the runner calls it. */
export type ScheduledHandler = (event: unknown, context: Context) => Promise<unknown>;

/** What a local function's handler is built with. */
export interface LocalFunctionOptions {
  /** Starts the passes its scale-out asks for. */
  invoke: InvokeAsync;
  /**
   * Static credentials for the destination clients instead of the default provider chain (the
   * demo: stand-ins for its emulator, never the environment's keys).
   */
  credentials?: ClientOverrides['credentials'];
}

/**
 * A function the local runner schedules: its `serverless.yml` name, how to load its handler, and
 * the setting that turns scale-out on.
 */
export interface LocalFunction {
  name: string;
  load: (options: LocalFunctionOptions) => Promise<ScheduledHandler>;
  maxConcurrentPasses: (config: QueueBoxConfig) => number;
}

/** Scheduled functions run by `queuebox local`, in start order. */
export const LOCAL_FUNCTIONS: readonly LocalFunction[] = [
  {
    name: 'outboxPoller',
    load: async ({ invoke, credentials }) =>
      (await import('../../functions/outbox-poller.ts')).createOutboxPoller({
        invoke,
        ...(credentials !== undefined
          ? { buildDestinations: (container) => createDestinations(container.config, { clientOverrides: { credentials }, wrapClient: (client) => traceClient(container.tracer, client) }) }
          : {}),
      }),
    maxConcurrentPasses: (config) => config.outbox.scaleOut.maxConcurrentPasses,
  },
  {
    name: 'inboxRelay',
    // The relay writes to the outbox only: no AWS client.
    load: async ({ invoke }) => (await import('../../functions/inbox-relay.ts')).createInboxRelay({ invoke }),
    maxConcurrentPasses: (config) => config.inbox.relay.scaleOut.maxConcurrentPasses,
  },
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

/**
 * Reads each scheduled function's schedule and timeout from `custom.queuebox.functions` of
 * `serverless.yml` at `path`, with the Serverless plugin's defaults for what it does not set.
 */
export function readSchedules(path = 'serverless.yml'): Map<string, Schedule> {
  const out = new Map<string, Schedule>();
  const doc = (existsSync(path) ? (parseYaml(readFileSync(path, 'utf8'), { merge: true }) ?? {}) : {}) as { custom?: { queuebox?: { functions?: unknown } } };
  const functions = pluginOptionsSchema.shape.functions;
  const parsed = functions.safeParse(doc.custom?.queuebox?.functions ?? {});
  for (const [name, fn] of Object.entries(parsed.success ? parsed.data : functions.parse({}))) {
    if (!('schedule' in fn)) continue;
    out.set(name, { periodMs: rateMs(fn.schedule) ?? DEFAULT_SCHEDULE.periodMs, timeoutMs: fn.timeout * 1000, expression: fn.schedule });
  }
  return out;
}
