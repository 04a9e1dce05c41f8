/**
 * How `queuebox console` finds the database of a running `npm start` (`queuebox local`): the
 * local run writes its embedded PostgreSQL's URL and schema to a small file in the system's
 * temporary directory (one per OS user) and removes it when it stops; the console reads it
 * when no database URL is configured, and ignores it when the process that wrote it is gone.
 */
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** What a local run publishes. */
export interface LocalRunInfo {
  url: string;
  schema: string;
  pid: number;
}

/** The file's path: `$TMPDIR/queuebox-local-run-<uid>.json`. */
export function localRunFilePath(): string {
  const uid = typeof process.getuid === 'function' ? process.getuid() : 'user';
  return join(tmpdir(), `queuebox-local-run-${uid}.json`);
}

/** Publishes this process's local run (owner-only file: the URL holds the local password). */
export function writeLocalRunFile(info: Omit<LocalRunInfo, 'pid'>, path = localRunFilePath()): void {
  writeFileSync(path, `${JSON.stringify({ ...info, pid: process.pid })}\n`, { mode: 0o600 });
}

/** Removes the file if this process wrote it. */
export function removeLocalRunFile(path = localRunFilePath()): void {
  if (readLocalRunFile(path)?.pid === process.pid) rmSync(path, { force: true });
}

/** The running local run's database, or undefined when none is published or its process ended. */
export function readLocalRunFile(path = localRunFilePath()): LocalRunInfo | undefined {
  let info: Partial<LocalRunInfo>;
  try {
    info = JSON.parse(readFileSync(path, 'utf8')) as Partial<LocalRunInfo>;
  } catch {
    return undefined;
  }
  if (typeof info.url !== 'string' || typeof info.schema !== 'string' || typeof info.pid !== 'number' || !isAlive(info.pid)) return undefined;
  return { url: info.url, schema: info.schema, pid: info.pid };
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}
