/**
 * How often a process reads the backlog gauges (`outboxPending`, the oldest pending ages).
 *
 * The read counts the pending rows: 3 ms at 20,000 pending rows, about 100 ms at 1,000,000. A
 * scheduled pass pays it once per invocation, but passes that end and start again quickly (a
 * `drain`-mode loop, passes invoked on demand after each commit, several functions in one local
 * process) would pay it every time, and so would passes running side by side (scale-out). So a
 * pass reads the gauges unless the same driver read them less than `BACKLOG_GAUGE_INTERVAL_MS`
 * ago, and its read asks the database first (`StatsScope.onceEveryMs`, a gate row shared by every
 * invocation): of the passes that end within one interval, one counts. A poller scheduled once a
 * minute still reads them in every invocation. The driver's interval runs on the monotonic clock (a
 * wall-clock step back cannot stretch it); a read that succeeded starts it, and so does an answer
 * that another invocation read them within the interval.
 */
export const BACKLOG_GAUGE_INTERVAL_MS = 10_000;

const lastRead = new WeakMap<object, Map<string, number>>();

/** True when the gauges of `table` are due for `driver`: it has not read them in the last `intervalMs`. */
export function backlogGaugeDue(driver: object, table: string, now = performance.now(), intervalMs = BACKLOG_GAUGE_INTERVAL_MS): boolean {
  const last = lastRead.get(driver)?.get(table);
  return last === undefined || now - last >= intervalMs;
}

/** Records a successful read of the gauges of `table` by `driver`. */
export function backlogGaugeRead(driver: object, table: string, now = performance.now()): void {
  let reads = lastRead.get(driver);
  if (reads === undefined) lastRead.set(driver, (reads = new Map()));
  reads.set(table, now);
}
