#!/usr/bin/env node
/**
 * The `queuebox` command: migrate, status, reclaim, replay, cleanup, local.
 * See `bin/cli-program.ts`; this file only runs it on the process arguments.
 */
import { runCli } from './cli-program.ts';

// A reader that quit (`queuebox migrate --sql | head`, a closed pager) closes standard output: each
// write then fails with EPIPE, which Node.js raised as an unhandled error with a stack. Nothing
// more can be shown, and the command ends quietly instead: one that runs until stopped (`local`,
// `console`) stops as on Ctrl-C, once (a local run finishes its invocations and stops its
// database); any other finishes its work and exits with its own code. Its later lines are dropped.
// Any other error of the stream is still thrown.
let readerGone = false;
process.stdout.on('error', (error: NodeJS.ErrnoException) => {
  if (error.code !== 'EPIPE') throw error;
  if (readerGone) return;
  readerGone = true;
  if (process.listenerCount('SIGINT') > 0) process.emit('SIGINT', 'SIGINT');
});

process.exitCode = await runCli(process.argv.slice(2));
