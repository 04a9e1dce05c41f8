/**
 * What a case did to per-key order, counted as it ran: a message of a key that started while
 * another of the same key was still running (`overlaps`), and one that started after a later
 * message of its key had started (`outOfOrder`; a message started again is neither). The bench
 * prints the sum as "order violations"; the sweep refuses a keyed setting that has any, because a
 * peer that gives up per-key order on a keyed workload is not doing the same job.
 */
export class OrderCheck {
  private readonly running = new Map<string, number>();
  private readonly highest = new Map<string, number>();
  overlaps = 0;
  outOfOrder = 0;

  /** Message `i` (its sequence in the workload) of `key` starts; keyless messages are not checked. */
  start(key: string | number | null | undefined, i: number): void {
    if (key === null || key === undefined) return;
    const k = String(key);
    const running = this.running.get(k) ?? 0;
    if (running > 0) this.overlaps++;
    this.running.set(k, running + 1);
    const highest = this.highest.get(k);
    if (highest !== undefined && i < highest) this.outOfOrder++;
    else this.highest.set(k, i);
  }

  /** The message of `key` that started last-but-not-finished has finished. */
  finish(key: string | number | null | undefined): void {
    if (key === null || key === undefined) return;
    const k = String(key);
    const running = (this.running.get(k) ?? 1) - 1;
    if (running > 0) this.running.set(k, running);
    else this.running.delete(k);
  }

  get violations(): number {
    return this.overlaps + this.outOfOrder;
  }

  notes(): { orderViolations: number; overlaps: number; outOfOrder: number } {
    return { orderViolations: this.violations, overlaps: this.overlaps, outOfOrder: this.outOfOrder };
  }
}

/** False when a run's notes count per-key order violations: such a run cannot win a keyed sweep. */
export function orderKept(notes: Record<string, number | string> | undefined): boolean {
  const violations = notes?.orderViolations;
  return typeof violations !== 'number' || violations === 0;
}
