/**
 * How `queuebox console` finds the database of a running `npm start` (`queuebox local`): the
 * local run writes its embedded PostgreSQL's URL, schema and database mark to a small file in the
 * system's temporary directory (one per OS user) and removes it when it stops; the console reads
 * it when no database URL is configured, and ignores it when the process that wrote it is gone.
 *
 * The file holds a password and decides which database the console shows, and the temporary
 * directory is shared: it is written to a new file of mode 0600 (whatever the umask) that is then
 * renamed over the name (a planted file or symbolic link is replaced, never written through), and
 * read only when it is a regular file (no symbolic link followed) owned by the current user and
 * writable by nobody else; any other file is refused with a `ConfigError` saying why.
 */
import { randomBytes } from 'node:crypto';
import { closeSync, constants, fchmodSync, fstatSync, openSync, readFileSync, renameSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { ConfigError } from '../errors.ts';

/** What a local run publishes. */
export interface LocalRunInfo {
  url: string;
  schema: string;
  /** The comment the run put on its database (`EmbeddedDatabase.marker`): the console checks it before trusting the URL. */
  marker: string;
  pid: number;
}

const uid = (): number | undefined => (typeof process.getuid === 'function' ? process.getuid() : undefined);

/** The file's path: `$TMPDIR/queuebox-local-run-<uid>.json`. */
export function localRunFilePath(): string {
  return join(tmpdir(), `queuebox-local-run-${uid() ?? 'user'}.json`);
}

/** Publishes this process's local run: a fresh owner-only (0600) file renamed over `path`. */
export function writeLocalRunFile(info: Omit<LocalRunInfo, 'pid'>, path = localRunFilePath()): void {
  const temporary = join(dirname(path), `.queuebox-local-run-${randomBytes(8).toString('hex')}.tmp`);
  const fd = openSync(temporary, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600);
  try {
    // The umask can only narrow the mode given at creation; this states it whatever the umask.
    fchmodSync(fd, 0o600);
    writeSync(fd, `${JSON.stringify({ ...info, pid: process.pid })}\n`);
  } finally {
    closeSync(fd);
  }
  try {
    renameSync(temporary, path);
  } catch (error) {
    rmSync(temporary, { force: true });
    throw error;
  }
}

/** Removes the file if this process wrote it. */
export function removeLocalRunFile(path = localRunFilePath()): void {
  let info: LocalRunInfo | undefined;
  try {
    info = readLocalRunFile(path);
  } catch {
    return;
  }
  if (info?.pid === process.pid) rmSync(path, { force: true });
}

/**
 * The running local run's database, or undefined when none is published or its process ended.
 * Throws `ConfigError` for a file it must not trust: a symbolic link or other non-regular file,
 * another user's file, or one that the group or others may write.
 */
export function readLocalRunFile(path = localRunFilePath()): LocalRunInfo | undefined {
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return undefined;
    if (code === 'ELOOP') throw refused(path, 'it is a symbolic link');
    throw error;
  }
  let text: string;
  try {
    const stat = fstatSync(fd);
    if (!stat.isFile()) throw refused(path, 'it is not a regular file');
    const me = uid();
    if (me !== undefined && stat.uid !== me) throw refused(path, `it belongs to uid ${stat.uid}, not to you (uid ${me})`);
    if ((stat.mode & 0o022) !== 0) throw refused(path, `the group or others may write it (mode ${(stat.mode & 0o777).toString(8)})`);
    text = readFileSync(fd, 'utf8');
  } finally {
    closeSync(fd);
  }
  let info: Partial<LocalRunInfo>;
  try {
    info = JSON.parse(text) as Partial<LocalRunInfo>;
  } catch {
    return undefined;
  }
  if (typeof info.url !== 'string' || typeof info.schema !== 'string' || typeof info.marker !== 'string' || typeof info.pid !== 'number' || !isAlive(info.pid)) return undefined;
  return { url: info.url, schema: info.schema, marker: info.marker, pid: info.pid };
}

function refused(path: string, why: string): ConfigError {
  return new ConfigError([{ key: 'database.url', message: `is not set, and the local run file ${path} is not trusted: ${why}; remove it and restart npm start, or set DATABASE_URL` }]);
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}
