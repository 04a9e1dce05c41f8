/**
 * What scale-out by backlog (`lib/runtime/scale-out.ts`) asks of the deployment: the functions
 * whose scale-out is on may invoke themselves (`roles.ts`), and a reserved concurrency below the
 * setting caps it, through the function's environment (`QUEUEBOX_…` overrides win over the file).
 */
import type { QueueBoxConfig } from '../config/schema.ts';

/** The scaling functions, the setting of each, and its environment override. */
const SCALING = [
  { name: 'outboxPoller', setting: 'outbox.scaleOut.maxConcurrentPasses', env: 'QUEUEBOX_OUTBOX__SCALE_OUT__MAX_CONCURRENT_PASSES', max: (c: QueueBoxConfig) => c.outbox.scaleOut.maxConcurrentPasses },
  { name: 'inboxRelay', setting: 'inbox.relay.scaleOut.maxConcurrentPasses', env: 'QUEUEBOX_INBOX__RELAY__SCALE_OUT__MAX_CONCURRENT_PASSES', max: (c: QueueBoxConfig) => c.inbox.relay.scaleOut.maxConcurrentPasses },
] as const;

/**
 * Short names of the functions whose scale-out is on: `maxConcurrentPasses` above 1, and a
 * reserved concurrency (`reservedConcurrency`, by function) that leaves room for a second pass.
 */
export function selfInvokingFunctions(config: QueueBoxConfig, reservedConcurrency: Readonly<Record<string, number | undefined>> = {}): string[] {
  return SCALING.filter((s) => {
    const reserved = reservedConcurrency[s.name];
    return Math.min(s.max(config), reserved ?? Number.POSITIVE_INFINITY) > 1;
  }).map((s) => s.name);
}

/**
 * The environment that caps a function's scale-out at its reserved concurrency (at least 1), and
 * the warning to show, when the reserved concurrency is below the setting; else nothing.
 */
export function scaleOutCap(config: QueueBoxConfig, fn: string, reservedConcurrency: number | undefined): { environment: Record<string, string>; warning?: string } {
  const scaling = SCALING.find((s) => s.name === fn);
  if (scaling === undefined || reservedConcurrency === undefined || scaling.max(config) <= 1 || reservedConcurrency >= scaling.max(config)) return { environment: {} };
  const cap = Math.max(1, reservedConcurrency);
  return {
    environment: { [scaling.env]: String(cap) },
    warning: `${scaling.setting} is ${scaling.max(config)} but ${fn} has a reserved concurrency of ${reservedConcurrency}: its scale-out is capped at ${cap} passes (${scaling.env})`,
  };
}
