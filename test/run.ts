/**
 * The test command: type-check and lint run before this (see `npm test`); this script provides a
 * database and runs every test file with Node's test runner, one process per file.
 *
 * - `DATABASE_URL` set: tests use that server (each test file in its own schema).
 * - unset: an embedded PostgreSQL is started once for the whole run and removed afterwards.
 *
 * Arguments: file paths or substrings to select test files (default: all of `test/**\/*.test.ts`).
 *
 * Every test has a time limit: `TEST_TIMEOUT_MS` unless it sets a longer `timeout` of its own, so a
 * hang fails the test that hangs instead of stalling the run.
 */
import { spawn } from 'node:child_process';
import { readdirSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { startEmbeddedDatabase, type EmbeddedDatabase } from '../lib/local/embedded-database.ts';

function findTests(dir: string): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(dir)) {
    const path = join(dir, entry);
    if (statSync(path).isDirectory()) out.push(...findTests(path));
    else if (entry.endsWith('.test.ts')) out.push(relative(process.cwd(), path));
  }
  return out.sort();
}

/** The default time limit of each test (and suite); longer ones declare their own `timeout`. */
const TEST_TIMEOUT_MS = 240_000;

const filters = process.argv.slice(2);
const files = findTests('test').filter((f) => filters.length === 0 || filters.some((s) => f.includes(s)));
if (files.length === 0) {
  console.error(`no test files match ${filters.join(' ')}`);
  process.exit(1);
}

let embedded: EmbeddedDatabase | undefined;
const env = { ...process.env };
if (!env.DATABASE_URL) {
  const started = Date.now();
  embedded = await startEmbeddedDatabase();
  // The superuser: some suites create roles and terminate backends.
  env.DATABASE_URL = embedded.adminUrl;
  console.log(`# embedded PostgreSQL started in ${Date.now() - started} ms (DATABASE_URL unset)`);
} else {
  console.log(`# using DATABASE_URL=${env.DATABASE_URL.replace(/:[^:@/]*@/, ':***@')}`);
}

const code = await new Promise<number>((resolve) => {
  const child = spawn(process.execPath, ['--import', 'tsx', '--test', '--test-reporter=spec', '--test-concurrency=2', `--test-timeout=${TEST_TIMEOUT_MS}`, ...files], {
    env,
    stdio: 'inherit',
  });
  const forward = (signal: NodeJS.Signals) => child.kill(signal);
  process.on('SIGINT', forward);
  process.on('SIGTERM', forward);
  child.on('exit', (exitCode, signal) => resolve(exitCode ?? (signal ? 1 : 0)));
});

if (embedded) await embedded.stop();
process.exit(code);
