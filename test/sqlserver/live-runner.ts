/**
 * The steps of `npm run test:sqlserver` (entry point: `test/sqlserver/run-live.ts`), with every
 * effect behind a `LiveRunner` so the order, the arguments and the failure messages are tested
 * without a server (`test/sqlserver/run-live.test.ts`, with a stand-in `docker` on PATH).
 *
 * 1. Without `QUEUEBOX_MSSQL_URL`: check `docker` (CLI and engine) and `docker compose`, pull the
 *    image and start the service of `test/sqlserver/compose.yml` (`up -d --wait`: its healthcheck
 *    runs `sqlcmd`). With `QUEUEBOX_MSSQL_URL`: that server, and no Docker at all.
 * 2. Two databases, `queuebox_live_rcsi_on` and `queuebox_live_rcsi_off`, created afresh with
 *    `READ_COMMITTED_SNAPSHOT` ON and OFF (`--no-create`: the URL's own database, as it is).
 * 3. For each: `queuebox migrate` and `queuebox migrate --check` on it (the CLI a user runs), then
 *    the conformance suite and the live-only suites through `test/run.ts` with
 *    `QUEUEBOX_MSSQL_URL` pointing at it.
 * 4. A summary per database; the container is removed (`down -v`) unless `--keep`, and the two
 *    databases dropped on a server of your own unless `--keep`.
 *
 * Every command has a time limit; nothing waits forever.
 */
import { spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** The compose file, relative to the repository root (the script runs from there). */
export const COMPOSE_FILE = 'test/sqlserver/compose.yml';
/** The compose project name: containers are `queuebox-mssql-<service>-1`. */
export const COMPOSE_PROJECT = 'queuebox-mssql';
/** The healthcheck's sqlcmd (the images since SQL Server 2022 CU14 and 2019 CU28 ship mssql-tools18; `-C` trusts the self-signed certificate). */
export const HEALTHCHECK_SQLCMD = '/opt/mssql-tools18/bin/sqlcmd -C';
/** SA password unless `QUEUEBOX_MSSQL_SA_PASSWORD` is set (the container is local and thrown away). */
export const DEFAULT_SA_PASSWORD = 'QueueBox-Live-1';
/** How long `up --wait` waits for the healthcheck, in seconds. */
export const WAIT_TIMEOUT_S = 300;

/** The servers the compose file offers. */
export const SERVERS = {
  '2022': { service: 'mssql-2022', image: 'mcr.microsoft.com/mssql/server:2022-latest', port: 14330, profile: undefined, label: 'SQL Server 2022' },
  '2019': { service: 'mssql-2019', image: 'mcr.microsoft.com/mssql/server:2019-latest', port: 14319, profile: '2019', label: 'SQL Server 2019' },
} as const;
export type ServerName = keyof typeof SERVERS;
/** The servers in the order they are offered (2022, the default, first). */
export const SERVER_NAMES: ServerName[] = ['2022', '2019'];

/**
 * The suites a live run runs, each in its own `test/run.ts`, in this order: the conformance suite
 * and every live-only file (`run-live.test.ts` checks that no live file is left out).
 */
export const LIVE_SUITES = ['test/conformance/sqlserver.test.ts', 'test/sqlserver/live-server.test.ts', 'test/sqlserver/live-claims.test.ts', 'test/sqlserver/live-plans.test.ts'];

/** The two databases, RCSI on and off. */
export const DATABASES = [
  { name: 'queuebox_live_rcsi_on', rcsi: true },
  { name: 'queuebox_live_rcsi_off', rcsi: false },
] as const;

/**
 * `test/run.ts` starts an embedded PostgreSQL when `DATABASE_URL` is unset; the SQL Server suites
 * do not use PostgreSQL, so an unset `DATABASE_URL` is given this address, which nothing connects to.
 */
export const UNUSED_POSTGRES_URL = 'postgres://unused@127.0.0.1:9/not-used-by-the-sqlserver-suites';

/**
 * The script's own variables: not passed to `queuebox migrate` or the tests, where a `QUEUEBOX_*`
 * variable is a configuration override (`QUEUEBOX_MSSQL_PORT` would be an unknown key `mssqlPort`).
 */
export const SCRIPT_VARIABLES = ['QUEUEBOX_MSSQL_PORT', 'QUEUEBOX_MSSQL_SA_PASSWORD', 'QUEUEBOX_MSSQL_SERVER'] as const;

export interface LiveRunOptions {
  server: ServerName;
  keep: boolean;
  /** `QUEUEBOX_MSSQL_URL`: a server of your own; Docker is not used. */
  url?: string;
  /** With `url`: run on its database as it is, create nothing. */
  noCreate: boolean;
  dryRun: boolean;
  port: number;
  password: string;
  /** test/run.ts filters. */
  suites: string[];
}

export type ParsedArgs = { kind: 'run'; options: LiveRunOptions } | { kind: 'help'; text: string } | { kind: 'error'; message: string };

export const USAGE = `Usage: npm run test:sqlserver -- [--server 2022|2019] [--keep] [--no-create] [--dry-run] [test filters…]

Starts SQL Server in Docker (test/sqlserver/compose.yml), creates two databases
(READ_COMMITTED_SNAPSHOT ON and OFF), runs \`queuebox migrate\` on each, then the SQL Server
conformance suite and the live-only suites, each in its own test/run.ts (default:
${LIVE_SUITES.join(' ')}), and removes the container.

  --server 2022|2019  which SQL Server image (default 2022; env QUEUEBOX_MSSQL_SERVER)
  --keep              leave the container (or the two databases) for a look afterwards
  --no-create         with QUEUEBOX_MSSQL_URL: use its database as it is (Azure SQL Database)
  --dry-run           print the steps, run nothing

Environment: QUEUEBOX_MSSQL_URL (a SQL Server of your own: Docker is not used),
QUEUEBOX_MSSQL_PORT (host port; default 14330 for 2022, 14319 for 2019),
QUEUEBOX_MSSQL_SA_PASSWORD (default ${DEFAULT_SA_PASSWORD}).`;

/** Reads the command line and the environment. */
export function parseLiveArgs(argv: string[], env: Readonly<Record<string, string | undefined>>): ParsedArgs {
  let server = (env.QUEUEBOX_MSSQL_SERVER ?? '2022') as string;
  let keep = false;
  let noCreate = false;
  let dryRun = false;
  const suites: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === '--help' || a === '-h') return { kind: 'help', text: USAGE };
    else if (a === '--keep') keep = true;
    else if (a === '--no-create') noCreate = true;
    else if (a === '--dry-run') dryRun = true;
    else if (a === '--server') server = argv[++i] ?? '';
    else if (a.startsWith('--server=')) server = a.slice('--server='.length);
    else if (a.startsWith('-')) return { kind: 'error', message: `unknown option ${a}\n\n${USAGE}` };
    else suites.push(a);
  }
  if (!Object.hasOwn(SERVERS, server)) return { kind: 'error', message: `--server must be one of ${SERVER_NAMES.join(', ')} (got ${JSON.stringify(server)})` };
  const url = env.QUEUEBOX_MSSQL_URL === '' ? undefined : env.QUEUEBOX_MSSQL_URL;
  if (noCreate && url === undefined) return { kind: 'error', message: '--no-create needs QUEUEBOX_MSSQL_URL (a server of your own); with Docker the databases are always created' };
  const portText = env.QUEUEBOX_MSSQL_PORT;
  const port = portText === undefined || portText === '' ? SERVERS[server as ServerName].port : Number(portText);
  if (!Number.isInteger(port) || port < 1 || port > 65535) return { kind: 'error', message: `QUEUEBOX_MSSQL_PORT must be a port number (got ${JSON.stringify(portText)})` };
  return {
    kind: 'run',
    options: {
      server: server as ServerName,
      keep,
      ...(url !== undefined ? { url } : {}),
      noCreate,
      dryRun,
      port,
      password: env.QUEUEBOX_MSSQL_SA_PASSWORD || DEFAULT_SA_PASSWORD,
      suites: suites.length > 0 ? suites : LIVE_SUITES,
    },
  };
}

export interface ExecResult {
  /** Exit code; null when the command could not be started or was stopped. */
  code: number | null;
  /** stdout and stderr as captured. */
  output: string;
  /** The executable was not found (ENOENT). */
  missing?: boolean;
  timedOut?: boolean;
}

export interface ExecOptions {
  env?: Record<string, string | undefined>;
  timeoutMs: number;
  /** Show the output as it comes (long steps), besides capturing it. */
  echo?: boolean;
}

