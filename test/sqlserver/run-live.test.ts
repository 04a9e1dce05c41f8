/**
 * `npm run test:sqlserver` without a server: a stand-in `docker` on PATH (a shell script that
 * records its arguments and prints what Docker prints) drives the real step runner, and the
 * database and Node steps are recorded. Checked: the order of the steps, the arguments, RCSI on
 * and then off, what a failure says and that the container is removed after it, `--keep`,
 * `QUEUEBOX_MSSQL_URL` without Docker, and the script as a user runs it (no docker on PATH; an
 * engine that does not answer; a server that does not answer). Also: the compose file and the
 * CI workflow parse and name what the script uses.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { parse as parseYaml } from 'yaml';
import {
  COMPOSE_FILE,
  COMPOSE_PROJECT,
  DATABASES,
  DEFAULT_SA_PASSWORD,
  HEALTHCHECK_SQLCMD,
  LIVE_SUITES,
  SERVERS,
  SERVER_NAMES,
  SCRIPT_VARIABLES,
  UNUSED_POSTGRES_URL,
  WAIT_TIMEOUT_S,
  containerUrl,
  execCommand,
  parseLiveArgs,
  runLive,
  testCounts,
  withDatabase,
  type LiveRunOptions,
  type LiveRunner,
} from './live-runner.ts';

const dir = mkdtempSync(join(tmpdir(), 'queuebox-live-run-'));
after(() => rmSync(dir, { recursive: true, force: true }));

/** The stand-in docker: one line per call (arguments, then the port and password it was given); FAKE_DOCKER_FAIL picks the step that fails. */
const BIN = join(dir, 'bin');
mkdirSync(BIN, { recursive: true });
/** A PATH with no docker on it. */
const EMPTY = join(dir, 'empty');
mkdirSync(EMPTY, { recursive: true });
writeFileSync(
  join(BIN, 'docker'),
  `#!/bin/sh
printf '%s\\t%s\\t%s\\n' "$*" "$QUEUEBOX_MSSQL_PORT" "$QUEUEBOX_MSSQL_SA_PASSWORD" >> "$FAKE_DOCKER_LOG"
fail() { [ "$FAKE_DOCKER_FAIL" = "$1" ]; }
case "$*" in
  "version --format {{.Server.Version}}")
    if fail engine; then echo "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?" >&2; exit 1; fi
    echo "27.3.1" ;;
  "compose version --short")
    if fail compose; then echo "docker: 'compose' is not a docker command." >&2; exit 1; fi
    echo "2.29.7" ;;
  *" pull "*)
    if fail pull; then echo "Error response from daemon: Get \\"https://mcr.microsoft.com/v2/\\": dial tcp: lookup mcr.microsoft.com: no such host" >&2; exit 18; fi
    echo " ✔ mssql Pulled" ;;
  *" up "*)
    if fail up; then echo " ✘ Container queuebox-mssql-mssql-2022-1  Error" >&2; echo "container queuebox-mssql-mssql-2022-1 is unhealthy" >&2; exit 1; fi
    echo " ✔ Container queuebox-mssql-mssql-2022-1  Healthy" ;;
  *" logs "*)
    echo "mssql-2022-1  | ERROR: Unable to set system administrator password: Password validation failed." ;;
  *" down "*)
    echo " ✔ Container queuebox-mssql-mssql-2022-1  Removed" ;;
  *) echo "unexpected docker call: $*" >&2; exit 64 ;;
esac
`,
);
chmodSync(join(BIN, 'docker'), 0o755);

type Call = { kind: 'docker' | 'node' | 'prepare' | 'inspect' | 'drop'; args: string[]; env?: Record<string, string | undefined> };

interface Stand {
  calls: Call[];
  lines: string[];
  /** What the stand-in docker recorded: arguments, port, password. */
  dockerLog(): Array<{ args: string; port: string; password: string }>;
  runner: LiveRunner;
}

let standCount = 0;

