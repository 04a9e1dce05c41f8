/**
 * The entry point of a benchmark script.
 */

/** Runs `main`; an error is printed with its stack and exits the process with status 1. */
export function runMain(main: () => Promise<void>): void {
  main().catch((error: unknown) => {
    process.stderr.write(`${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    process.exit(1);
  });
}
