/**
 * Caps the destination calls in flight within one pass (`outbox.concurrency`).
 *
 * Calls beyond the cap wait in arrival order; a slot is handed to the next waiter as soon as a
 * call settles, whether it succeeded or threw.
 */
export class CallLimiter {
  readonly #limit: number;
  #active = 0;
  readonly #waiting: Array<() => void> = [];

  /** `limit` ≥ 1: the most calls `run` lets through at once. */
  constructor(limit: number) {
    this.#limit = Math.max(1, limit);
  }

  /** Calls in flight now. */
  get active(): number {
    return this.#active;
  }

  /** Runs `call` once a slot is free; resolves or rejects with it. */
  async run<T>(call: () => Promise<T>): Promise<T> {
    if (this.#active >= this.#limit) await new Promise<void>((resolve) => this.#waiting.push(resolve));
    else this.#active++;
    try {
      return await call();
    } finally {
      const next = this.#waiting.shift();
      if (next) next();
      else this.#active--;
    }
  }
}
