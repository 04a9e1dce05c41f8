/**
 * The maintenance-table row that records a worker's last finished pass: `pass:<worker>:<outbox
 * table>`. The outbox table names the deployment, so two configurations sharing one maintenance
 * table (different outbox tables) keep their own rows, as the reclaim gates (`reclaim:<table>`) do.
 */
import { PASS_WORKERS, type PassWorker } from './driver.ts';

/** The row name of `worker` for the outbox table `outboxTable` (unquoted). */
export function passRowName(worker: PassWorker, outboxTable: string): string {
  return `pass:${worker}:${outboxTable}`;
}

/** Every worker's row name, keyed by row name (for reading the rows back). */
export function passRowNames(outboxTable: string): Map<string, PassWorker> {
  return new Map(PASS_WORKERS.map((worker) => [passRowName(worker, outboxTable), worker]));
}
