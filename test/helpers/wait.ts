/**
 * Small synchronization helpers for tests that orchestrate several workers.
 */

/** A promise the test opens by hand. */
export interface Gate {
  wait(): Promise<void>;
  open(): void;
}

export function createGate(): Gate {
  let open!: () => void;
  const promise = new Promise<void>((resolve) => {
    open = resolve;
  });
  return { wait: () => promise, open };
}

/** Polls `check` every 20 ms until it returns true; throws after `timeoutMs` naming `what`. */
export async function waitUntil(what: string, check: () => Promise<boolean> | boolean, timeoutMs = 10_000): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > until) throw new Error(`timed out after ${timeoutMs} ms waiting until ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** Resolves after `ms`. */
export function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