/** The effects of a live run. */
export interface LiveRunner {
  exec(command: string, args: string[], options: ExecOptions): Promise<ExecResult>;
  /** Creates (or recreates) database `name` on the server of `url` with RCSI as given; returns `@@VERSION`. */
  prepareDatabase(url: string, name: string, rcsi: boolean): Promise<string>;
  /** Reads the RCSI setting and `@@VERSION` of the URL's own database (`--no-create`). */
  inspectDatabase(url: string): Promise<{ rcsi: boolean; version: string }>;
  dropDatabase(url: string, name: string): Promise<void>;
  log(line: string): void;
  /** True once the user pressed Ctrl-C: no further step starts, the clean-up still runs. */
  interrupted?(): boolean;
}

/** A failure with the message the user sees; `code` is the exit code. */
export class LiveRunError extends Error {
  constructor(
    message: string,
    readonly code = 1,
  ) {
    super(message);
  }
}

/** The `mssql://` URL of `database` on the server of `url` (an mssql:// URL or an ADO connection string). */
export function withDatabase(url: string, database: string): string {
  if (/^(mssql|sqlserver):\/\//i.test(url)) {
    const u = new URL(url);
    u.pathname = `/${encodeURIComponent(database)}`;
    return u.toString();
  }
  const parts = url.split(';').filter((p) => p.trim() !== '' && !/^\s*(database|initial catalog)\s*=/i.test(p));
  return [...parts, `Database=${database}`].join(';');
}

/** The URL of the container's server (its `master` database). */
export function containerUrl(options: Pick<LiveRunOptions, 'port' | 'password'>): string {
  return `mssql://sa:${encodeURIComponent(options.password)}@127.0.0.1:${options.port}/master?encrypt=true&trustServerCertificate=true`;
}

/** A URL with its password hidden, for logs. */
export function shownUrl(url: string): string {
  return url.replace(/(:\/\/[^:/@]*:)[^@]*@/, '$1***@').replace(/(password|pwd)\s*=[^;]*/gi, '$1=***');
}

/** The `docker compose` arguments before the subcommand. */
export function composeArgs(options: Pick<LiveRunOptions, 'server'>): string[] {
  const profile = SERVERS[options.server].profile;
  return ['compose', '-f', COMPOSE_FILE, '-p', COMPOSE_PROJECT, ...(profile ? ['--profile', profile] : [])];
}

const MINUTE = 60_000;

/** Counts from the closing lines of Node's spec reporter (`ℹ pass 12`). */
export function testCounts(output: string): { pass: number; fail: number; skipped: number; cancelled: number } | undefined {
  const count = (label: string) => {
    const m = new RegExp(`^\\S*\\s*${label} (\\d+)\\s*$`, 'm').exec(output);
    return m ? Number(m[1]) : undefined;
  };
  const pass = count('pass');
  const fail = count('fail');
  if (pass === undefined || fail === undefined) return undefined;
  return { pass, fail, skipped: count('skipped') ?? 0, cancelled: count('cancelled') ?? 0 };
}

type Counts = NonNullable<ReturnType<typeof testCounts>>;

/** Counts of several runs added up; a run without counts leaves the sum as it was. */
function addCounts(a: Counts | undefined, b: Counts | undefined): Counts | undefined {
  if (!a || !b) return a ?? b;
  return { pass: a.pass + b.pass, fail: a.fail + b.fail, skipped: a.skipped + b.skipped, cancelled: a.cancelled + b.cancelled };
}

interface DatabaseResult {
  database: string;
  rcsi: boolean;
  migrate: 'ok' | 'failed' | 'not run';
  tests: 'ok' | 'failed' | 'not run';
  counts?: Counts;
}

