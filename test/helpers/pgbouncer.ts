/**
 * A real PgBouncer in front of the test server, for the tests of what QueueBox promises behind a
 * pooler in transaction mode. The binary is Debian's `pgbouncer` (`.ci/run` installs it when
 * absent); without it `startPgBouncer` returns the reason to skip.
 *
 * PgBouncer refuses to run as root: as root it is started with `-u nobody`, and its files are
 * made readable to that user.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface PgBouncer {
  /** The connection string of the database through PgBouncer. */
  url: string;
  close(): Promise<void>;
}

const BINARIES = ['/usr/sbin/pgbouncer', '/usr/bin/pgbouncer', '/usr/local/bin/pgbouncer'];

/** Where the binary is, or undefined. */
export function pgBouncerBinary(): string | undefined {
  return BINARIES.find((path) => existsSync(path));
}

/** Why the PgBouncer tests cannot run here, or undefined when they can. */
export function pgBouncerMissing(): string | undefined {
  return pgBouncerBinary() === undefined ? `no pgbouncer binary (looked for ${BINARIES.join(', ')}; Debian: apt-get install pgbouncer, as .ci/run does)` : undefined;
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

async function answers(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

/**
 * Starts PgBouncer in `pool_mode` (default `transaction`) in front of the database of `url`, with
 * `poolSize` server connections per database and user (`default_pool_size`) and, when given,
 * `ignore_startup_parameters`.
 */
export async function startPgBouncer(url: string, options: { poolSize: number; poolMode?: 'transaction' | 'session'; ignoreStartupParameters?: readonly string[] }): Promise<PgBouncer> {
  const binary = pgBouncerBinary();
  if (binary === undefined) throw new Error(pgBouncerMissing());
  const target = new URL(url);
  const database = decodeURIComponent(target.pathname.slice(1)) || 'postgres';
  const user = decodeURIComponent(target.username) || 'postgres';
  const password = decodeURIComponent(target.password);
  const dir = await mkdtemp(join(tmpdir(), 'queuebox-pgbouncer-'));
  const port = await freePort();
  const server = [`host=${target.hostname}`, `port=${target.port || '5432'}`, `dbname=${database}`, `user=${user}`, ...(password ? [`password=${password}`] : [])].join(' ');
  await writeFile(join(dir, 'users.txt'), `"${user}" ""\n`);
  await writeFile(
    join(dir, 'pgbouncer.ini'),
    [
      '[databases]',
      `${database} = ${server}`,
      '[pgbouncer]',
      'listen_addr = 127.0.0.1',
      `listen_port = ${port}`,
      'auth_type = trust',
      `auth_file = ${join(dir, 'users.txt')}`,
      `pool_mode = ${options.poolMode ?? 'transaction'}`,
      `default_pool_size = ${options.poolSize}`,
      'max_client_conn = 200',
      'unix_socket_dir =',
      ...(options.ignoreStartupParameters === undefined ? [] : [`ignore_startup_parameters = ${options.ignoreStartupParameters.join(', ')}`]),
      '',
    ].join('\n'),
  );
  const root = process.getuid?.() === 0;
  if (root) {
    await chmod(dir, 0o755);
    await chmod(join(dir, 'users.txt'), 0o644);
    await chmod(join(dir, 'pgbouncer.ini'), 0o644);
  }
  const child: ChildProcess = spawn(binary, [...(root ? ['-u', 'nobody'] : []), join(dir, 'pgbouncer.ini')], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  child.stderr?.on('data', (chunk: Buffer) => (log += chunk.toString('utf8')));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  for (let i = 0; ; i++) {
    if (await answers(port)) break;
    if (child.exitCode !== null || i > 100) {
      child.kill('SIGKILL');
      await rm(dir, { recursive: true, force: true });
      throw new Error(`pgbouncer did not start:\n${log}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  const through = new URL(url);
  through.hostname = '127.0.0.1';
  through.port = String(port);
  through.password = '';
  return {
    url: through.toString(),
    async close() {
      child.kill('SIGTERM');
      await exited;
      await rm(dir, { recursive: true, force: true });
    },
  };
}
