/**
 * Waiting that leaves nothing behind: resolves when the first of `promises` settles, after
 * `timeoutMs`, or when `signal` aborts — whichever comes first — and clears its timer and
 * listener, so a pass that returns leaves no timer running.
 */
export async function waitAny(promises: ReadonlyArray<Promise<unknown>>, timeoutMs: number, signal?: AbortSignal): Promise<void> {
  if (signal?.aborted) return;
  let timer: NodeJS.Timeout | undefined;
  let onAbort: (() => void) | undefined;
  const stop = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, Math.max(0, timeoutMs));
    onAbort = resolve;
    signal?.addEventListener('abort', onAbort, { once: true });
  });
  try {
    await Promise.race([stop, ...promises.map((p) => p.then(() => undefined, () => undefined))]);
  } finally {
    clearTimeout(timer);
    if (onAbort) signal?.removeEventListener('abort', onAbort);
  }
}
