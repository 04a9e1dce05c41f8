/**
 * Waiting that leaves nothing behind: resolves when the first of `promises` settles, after
 * `timeoutMs`, or when `stopped` settles — whichever comes first — and clears its timer, so a
 * pass that returns leaves no timer running. The pass turns its stop signal into `stopped` once
 * (`signalSettled`) instead of adding a listener to the signal at every wait.
 */
export async function waitAny(promises: ReadonlyArray<Promise<unknown>>, timeoutMs: number, stopped?: Promise<void>): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, Math.max(0, timeoutMs));
  });
  try {
    await Promise.race([timeout, ...(stopped ? [stopped] : []), ...promises.map((p) => p.then(() => undefined, () => undefined))]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * A promise that resolves when `signal` aborts (at once if it has), and `dispose` to remove its
 * one listener when the waiting is over (a runner's signal outlives many passes).
 */
export function signalSettled(signal: AbortSignal | undefined): { settled: Promise<void> | undefined; dispose(): void } {
  if (signal === undefined) return { settled: undefined, dispose() {} };
  if (signal.aborted) return { settled: Promise.resolve(), dispose() {} };
  let onAbort: () => void = () => {};
  const settled = new Promise<void>((resolve) => {
    onAbort = resolve;
  });
  signal.addEventListener('abort', onAbort, { once: true });
  return { settled, dispose: () => signal.removeEventListener('abort', onAbort) };
}