/** Runs the whole live run; resolves with the process exit code (0: every step and test passed). */
export async function runLive(options: LiveRunOptions, runner: LiveRunner): Promise<number> {
  const log = runner.log;
  const server = SERVERS[options.server];
  const compose = composeArgs(options);
  const composeEnv = { ...process.env, QUEUEBOX_MSSQL_PORT: String(options.port), QUEUEBOX_MSSQL_SA_PASSWORD: options.password };
  const useDocker = options.url === undefined;
  const nodeEnv: Record<string, string | undefined> = { ...process.env, ...Object.fromEntries(SCRIPT_VARIABLES.map((n) => [n, undefined])) };
  let started = false;
  const results: DatabaseResult[] = [];
  let code = 1;
  try {
    let baseUrl: string;
    if (useDocker) {
      await checkDocker(runner);
      log(`# ${server.label}: pulling ${server.image} (the first pull downloads about 1.5 GB)`);
      const pull = await runner.exec('docker', [...compose, 'pull', server.service], { env: composeEnv, timeoutMs: 30 * MINUTE, echo: true });
      if (pull.code !== 0) throw new LiveRunError(`docker compose pull ${server.service} failed${why(pull)}: the image ${server.image} could not be pulled (network, or a registry mirror that does not have it).${tail(pull)}`);
      stopIfInterrupted();
      log(`# starting ${server.service} on 127.0.0.1:${options.port} and waiting for its healthcheck (${HEALTHCHECK_SQLCMD}; at most ${WAIT_TIMEOUT_S} s)`);
      started = true;
      const up = await runner.exec('docker', [...compose, 'up', '-d', '--wait', '--wait-timeout', String(WAIT_TIMEOUT_S), server.service], {
        env: composeEnv,
        timeoutMs: (WAIT_TIMEOUT_S + 120) * 1000,
        echo: true,
      });
      if (up.code !== 0) {
        const logs = await runner.exec('docker', [...compose, 'logs', '--tail', '40', server.service], { env: composeEnv, timeoutMs: MINUTE });
        throw new LiveRunError(
          `${server.service} did not become healthy${why(up)}. ${portHint(up.output, options.port)}` +
            'SQL Server needs at least 2 GB of memory for the container, and a password of 8+ characters with three of: upper case, lower case, digits, symbols (QUEUEBOX_MSSQL_SA_PASSWORD).' +
            `${tail(up)}\nIts last log lines:${tail(logs, 40) || ' (none)'}`,
        );
      }
      baseUrl = containerUrl(options);
    } else {
      baseUrl = options.url!;
      log(`# QUEUEBOX_MSSQL_URL is set: using ${shownUrl(baseUrl)}, no Docker`);
    }

    const targets: Array<{ name: string; rcsi: boolean; url: string }> = [];
    if (options.noCreate) {
      const { rcsi, version } = await reach(() => runner.inspectDatabase(baseUrl), baseUrl);
      log(`# ${firstLine(version)}`);
      log(`# --no-create: running on the URL's own database (READ_COMMITTED_SNAPSHOT ${rcsi ? 'ON' : 'OFF'}); the conformance case "a key enqueued while claims run" switches it both ways itself`);
      targets.push({ name: '(the URL’s database)', rcsi, url: baseUrl });
    } else {
      for (const db of DATABASES) {
        log(`# creating database ${db.name} with READ_COMMITTED_SNAPSHOT ${db.rcsi ? 'ON' : 'OFF'}`);
        const version = await reach(() => runner.prepareDatabase(baseUrl, db.name, db.rcsi), baseUrl);
        if (db === DATABASES[0]) log(`# ${firstLine(version)}`);
        targets.push({ name: db.name, rcsi: db.rcsi, url: withDatabase(baseUrl, db.name) });
      }
    }

    for (const target of targets) {
      stopIfInterrupted();
      const result: DatabaseResult = { database: target.name, rcsi: target.rcsi, migrate: 'not run', tests: 'not run' };
      results.push(result);
      const cliEnv = { ...nodeEnv, QUEUEBOX_CONFIG: undefined, QUEUEBOX_DATABASE__TYPE: 'sqlserver', QUEUEBOX_DATABASE_URL: target.url };
      log(`# ${target.name}: queuebox migrate`);
      const migrate = await runner.exec(process.execPath, ['--import', 'tsx', 'bin/queuebox.ts', 'migrate'], { env: cliEnv, timeoutMs: 10 * MINUTE, echo: true });
      const check = migrate.code === 0 ? await runner.exec(process.execPath, ['--import', 'tsx', 'bin/queuebox.ts', 'migrate', '--check'], { env: cliEnv, timeoutMs: 5 * MINUTE, echo: true }) : undefined;
      result.migrate = migrate.code === 0 && check?.code === 0 ? 'ok' : 'failed';
      if (result.migrate === 'failed') {
        log(`# ${target.name}: \`queuebox migrate${migrate.code === 0 ? ' --check' : ''}\` failed${why(migrate.code === 0 ? check! : migrate)}; its tests are not run`);
        continue;
      }
      // One test/run.ts per suite, one after the other: the conformance suite switches
      // READ_COMMITTED_SNAPSHOT (ending every other session of the database), and the plan case
      // loads the server while the lock cases wait on each other.
      result.tests = 'ok';
      for (const suite of options.suites) {
        stopIfInterrupted();
        log(`# ${target.name} (READ_COMMITTED_SNAPSHOT ${target.rcsi ? 'ON' : 'OFF'}): test/run.ts ${suite}`);
        const tests = await runner.exec(process.execPath, ['--import', 'tsx', 'test/run.ts', suite], {
          env: { ...nodeEnv, QUEUEBOX_MSSQL_URL: target.url, DATABASE_URL: process.env.DATABASE_URL || UNUSED_POSTGRES_URL },
          timeoutMs: 60 * MINUTE,
          echo: true,
        });
        if (tests.code !== 0) result.tests = 'failed';
        result.counts = addCounts(result.counts, testCounts(tests.output));
        if (tests.timedOut) log(`# ${target.name}: ${suite} was stopped after 60 minutes`);
      }
    }
    code = results.length > 0 && results.every((r) => r.migrate === 'ok' && r.tests === 'ok') ? 0 : 1;
  } catch (error) {
    if (!(error instanceof LiveRunError)) throw error;
    log(`queuebox live SQL Server run: ${error.message}`);
    code = error.code;
  } finally {
    if (results.length > 0 && !options.dryRun) log(summary(server.label, useDocker, results));
    await cleanUp();
  }
  return code;

  function stopIfInterrupted(): void {
    if (runner.interrupted?.()) throw new LiveRunError('interrupted', 130);
  }

  async function cleanUp(): Promise<void> {
    if (useDocker && started) {
      if (options.keep) {
        log(`# --keep: ${server.service} goes on running at ${shownUrl(containerUrl(options))} (password: QUEUEBOX_MSSQL_SA_PASSWORD or ${DEFAULT_SA_PASSWORD});`);
        log(`#   remove it with: docker ${[...compose, 'down', '-v'].join(' ')}`);
        return;
      }
      log(`# removing ${server.service} (docker compose down -v)`);
      const down = await runner.exec('docker', [...compose, 'down', '-v', '--remove-orphans'], { env: composeEnv, timeoutMs: 2 * MINUTE });
      if (down.code !== 0) log(`# docker compose down failed${why(down)}: remove it with: docker ${[...compose, 'down', '-v'].join(' ')}${tail(down)}`);
    } else if (!useDocker && !options.noCreate && results.length > 0) {
      if (options.keep) {
        log(`# --keep: databases ${DATABASES.map((d) => d.name).join(' and ')} are left on the server`);
        return;
      }
      for (const db of DATABASES) {
        await runner.dropDatabase(options.url!, db.name).catch((error: unknown) => log(`# could not drop ${db.name}: ${String((error as Error).message ?? error)}`));
      }
    }
  }
}