/** A runner whose docker is the stand-in (the real spawn, PATH = the stand-in's folder) and whose database and Node steps are recorded. */
function stand(o: { fail?: string; nodeCode?: (args: string[], env: Record<string, string | undefined>) => number; prepareError?: string } = {}): Stand {
  const log = join(dir, `docker-${++standCount}.log`);
  writeFileSync(log, '');
  const calls: Call[] = [];
  const lines: string[] = [];
  const pick = (env: Record<string, string | undefined> | undefined) =>
    Object.fromEntries(['QUEUEBOX_MSSQL_URL', 'QUEUEBOX_DATABASE__TYPE', 'QUEUEBOX_DATABASE_URL', 'QUEUEBOX_CONFIG', 'DATABASE_URL', ...SCRIPT_VARIABLES].map((n) => [n, env?.[n]]));
  return {
    calls,
    lines,
    dockerLog: () =>
      readFileSync(log, 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((l) => {
          const [args, port, password] = l.split('\t');
          return { args: args!, port: port!, password: password! };
        }),
    runner: {
      async exec(command, args, options) {
        if (command === process.execPath) {
          const env = pick(options.env);
          calls.push({ kind: 'node', args, env });
          const code = o.nodeCode?.(args, env) ?? 0;
          const output = args.includes('test/run.ts') ? `✔ a case\nℹ tests 3\nℹ pass ${code === 0 ? 3 : 2}\nℹ fail ${code === 0 ? 0 : 1}\nℹ cancelled 0\nℹ skipped 0\n` : 'applied migrations 1, 2\n';
          return { code, output };
        }
        assert.equal(command, 'docker');
        calls.push({ kind: 'docker', args });
        return execCommand(command, args, { ...options, echo: false, env: { ...options.env, PATH: BIN, FAKE_DOCKER_LOG: log, FAKE_DOCKER_FAIL: o.fail ?? '' } });
      },
      prepareDatabase(url, name, rcsi) {
        calls.push({ kind: 'prepare', args: [url, name, String(rcsi)] });
        if (o.prepareError) return Promise.reject(new Error(o.prepareError));
        return Promise.resolve('Microsoft SQL Server 2022 (RTM-CU16) (KB5048033) - 16.0.4165.4 (X64)\n\tDeveloper Edition');
      },
      inspectDatabase(url) {
        calls.push({ kind: 'inspect', args: [url] });
        return Promise.resolve({ rcsi: true, version: 'Microsoft SQL Azure (RTM) - 12.0.2000.8' });
      },
      dropDatabase(url, name) {
        calls.push({ kind: 'drop', args: [url, name] });
        return Promise.resolve();
      },
      log: (line) => lines.push(line),
    },
  };
}

function options(argv: string[] = [], env: Record<string, string | undefined> = {}): LiveRunOptions {
  const parsed = parseLiveArgs(argv, env);
  assert.equal(parsed.kind, 'run', JSON.stringify(parsed));
  return (parsed as { options: LiveRunOptions }).options;
}

const compose2022 = ['compose', '-f', COMPOSE_FILE, '-p', COMPOSE_PROJECT];
const steps = (calls: Call[]) => calls.map((c) => (c.kind === 'docker' ? `docker ${c.args.join(' ')}` : c.kind === 'node' ? `node ${c.args.slice(2).join(' ')}` : `${c.kind} ${c.args.slice(1).join(' ')}`));

describe('npm run test:sqlserver, with a stand-in docker', () => {
  it('runs every step in order: docker checks, pull, up --wait, two databases (RCSI ON, then OFF), migrate, --check and the suites on each, down -v', async () => {
    const s = stand();
    const code = await runLive(options(), s.runner);
    assert.equal(code, 0, s.lines.join('\n'));
    const on = withDatabase(containerUrl({ port: 14330, password: DEFAULT_SA_PASSWORD }), 'queuebox_live_rcsi_on');
    const off = withDatabase(containerUrl({ port: 14330, password: DEFAULT_SA_PASSWORD }), 'queuebox_live_rcsi_off');
    assert.deepEqual(steps(s.calls), [
      'docker version --format {{.Server.Version}}',
      'docker compose version --short',
      `docker ${compose2022.join(' ')} pull mssql-2022`,
      `docker ${compose2022.join(' ')} up -d --wait --wait-timeout ${WAIT_TIMEOUT_S} mssql-2022`,
      'prepare queuebox_live_rcsi_on true',
      'prepare queuebox_live_rcsi_off false',
      'node bin/queuebox.ts migrate',
      'node bin/queuebox.ts migrate --check',
      ...LIVE_SUITES.map((f) => `node test/run.ts ${f}`),
      'node bin/queuebox.ts migrate',
      'node bin/queuebox.ts migrate --check',
      ...LIVE_SUITES.map((f) => `node test/run.ts ${f}`),
      `docker ${compose2022.join(' ')} down -v --remove-orphans`,
    ]);
    // The stand-in docker was run (found on PATH) with these arguments, the port and the password.
    assert.deepEqual(s.dockerLog().map((l) => l.args), s.calls.filter((c) => c.kind === 'docker').map((c) => c.args.join(' ')));
    for (const l of s.dockerLog().filter((x) => x.args.startsWith('compose -f'))) assert.deepEqual([l.port, l.password], ['14330', DEFAULT_SA_PASSWORD]);

    const prepared = s.calls.filter((c) => c.kind === 'prepare');
    assert.deepEqual(prepared.map((c) => c.args[0]), [containerUrl({ port: 14330, password: DEFAULT_SA_PASSWORD }), containerUrl({ port: 14330, password: DEFAULT_SA_PASSWORD })]);
    assert.match(prepared[0]!.args[0]!, /^mssql:\/\/sa:QueueBox-Live-1@127\.0\.0\.1:14330\/master\?encrypt=true&trustServerCertificate=true$/);
    const node = s.calls.filter((c) => c.kind === 'node');
    assert.deepEqual(node.map((c) => c.env!.QUEUEBOX_DATABASE_URL ?? c.env!.QUEUEBOX_MSSQL_URL), [...Array(6).fill(on), ...Array(6).fill(off)], 'each step on its database, ON first');
    for (const c of node.filter((x) => x.args.includes('bin/queuebox.ts'))) {
      assert.equal(c.env!.QUEUEBOX_DATABASE__TYPE, 'sqlserver');
      assert.equal(c.env!.QUEUEBOX_CONFIG, undefined, 'a queuebox.yml of the user does not redirect migrate');
    }
    for (const c of node.filter((x) => x.args.includes('test/run.ts'))) assert.equal(c.env!.DATABASE_URL, process.env.DATABASE_URL || UNUSED_POSTGRES_URL);
    assert.deepEqual(node[0]!.args.slice(0, 2), ['--import', 'tsx']);

    const summary = s.lines.find((l) => l.startsWith('# live run on'))!;
    assert.match(summary, /\| queuebox_live_rcsi_on \| ON \| ok \| ok \| 12 \| 0 \| 0 \|/, 'the counts of the four runs added up');
    assert.match(summary, /\| queuebox_live_rcsi_off \| OFF \| ok \| ok \| 12 \| 0 \| 0 \|/);
    assert.ok(s.lines.some((l) => l.includes('Microsoft SQL Server 2022')), 'the server version is printed');
    assert.ok(!s.lines.join('\n').includes(`sa:${DEFAULT_SA_PASSWORD}@`), 'no password in the output');
  });

  it('--server 2019 selects the 2019 service, its profile and port; QUEUEBOX_MSSQL_PORT and QUEUEBOX_MSSQL_SA_PASSWORD reach compose and the URL, not migrate or the tests', async () => {
    const s = stand();
    const saved = SCRIPT_VARIABLES.map((n) => [n, process.env[n]] as const);
    Object.assign(process.env, { QUEUEBOX_MSSQL_PORT: '24000', QUEUEBOX_MSSQL_SA_PASSWORD: 'Other#Pass:1', QUEUEBOX_MSSQL_SERVER: '2019' });
    try {
      assert.equal(await runLive(options([], process.env), s.runner), 0);
    } finally {
      for (const [n, v] of saved) {
        if (v === undefined) delete process.env[n];
        else process.env[n] = v;
      }
    }
    // A QUEUEBOX_* variable is a configuration override there: QUEUEBOX_MSSQL_PORT would stop `queuebox migrate` (unknown key mssqlPort).
    for (const c of s.calls.filter((x) => x.kind === 'node')) assert.deepEqual(SCRIPT_VARIABLES.map((n) => c.env![n]), [undefined, undefined, undefined]);
    const compose = ['compose', '-f', COMPOSE_FILE, '-p', COMPOSE_PROJECT, '--profile', '2019'];
    assert.deepEqual(steps(s.calls.filter((c) => c.kind === 'docker')).slice(2), [
      `docker ${compose.join(' ')} pull mssql-2019`,
      `docker ${compose.join(' ')} up -d --wait --wait-timeout ${WAIT_TIMEOUT_S} mssql-2019`,
      `docker ${compose.join(' ')} down -v --remove-orphans`,
    ]);
    for (const l of s.dockerLog().filter((x) => x.args.startsWith('compose -f'))) assert.deepEqual([l.port, l.password], ['24000', 'Other#Pass:1']);
    assert.equal(s.calls.find((c) => c.kind === 'prepare')!.args[0], 'mssql://sa:Other%23Pass%3A1@127.0.0.1:24000/master?encrypt=true&trustServerCertificate=true');
    assert.equal(parseLiveArgs(['--server', '2019'], {}).kind === 'run' && options(['--server=2019']).port, SERVERS['2019'].port);
  });

  it('a failing suite on the RCSI ON database: the other suites and the OFF database still run, the exit code is 1, the container is removed', async () => {
    const s = stand({ nodeCode: (args, env) => (args.includes('test/conformance/sqlserver.test.ts') && env.QUEUEBOX_MSSQL_URL!.includes('rcsi_on') ? 1 : 0) });
    assert.equal(await runLive(options(), s.runner), 1);
    assert.equal(s.calls.filter((c) => c.kind === 'node' && c.args.includes('test/run.ts')).length, 2 * LIVE_SUITES.length);
    assert.match(steps(s.calls).at(-1)!, /down -v/);
    const summary = s.lines.find((l) => l.startsWith('# live run on'))!;
    assert.match(summary, /\| queuebox_live_rcsi_on \| ON \| ok \| failed \| 11 \| 1 \| 0 \|/);
    assert.match(summary, /\| queuebox_live_rcsi_off \| OFF \| ok \| ok \| 12 \| 0 \| 0 \|/);
  });

  it('the default suites are the conformance suite and every live-only file, each its own test/run.ts', () => {
    const live = readdirSync('test/sqlserver').filter((f) => f.startsWith('live-') && f.endsWith('.test.ts')).map((f) => `test/sqlserver/${f}`);
    assert.deepEqual([...LIVE_SUITES].sort(), ['test/conformance/sqlserver.test.ts', ...live].sort());
    assert.equal(LIVE_SUITES[0], 'test/conformance/sqlserver.test.ts');
  });

  it('a failing migrate: that database’s tests are not run, it says so, the other database runs', async () => {
    const s = stand({ nodeCode: (args, env) => (args.at(-1) === 'migrate' && env.QUEUEBOX_DATABASE_URL!.includes('rcsi_off') ? 1 : 0) });
    assert.equal(await runLive(options(), s.runner), 1);
    const node = steps(s.calls.filter((c) => c.kind === 'node'));
    assert.deepEqual(node, ['node bin/queuebox.ts migrate', 'node bin/queuebox.ts migrate --check', ...LIVE_SUITES.map((f) => `node test/run.ts ${f}`), 'node bin/queuebox.ts migrate']);
    assert.ok(s.lines.some((l) => l === '# queuebox_live_rcsi_off: `queuebox migrate` failed (exit 1); its tests are not run'), s.lines.join('\n'));
    assert.match(s.lines.find((l) => l.startsWith('# live run on'))!, /\| queuebox_live_rcsi_off \| OFF \| failed \| not run \| - \| - \| - \|/);
  });

  it('a container that does not become healthy: its log lines are shown with what to check, nothing runs against it, and it is removed', async () => {
    const s = stand({ fail: 'up' });
    assert.equal(await runLive(options(), s.runner), 1);
    assert.deepEqual(steps(s.calls).slice(3), [
      `docker ${compose2022.join(' ')} up -d --wait --wait-timeout ${WAIT_TIMEOUT_S} mssql-2022`,
      `docker ${compose2022.join(' ')} logs --tail 40 mssql-2022`,
      `docker ${compose2022.join(' ')} down -v --remove-orphans`,
    ]);
    const message = s.lines.find((l) => l.startsWith('queuebox live SQL Server run:'))!;
    assert.match(message, /mssql-2022 did not become healthy \(exit 1\)\. SQL Server needs at least 2 GB/);
    assert.match(message, /is unhealthy/);
    assert.match(message, /Its last log lines:\n {2}\| mssql-2022-1 {2}\| ERROR: Unable to set system administrator password/);
  });

  it('a failed pull: says the image could not be pulled, starts and removes nothing', async () => {
    const s = stand({ fail: 'pull' });
    assert.equal(await runLive(options(), s.runner), 1);
    assert.deepEqual(steps(s.calls).slice(2), [`docker ${compose2022.join(' ')} pull mssql-2022`]);
    assert.match(s.lines.join('\n'), /docker compose pull mssql-2022 failed \(exit 18\): the image mcr\.microsoft\.com\/mssql\/server:2022-latest could not be pulled[\s\S]*no such host/);
  });

  it('an engine that does not answer, or no Compose plugin: exit 2 with what to start or install, before any container step', async () => {
    const engine = stand({ fail: 'engine' });
    assert.equal(await runLive(options(), engine.runner), 2);
    assert.deepEqual(steps(engine.calls), ['docker version --format {{.Server.Version}}']);
    assert.match(engine.lines.join('\n'), /docker is installed but its engine does not answer \(`docker version` \(exit 1\)\)\. Start the Docker daemon[\s\S]*Is the docker daemon running\?/);
    const compose = stand({ fail: 'compose' });
    assert.equal(await runLive(options(), compose.runner), 2);
    assert.equal(compose.calls.length, 2);
    assert.match(compose.lines.join('\n'), /the Docker Compose v2 plugin is missing .* Install it \(Linux: the docker-compose-plugin package/);
  });

  it('a server that cannot be reached after start: the URL without its password, and the container is removed', async () => {
    const s = stand({ prepareError: 'Failed to connect to 127.0.0.1:14330 - Could not connect (sequence)' });
    assert.equal(await runLive(options(), s.runner), 1);
    assert.match(s.lines.join('\n'), /cannot prepare the test databases on mssql:\/\/sa:\*\*\*@127\.0\.0\.1:14330\/master\?encrypt=true&trustServerCertificate=true: Failed to connect/);
    assert.match(steps(s.calls).at(-1)!, /down -v/);
    assert.equal(s.calls.filter((c) => c.kind === 'node').length, 0);
  });

  it('--keep leaves the container and prints how to remove it', async () => {
    const s = stand();
    assert.equal(await runLive(options(['--keep']), s.runner), 0);
    assert.ok(!s.calls.some((c) => c.args.includes('down')));
    assert.ok(s.lines.includes(`#   remove it with: docker ${compose2022.join(' ')} down -v`), s.lines.join('\n'));
  });

  it('QUEUEBOX_MSSQL_URL set: no docker call; the two databases are created on that server, used, and dropped', async () => {
    const s = stand();
    const url = 'mssql://tester:p%40ss@db.example.test:1433/tests?encrypt=true&trustServerCertificate=true';
    assert.equal(await runLive(options([], { QUEUEBOX_MSSQL_URL: url }), s.runner), 0);
    assert.equal(s.dockerLog().length, 0);
    assert.deepEqual(steps(s.calls.filter((c) => c.kind !== 'node')), ['prepare queuebox_live_rcsi_on true', 'prepare queuebox_live_rcsi_off false', 'drop queuebox_live_rcsi_on', 'drop queuebox_live_rcsi_off']);
    assert.deepEqual(
      [...new Set(s.calls.filter((c) => c.kind === 'node' && c.args.includes('test/run.ts')).map((c) => c.env!.QUEUEBOX_MSSQL_URL))],
      DATABASES.map((d) => `mssql://tester:p%40ss@db.example.test:1433/${d.name}?encrypt=true&trustServerCertificate=true`),
    );
    assert.ok(s.lines.some((l) => l.includes('mssql://tester:***@db.example.test')) && !s.lines.join('\n').includes('p%40ss'));
  });

  it('QUEUEBOX_MSSQL_URL with --no-create: its database as it is, once, nothing created or dropped', async () => {
    const s = stand();
    const url = 'Server=db.example.test,1433;Database=tests;User Id=tester;Password=secret;Encrypt=true';
    assert.equal(await runLive(options(['--no-create'], { QUEUEBOX_MSSQL_URL: url }), s.runner), 0);
    assert.deepEqual(steps(s.calls), ['inspect ', 'node bin/queuebox.ts migrate', 'node bin/queuebox.ts migrate --check', ...LIVE_SUITES.map((f) => `node test/run.ts ${f}`)]);
    assert.equal(s.calls.at(-1)!.env!.QUEUEBOX_MSSQL_URL, url);
    assert.ok(s.lines.some((l) => l.includes('READ_COMMITTED_SNAPSHOT ON')));
  });

  it('arguments: test filters replace the default suites; bad values are refused naming them', () => {
    assert.deepEqual(options(['test/sqlserver/live-plans', 'test/sqlserver/live-claims']).suites, ['test/sqlserver/live-plans', 'test/sqlserver/live-claims']);
    assert.deepEqual(options().suites, LIVE_SUITES);
    const error = (argv: string[], env: Record<string, string> = {}) => {
      const parsed = parseLiveArgs(argv, env);
      return parsed.kind === 'error' ? parsed.message : `no error (${parsed.kind})`;
    };
    assert.match(error(['--server', '2017']), /--server must be one of 2022, 2019 \(got "2017"\)/);
    assert.match(error(['--no-create']), /--no-create needs QUEUEBOX_MSSQL_URL/);
    assert.match(error([], { QUEUEBOX_MSSQL_PORT: 'x' }), /QUEUEBOX_MSSQL_PORT must be a port number \(got "x"\)/);
    assert.match(error(['--fast']), /unknown option --fast/);
    assert.equal(parseLiveArgs(['--help'], {}).kind, 'help');
  });

  it('URLs of a database, and the counts of the test runner’s closing lines', () => {
    assert.equal(withDatabase('mssql://sa:x@h:1433/master?encrypt=true', 'queuebox_live_rcsi_on'), 'mssql://sa:x@h:1433/queuebox_live_rcsi_on?encrypt=true');
    assert.equal(withDatabase('Server=h;Database=master;User Id=sa', 'd'), 'Server=h;User Id=sa;Database=d');
    assert.deepEqual(testCounts('ℹ tests 5\nℹ suites 2\nℹ pass 3\nℹ fail 1\nℹ cancelled 0\nℹ skipped 1\nℹ todo 0\n'), { pass: 3, fail: 1, skipped: 1, cancelled: 0 });
    assert.equal(testCounts('no summary'), undefined);
  });
});

/** Runs the script as a user does, with PATH as given. */
function script(args: string[], env: Record<string, string>) {
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('QUEUEBOX_') && k !== 'PATH')) as Record<string, string>;
  const r = spawnSync(process.execPath, ['--import', 'tsx', 'test/sqlserver/run-live.ts', ...args], { env: { ...base, ...env }, encoding: 'utf8', timeout: 120_000 });
  return { code: r.status, out: `${r.stdout}${r.stderr}` };
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

describe('the script as a user runs it', () => {
  it('without docker on PATH: exits 2 at once, saying what to install (or QUEUEBOX_MSSQL_URL)', () => {
    const r = script([], { PATH: EMPTY });
    assert.equal(r.code, 2, r.out);
    assert.match(r.out, /docker was not found on PATH\. Install Docker Engine with the Compose plugin .* or Docker Desktop, then run this again; or set QUEUEBOX_MSSQL_URL/);
  });

  it('with an engine that does not answer: exits 2 naming the engine', () => {
    const r = script([], { PATH: BIN, FAKE_DOCKER_LOG: join(dir, 'engine.log'), FAKE_DOCKER_FAIL: 'engine' });
    assert.equal(r.code, 2, r.out);
    assert.match(r.out, /its engine does not answer/);
  });

  it('with a container "started" on a port where no server answers: the real connection fails naming the server, the container is removed, exit 1', async () => {
    const port = await freePort();
    const log = join(dir, 'no-server.log');
    writeFileSync(log, '');
    const r = script([], { PATH: BIN, FAKE_DOCKER_LOG: log, QUEUEBOX_MSSQL_PORT: String(port) });
    assert.equal(r.code, 1, r.out);
    assert.match(r.out, new RegExp(`cannot prepare the test databases on mssql://sa:\\*\\*\\*@127\\.0\\.0\\.1:${port}/master\\?encrypt=true&trustServerCertificate=true: `));
    assert.match(readFileSync(log, 'utf8').trim().split('\n').at(-1)!, /^compose -f test\/sqlserver\/compose\.yml -p queuebox-mssql down -v --remove-orphans\t/);
  });

  it('--dry-run prints the steps and runs nothing', () => {
    const r = script(['--dry-run'], { PATH: EMPTY });
    assert.equal(r.code, 0, r.out);
    assert.match(r.out, /would run: docker compose -f test\/sqlserver\/compose\.yml -p queuebox-mssql up -d --wait --wait-timeout 300 mssql-2022/);
    assert.match(r.out, /would run: QUEUEBOX_MSSQL_URL=mssql:\/\/sa:\*\*\*@127\.0\.0\.1:14330\/queuebox_live_rcsi_off\?encrypt=true&trustServerCertificate=true node --import tsx test\/run\.ts/);
  });
});

describe('the compose file and the CI workflow', () => {
  it('the compose file parses and names the images, healthcheck, ports and profile the script uses', () => {
    const text = readFileSync(COMPOSE_FILE, 'utf8');
    const compose = parseYaml(text, { merge: true }) as {
      name: string;
      services: Record<string, { image: string; platform: string; profiles?: string[]; ports: string[]; environment: Record<string, string>; healthcheck: { test: string[]; interval: string; retries: number; start_period: string } }>;
    };
    assert.equal(compose.name, COMPOSE_PROJECT);
    assert.deepEqual(Object.keys(compose.services).sort(), Object.values(SERVERS).map((s) => s.service).sort());
    for (const server of Object.values(SERVERS)) {
      const service = compose.services[server.service]!;
      assert.equal(service.image, server.image);
      assert.deepEqual(service.profiles, server.profile ? [server.profile] : undefined, 'only the default server starts without a profile');
      assert.deepEqual(service.ports, [`127.0.0.1:\${QUEUEBOX_MSSQL_PORT:-${server.port}}:1433`]);
      assert.equal(service.environment.ACCEPT_EULA, 'Y');
      assert.equal(service.environment.MSSQL_SA_PASSWORD, `\${QUEUEBOX_MSSQL_SA_PASSWORD:-${DEFAULT_SA_PASSWORD}}`);
      assert.equal(service.platform, 'linux/amd64');
      assert.equal(service.healthcheck.test[0], 'CMD-SHELL');
      assert.ok(service.healthcheck.test[1]!.startsWith(`${HEALTHCHECK_SQLCMD} -S localhost -U sa -P "$$MSSQL_SA_PASSWORD" -Q "SELECT 1" -b`), service.healthcheck.test[1]);
      // The healthcheck's patience (start period plus retries) fits in the script's --wait-timeout.
      assert.ok(parseInt(service.healthcheck.start_period) + parseInt(service.healthcheck.interval) * service.healthcheck.retries <= WAIT_TIMEOUT_S);
    }
  });

  it('the CI workflow parses: started by hand (a schedule one uncomment away), ubuntu-latest, Node 24, npm run test:sqlserver', () => {
    const text = readFileSync('.github/workflows/sqlserver.yml', 'utf8');
    type Workflow = { on: { workflow_dispatch: { inputs: { server: { options: string[]; default: string } } }; schedule?: Array<{ cron: string }> }; jobs: { live: { 'runs-on': string; 'timeout-minutes': number; steps: Array<{ uses?: string; run?: string; with?: Record<string, unknown>; env?: Record<string, string> }> } } };
    const workflow = parseYaml(text) as Workflow;
    assert.deepEqual(workflow.on.workflow_dispatch.inputs.server.options, SERVER_NAMES);
    assert.equal(workflow.on.workflow_dispatch.inputs.server.default, '2022');
    const job = workflow.jobs.live;
    assert.equal(job['runs-on'], 'ubuntu-latest');
    assert.equal(job.steps.find((s) => s.uses?.startsWith('actions/setup-node@'))!.with!['node-version'], 24);
    const run = job.steps.find((s) => s.run?.startsWith('npm run test:sqlserver'))!;
    assert.equal(run.run, 'npm run test:sqlserver -- --server "$SERVER"');
    assert.match(run.env!.SERVER!, /inputs\.server/);
    assert.ok(job.steps.findIndex((s) => s.run?.startsWith('npm ci')) < job.steps.indexOf(run));
    assert.equal(workflow.on.schedule, undefined, 'the schedule is off until a user turns it on');
    const scheduled = parseYaml(text.replace(/^ {2}# (schedule:)$/m, '  $1').replace(/^ {2}# {3}(- cron: .*)$/m, '    $1')) as Workflow;
    assert.match(scheduled.on.schedule![0]!.cron, /^\d+ \d+ \* \* \d$/, 'uncommenting the schedule gives a valid workflow');
    assert.ok(job['timeout-minutes'] >= 90, 'room for the pull, both databases and the 1,000,000-row plan case');
  });
});
