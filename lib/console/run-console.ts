/**
 * `queuebox console`: resolves the configuration and database like the functions do (or, with
 * none configured, the database of a running `npm start`), starts the console server and serves
 * until SIGINT/SIGTERM (or `signal`).
 */
import { randomBytes } from 'node:crypto';
import { loadConfig, parseConfig } from '../config/load-config.ts';
import type { QueueBoxConfig } from '../config/schema.ts';
import { createDriver, resolveDatabaseUrl } from '../db/create-driver.ts';
import { ConfigError, QueueBoxError, UsageError } from '../errors.ts';
import { isLoopback, startConsoleServer, type ConsoleServer } from './console-server.ts';
import { SESSION_MAX_AGE_SECONDS } from './console-sessions.ts';
import { readLocalRunFile } from './local-run-file.ts';
import { localClusterReadMark } from '../db/postgres/local-cluster.ts';

/** Default TCP port of the console. */
export const CONSOLE_DEFAULT_PORT = 8787;

/** Options of `queuebox console` plus the IO and stop signal tests inject. */
export interface RunConsoleOptions {
  port?: number;
  /** Bind address; anything but loopback needs `requireToken` and prints a warning. */
  host?: string;
  allowActions?: boolean;
  /** Generate an access token, print the address that carries it, and serve only browsers that presented it (required off loopback). */
  requireToken?: boolean;
  configPath?: string;
  env: Record<string, string | undefined>;
  stdout: (text: string) => void;
  stderr: (text: string) => void;
  /** Stops the console (tests); SIGINT/SIGTERM always do. */
  signal?: AbortSignal;
  /** Called once the console listens. */
  onListening?: (server: ConsoleServer) => void;
  /** Where a local run publishes its database (default: `localRunFilePath()`). */
  localRunFile?: string;
}

/**
 * The configuration to serve: as loaded, or pointed at the local run's database when it names no
 * database at all, neither `database.url` nor `database.urlEnv` (the run file must pass
 * `readLocalRunFile`'s owner and mode checks, and the database its URL leads to must carry the
 * mark the file names). A `database.urlEnv` whose variable is unset stops it naming that key.
 */
export async function consoleConfig(options: Pick<RunConsoleOptions, 'configPath' | 'env' | 'stderr' | 'localRunFile'>): Promise<QueueBoxConfig> {
  const base = loadConfig({ env: options.env, ...(options.configPath !== undefined ? { path: options.configPath } : {}) });
  if (base.database.url !== undefined || base.database.urlEnv !== undefined) {
    // A configured database is used or refused naming its key (a `database.urlEnv` whose variable is unset), never replaced.
    resolveDatabaseUrl(base, options.env);
    return base;
  }
  const local = readLocalRunFile(options.localRunFile);
  if (!local) {
    throw new ConfigError([{ key: 'database.url', message: 'is not set and no local run (npm start) is running: start one, or set DATABASE_URL / QUEUEBOX_DATABASE_URL' }]);
  }
  const found = await localClusterReadMark(local.url).catch((cause: unknown) => {
    throw new ConfigError([{ key: 'database.url', message: `is not set, and the local run's database (process ${local.pid}) cannot be reached: ${cause instanceof Error ? cause.message : String(cause)}` }]);
  });
  if (found !== local.marker) {
    throw new ConfigError([{ key: 'database.url', message: `is not set, and the database at the local run file's address is not the one that run created (its mark differs): not using it` }]);
  }
  options.stderr(`queuebox console: no database configured; using the local run's embedded PostgreSQL (process ${local.pid})\n`);
  return parseConfig({ ...base, database: { ...base.database, url: local.url, urlEnv: undefined, schema: local.schema } });
}

/** Starts the server; a port in use or not allowed is the operator's to fix, so it becomes a `UsageError`. */
async function listen(options: Parameters<typeof startConsoleServer>[0]): Promise<ConsoleServer> {
  try {
    return await startConsoleServer(options);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'EADDRINUSE' || code === 'EACCES' || code === 'EADDRNOTAVAIL') {
      throw new UsageError(`console: cannot listen on ${options.host ?? '127.0.0.1'}:${options.port} (${code}); choose another --port or --host`);
    }
    throw error;
  }
}

/** A database's refusal at start-up (no such database, wrong password…) as one line naming the cause; other errors pass. */
function databaseError(error: unknown): unknown {
  const code = (error as { code?: unknown } | null)?.code;
  if (error instanceof QueueBoxError || typeof code !== 'string') return error;
  return new QueueBoxError(`console: cannot use the database (${code}): ${(error as Error).message}; check database.url / DATABASE_URL`, { cause: error });
}

/** Serves the console until stopped; throws `ConfigError`/`UsageError` when it cannot start. */
export async function runConsole(options: RunConsoleOptions): Promise<void> {
  const host = options.host ?? '127.0.0.1';
  const port = options.port ?? CONSOLE_DEFAULT_PORT;
  if (!Number.isInteger(port) || port < 0 || port > 65_535) throw new UsageError(`console: --port must be a TCP port (1 to 65535), not ${port}`);
  if (!isLoopback(host)) {
    if (options.requireToken !== true) {
      throw new UsageError(`console: --host ${host} makes the console reachable from the network; add --require-token (a browser then needs the printed access address), or keep 127.0.0.1 and use an SSH tunnel`);
    }
    options.stderr(
      `WARNING: the console listens on ${host}: anyone who can reach this address and has its access token sees rows, errors and payloads${options.allowActions ? ' and can replay rows' : ''}, over plain HTTP; prefer 127.0.0.1 and an SSH tunnel.\n`,
    );
  }
  const accessToken = options.requireToken === true ? randomBytes(24).toString('base64url') : undefined;
  const config = await consoleConfig(options);
  const driver = await createDriver(config, options.env);
  const stop = new AbortController();
  const onSignal = () => stop.abort();
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  options.signal?.addEventListener('abort', onSignal, { once: true });
  let server: ConsoleServer | undefined;
  try {
    await driver.schemaVerify().catch((error: unknown) => {
      throw databaseError(error);
    });
    server = await listen({
      driver,
      config,
      env: options.env,
      host,
      port,
      allowActions: options.allowActions === true,
      ...(accessToken !== undefined ? { accessToken } : {}),
      onError: (error) => options.stderr(`queuebox console: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`),
    });
    options.stdout(`QueueBox console on ${server.url}/ (${options.allowActions ? 'actions allowed' : 'read-only; --allow-actions enables replay'}); Ctrl-C stops it\n`);
    if (accessToken !== undefined) {
      options.stdout(`open ${server.url}/?access=${accessToken} (a browser presents the token once and then holds a session for ${SESSION_MAX_AGE_SECONDS / 3600} hours; keep it secret)\n`);
      if (host === '127.0.0.1' || host === 'localhost') {
        const [a, b, c] = randomBytes(3);
        const own = `127.${a}.${b}.${1 + (c! % 254)}`;
        options.stderr(
          `note: browsers send the console's session cookie to every server on ${host}, whatever its port; on Linux, an address of the console's own keeps it from other local services: --host ${own} (any 127.x.y.z)\n`,
        );
      }
    }
    options.onListening?.(server);
    if (!stop.signal.aborted) await new Promise((resolve) => stop.signal.addEventListener('abort', resolve, { once: true }));
  } finally {
    process.removeListener('SIGINT', onSignal);
    process.removeListener('SIGTERM', onSignal);
    options.signal?.removeEventListener('abort', onSignal);
    await server?.close();
    await driver.close();
  }
}