/** `docker` on PATH, its engine answering, and the Compose v2 plugin; each failure says what to install or start. */
async function checkDocker(runner: LiveRunner): Promise<void> {
  const version = await runner.exec('docker', ['version', '--format', '{{.Server.Version}}'], { timeoutMs: 30_000 });
  if (version.missing) {
    throw new LiveRunError(
      'docker was not found on PATH. Install Docker Engine with the Compose plugin (Linux: the docker-ce and docker-compose-plugin packages) or Docker Desktop, ' +
        'then run this again; or set QUEUEBOX_MSSQL_URL to a SQL Server of your own (mssql://user:password@host:1433/database?trustServerCertificate=true) and Docker is not used.',
      2,
    );
  }
  if (version.code !== 0) {
    throw new LiveRunError(`docker is installed but its engine does not answer (\`docker version\`${why(version)}). Start the Docker daemon (or Docker Desktop), check that your user may use it (the docker group), and run this again.${tail(version)}`, 2);
  }
  const compose = await runner.exec('docker', ['compose', 'version', '--short'], { timeoutMs: 30_000 });
  if (compose.code !== 0) {
    throw new LiveRunError(`the Docker Compose v2 plugin is missing (\`docker compose version\`${why(compose)}). Install it (Linux: the docker-compose-plugin package; Docker Desktop has it) and run this again.${tail(compose)}`, 2);
  }
  runner.log(`# Docker engine ${version.output.trim()}, Compose ${compose.output.trim()}`);
}

/** Runs a first connection; a failure names the server and what to check. */
async function reach<T>(work: () => Promise<T>, url: string): Promise<T> {
  try {
    return await work();
  } catch (error) {
    throw new LiveRunError(`cannot prepare the test databases on ${shownUrl(url)}: ${String((error as Error)?.message ?? error)}`);
  }
}

function why(result: ExecResult): string {
  if (result.missing) return ': the command was not found';
  if (result.timedOut) return ': it did not finish in time and was stopped';
  return ` (exit ${result.code})`;
}

