/**
 * Bounded progress output for a retention run at a terminal or in a log.
 *
 * At a terminal (`updating`), one line is rewritten in place (`\r`) after each batch. Otherwise at
 * most one line per `intervalMs` while a policy runs, plus one line when it finishes: a run over
 * millions of rows prints a handful of lines, not one per batch.
 */
import type { RetentionPolicy } from './retention.ts';

/** Progress callbacks for `runRetention` (`onBatch`) and the end of the run (`finish`). */
export interface RetentionProgress {
  onBatch: (policy: RetentionPolicy, deleted: number, totalForPolicy: number) => void;
  /** Ends the updating line (a newline) so the next output starts clean. */
  finish: () => void;
}

/** Builds the progress writer; `now` is injectable for tests. */
export function retentionProgress(
  write: (text: string) => void,
  options: { updating: boolean; intervalMs?: number; now?: () => number; batchSize: number },
): RetentionProgress {
  const interval = options.intervalMs ?? 10_000;
  const now = options.now ?? Date.now;
  let lastLine = now();
  let open = false;
  const label = (p: RetentionPolicy) => `${p.table} ${p.state} older than ${p.olderThanHours} h`;
  return {
    onBatch(policy, deleted, total) {
      const done = deleted < options.batchSize;
      if (options.updating) {
        write(`\r${label(policy)}: ${total} deleted${done ? '' : '…'}\x1b[K`);
        open = true;
        if (done) {
          write('\n');
          open = false;
        }
        return;
      }
      if (done) {
        write(`${label(policy)}: ${total} deleted\n`);
        lastLine = now();
      } else if (now() - lastLine >= interval) {
        write(`${label(policy)}: ${total} deleted so far\n`);
        lastLine = now();
      }
    },
    finish() {
      if (open) write('\n');
      open = false;
    },
  };
}
