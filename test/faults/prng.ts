/**
 * A small seeded pseudo-random generator (mulberry32), so one seed replays one fault schedule.
 *
 * Each consumer (destination, invocation planner, injector) derives its own stream with `fork`,
 * so the draws of one do not shift the draws of another when timings differ between runs.
 */

/** Deterministic random numbers in [0, 1) from a 32-bit seed. */
export class Prng {
  #state: number;

  constructor(readonly seed: number) {
    this.#state = seed >>> 0;
  }

  /** Next float in [0, 1). */
  float = (): number => {
    this.#state = (this.#state + 0x6d2b79f5) >>> 0;
    let t = this.#state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };

  /** True with probability `p`. */
  chance(p: number): boolean {
    return this.float() < p;
  }

  /** Integer in [min, max] (inclusive). */
  int(min: number, max: number): number {
    return min + Math.floor(this.float() * (max - min + 1));
  }

  /** One element of `items`. */
  pick<T>(items: readonly T[]): T {
    return items[Math.floor(this.float() * items.length)]!;
  }

  /** An independent stream named `label`, derived from this generator's seed. */
  fork(label: string): Prng {
    let h = this.seed ^ 0x9e3779b9;
    for (let i = 0; i < label.length; i++) h = Math.imul(h ^ label.charCodeAt(i), 0x01000193);
    return new Prng(h >>> 0);
  }
}