/** The last lines of a command's output, indented, for a failure message. */
function tail(result: ExecResult, lines = 5): string {
  const text = result.output.trim();
  return text ? `\n${text.split('\n').slice(-lines).map((l) => `  | ${l}`).join('\n')}` : '';
}

function portHint(output: string, port: number): string {
  return /port is already allocated|address already in use/i.test(output) ? `Port ${port} is taken: set QUEUEBOX_MSSQL_PORT to a free one. ` : '';
}

function firstLine(text: string): string {
  return text.split('\n')[0]!.trim();
}

function summary(label: string, docker: boolean, results: DatabaseResult[]): string {
  const rows = results.map((r) => {
    const c = r.counts;
    return `| ${r.database} | ${r.rcsi ? 'ON' : 'OFF'} | ${r.migrate} | ${r.tests} | ${c?.pass ?? '-'} | ${c?.fail ?? '-'} | ${c?.skipped ?? '-'} |`;
  });
  const skipped = results.some((r) => (r.counts?.skipped ?? 0) > 0)
    ? '\nSome tests were skipped: a live run should skip none; their reasons are in the output above.'
    : '';
  return [`# live run on ${docker ? `${label} (Docker)` : 'QUEUEBOX_MSSQL_URL'}`, '| database | RCSI | migrate | tests | pass | fail | skipped |', '| --- | --- | --- | --- | --- | --- | --- |', ...rows].join('\n') + skipped;
}

/** Runs a command with a time limit: never a hang (SIGTERM at the limit, SIGKILL 10 s later). */
export function execCommand(command: string, args: string[], options: ExecOptions): Promise<ExecResult> {
  return new Promise((resolve) => {
    let output = '';
    let timedOut = false;
    let settled = false;
    const done = (result: ExecResult) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve(result);
    };
    const env = options.env ? Object.fromEntries(Object.entries(options.env).filter((e): e is [string, string] => e[1] !== undefined)) : process.env;
    const child = spawn(command, args, { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
    const take = (stream: NodeJS.WriteStream) => (chunk: Buffer) => {
      output += chunk.toString();
      if (options.echo) stream.write(chunk);
    };
    child.stdout.on('data', take(process.stdout));
    child.stderr.on('data', take(process.stderr));
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGTERM');
      setTimeout(() => child.kill('SIGKILL'), 10_000).unref();
    }, options.timeoutMs);
    child.on('error', (error: NodeJS.ErrnoException) => done({ code: null, output, missing: error.code === 'ENOENT' }));
    child.on('close', (code) => done({ code: timedOut ? null : code, output, timedOut }));
  });
}

/** A runner that prints each step instead of running it (`--dry-run`). */
export function dryRunner(log: (line: string) => void): LiveRunner {
  const shown = (command: string, args: string[], env?: Record<string, string | undefined>) => {
    const vars = ['QUEUEBOX_MSSQL_URL', 'QUEUEBOX_DATABASE__TYPE', 'QUEUEBOX_DATABASE_URL'].filter((n) => env?.[n] !== undefined && env[n] !== process.env[n]);
    const prefix = vars.map((n) => `${n}=${shownUrl(env![n]!)} `).join('');
    const cmd = command === process.execPath ? 'node' : command;
    return `${prefix}${cmd} ${args.map((a) => (/^[\w@%+=:,./-]+$/.test(a) ? a : `'${a}'`)).join(' ')}`;
  };
  return {
    exec: (command, args, options) => {
      log(`would run: ${shown(command, args, options.env)}`);
      const output = args[0] === 'version' ? '(dry run)' : args.includes('--short') ? '(dry run)' : '';
      return Promise.resolve({ code: 0, output });
    },
    prepareDatabase: (url, name, rcsi) => {
      log(`would run on ${shownUrl(url)}: CREATE DATABASE [${name}]; ALTER DATABASE [${name}] SET READ_COMMITTED_SNAPSHOT ${rcsi ? 'ON' : 'OFF'}`);
      return Promise.resolve('(dry run)');
    },
    inspectDatabase: (url) => {
      log(`would read READ_COMMITTED_SNAPSHOT of ${shownUrl(url)}`);
      return Promise.resolve({ rcsi: false, version: '(dry run)' });
    },
    dropDatabase: (url, name) => {
      log(`would run on ${shownUrl(url)}: DROP DATABASE [${name}]`);
      return Promise.resolve();
    },
    log,
  };
}
