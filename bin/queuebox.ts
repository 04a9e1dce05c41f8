#!/usr/bin/env node
/**
 * The `queuebox` command: migrate, status, reclaim, replay, cleanup, local.
 * See `bin/cli-program.ts`; this file only runs it on the process arguments.
 */
import { runCli } from './cli-program.ts';

process.exitCode = await runCli(process.argv.slice(2));
