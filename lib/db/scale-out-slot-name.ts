/**
 * The maintenance-table rows of scale-out slots: `scale-out:<worker>:<outbox table>:<n>`, one per
 * slot `n` (1 … maxConcurrentPasses − 1). The outbox table names the deployment, as in the pass
 * rows (`pass-row-name.ts`). A slot row's `last_run_at` is the slot's lease expiry.
 */
import type { ScaleOutWorker } from './driver.ts';

/** What every slot row name of `worker` starts with; the slot number follows it. */
export function scaleOutSlotPrefix(worker: ScaleOutWorker, outboxTable: string): string {
  return `scale-out:${worker}:${outboxTable}:`;
}

/** The row name of slot `slot` of `worker`. */
export function scaleOutSlotName(worker: ScaleOutWorker, outboxTable: string, slot: number): string {
  if (!Number.isInteger(slot) || slot < 1) throw new RangeError(`scale-out slot must be a positive integer, not ${String(slot)}`);
  return `${scaleOutSlotPrefix(worker, outboxTable)}${slot}`;
}

/** The slot number of a row name made by `scaleOutSlotName`. */
export function scaleOutSlotNumber(name: string): number {
  return Number(name.slice(name.lastIndexOf(':') + 1));
}
