/**
 * The package as a user gets it: `npm pack` of this checkout (compiled through `prepack`), made
 * once per state of the sources and shared by the test files that install it. Packing writes
 * `dist/` here, so test files running in parallel take turns through a lock directory; the next
 * one finds the tarball already made for the same sources. npm installs from its cache where it
 * can (`--prefer-offline`).
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

export interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/**
 * Runs a command to completion (killed after `timeoutMs`), never rejecting: the exit code says how
 * it went. Its standard input is closed at once (osls reads an event from an open one).
 */
export function run(command: string, args: string[], options: { cwd: string; env?: NodeJS.ProcessEnv; timeoutMs?: number }): Promise<Run> {
  return new Promise((done) => {
    const child = execFile(command, args, { cwd: options.cwd, env: options.env ?? process.env, timeout: options.timeoutMs ?? 180_000, maxBuffer: 32 * 1024 * 1024 }, (error, stdout, stderr) => {
      const code = error ? (typeof error.code === 'number' ? error.code : 1) : 0;
      // A command that could not start (ENOENT) says so in its stderr.
      done({ code, stdout, stderr: error && typeof error.code === 'string' ? `${stderr}${error.message}\n` : stderr });
    });
    child.stdin?.end();
  });
}

/** A run's exit code and output, for assertion messages. */
export const explain = (r: Run) => `exit ${r.code}\nstdout:\n${r.stdout}\nstderr:\n${r.stderr}`;

/** What `npm pack` reads: a change to any of these makes a new tarball. */
const PACKED_SOURCES = ['lib', 'functions', 'bin', 'docs', 'package.json', 'tsconfig.json', 'tsconfig.build.json', 'README.md', 'CHANGELOG.md', 'LICENSE'];

function sourcesKey(): string {
  const hash = createHash('sha256');
  const visit = (path: string) => {
    if (!existsSync(path)) return;
    const stat = statSync(path);
    if (stat.isDirectory()) for (const entry of readdirSync(path).sort()) visit(join(path, entry));
    else hash.update(`${path}\0${stat.size}\0${stat.mtimeMs}\n`);
  };
  for (const path of PACKED_SOURCES) visit(path);
  return hash.digest('hex').slice(0, 16);
}

/** The path of the tarball of this checkout, packing it unless a test file already did for the same sources. */
export async function packedTarball(): Promise<string> {
  const lock = join(tmpdir(), 'queuebox-pack.lock');
  const deadline = Date.now() + 300_000;
  for (;;) {
    try {
      mkdirSync(lock);
      break;
    } catch {
      // A lock left by a killed run: older than any pack takes.
      const held = statSync(lock, { throwIfNoEntry: false });
      if (held !== undefined && Date.now() - held.mtimeMs > 300_000) rmSync(lock, { recursive: true, force: true });
      if (Date.now() > deadline) throw new Error(`${lock} stayed locked for 5 minutes`);
      await sleep(500);
    }
  }
  try {
    const dir = join(tmpdir(), `queuebox-pack-${sourcesKey()}`);
    const made = existsSync(dir) ? readdirSync(dir).find((f) => f.endsWith('.tgz')) : undefined;
    if (made !== undefined) return join(dir, made);
    // Packages of other sources are removed once an hour old: another checkout on this machine
    // (a second clone, a CI run beside a developer's) may be installing its own meanwhile.
    for (const old of readdirSync(tmpdir()).filter((f) => f.startsWith('queuebox-pack-'))) {
      const path = join(tmpdir(), old);
      if (Date.now() - statSync(path).mtimeMs > 3_600_000) rmSync(path, { recursive: true, force: true });
    }
    mkdirSync(dir);
    const packed = await run('npm', ['pack', '--pack-destination', dir, '--json'], { cwd: process.cwd() });
    if (packed.code !== 0) throw new Error(`npm pack failed: ${explain(packed)}`);
    return join(dir, (JSON.parse(packed.stdout.slice(packed.stdout.indexOf('['))) as Array<{ filename: string }>)[0]!.filename);
  } finally {
    rmSync(lock, { recursive: true, force: true });
  }
}

/** `npm install` into `dir` from the npm cache where it can; throws with npm's output when it fails. */
export async function npmInstall(dir: string, args: string[]): Promise<void> {
  const installed = await run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', ...args], { cwd: dir });
  if (installed.code !== 0) throw new Error(`npm install ${args.join(' ')} failed: ${explain(installed)}`);
}
