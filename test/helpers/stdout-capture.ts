/**
 * Captures the text a test's own code writes to standard output (Powertools Logger, EMF lines)
 * while `work` runs. Binary chunks pass through untouched: they are the test runner's reports.
 */

/** Runs `work`; returns its result and the captured lines. */
export async function captureStdout<T>(work: () => Promise<T>): Promise<{ result: T; lines: string[] }> {
  const captured: string[] = [];
  const write = process.stdout.write.bind(process.stdout);
  process.stdout.write = ((chunk: string | Uint8Array, ...rest: never[]) => {
    if (typeof chunk !== 'string') return write(chunk, ...rest);
    captured.push(chunk);
    return true;
  }) as typeof process.stdout.write;
  try {
    const result = await work();
    return { result, lines: captured.join('').split('\n').filter((l) => l !== '') };
  } finally {
    process.stdout.write = write;
  }
}
