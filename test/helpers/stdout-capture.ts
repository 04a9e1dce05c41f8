/**
 * Captures the text a test's own code writes to standard output (Powertools Logger, EMF lines)
 * while `work` runs; with `stderr: true`, standard error too (Powertools Logger writes its `WARN`
 * and `ERROR` lines there; Lambda sends both streams to CloudWatch Logs). Binary chunks pass
 * through untouched: they are the test runner's reports.
 */

/** Runs `work`; returns its result and the captured lines. */
export async function captureStdout<T>(work: () => Promise<T>, options: { stderr?: boolean } = {}): Promise<{ result: T; lines: string[] }> {
  const captured: string[] = [];
  const streams = options.stderr === true ? [process.stdout, process.stderr] : [process.stdout];
  const writes = streams.map((stream) => {
    const write = stream.write.bind(stream);
    stream.write = ((chunk: string | Uint8Array, ...rest: never[]) => {
      if (typeof chunk !== 'string') return write(chunk, ...rest);
      captured.push(chunk);
      return true;
    }) as typeof stream.write;
    return write;
  });
  try {
    const result = await work();
    return { result, lines: captured.join('').split('\n').filter((l) => l !== '') };
  } finally {
    streams.forEach((stream, i) => (stream.write = writes[i]!));
  }
}
