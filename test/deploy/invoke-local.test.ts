/**
 * The deploy path of a fresh clone: with no queuebox.yml this repository's serverless.yml builds
 * with queuebox.example.yml, and `osls invoke local -f queuebox<Name>` bundles and runs every
 * function (as Lambda loads it: ESM `index.js`) against a real database named only by
 * `QUEUEBOX_DATABASE_URL`, as docs/deploy.md says (no inherited `DATABASE_URL`). It runs in a
 * scratch copy of the service, so it never races another test's `.queuebox/`.
 */
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { EXAMPLE_CONFIG } from '../../infra/build.ts';
import { FUNCTIONS, functionKey } from '../../lib/serverless/functions.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { OSLS, QUIET_OSLS_ENV, scratchRepoService } from '../helpers/repo-service.ts';

/** An API Gateway HTTP API (payload 2.0) request as Lambda delivers it. */
function httpEvent(path: string): Record<string, unknown> {
  const now = Date.now();
  return {
    version: '2.0',
    routeKey: '$default',
    rawPath: path,
    rawQueryString: '',
    headers: { 'content-type': 'application/json' },
    requestContext: {
      accountId: '123456789012',
      apiId: 'local',
      domainName: 'localhost',
      domainPrefix: 'localhost',
      http: { method: 'POST', path, protocol: 'HTTP/1.1', sourceIp: '127.0.0.1', userAgent: 'test' },
      requestId: 'local-request',
      routeKey: '$default',
      stage: '$default',
      time: new Date(now).toISOString(),
      timeEpoch: now,
    },
    body: '{}',
    isBase64Encoded: false,
  };
}

/** Each function's event and what its result must show. */
const CASES: Record<string, { event: unknown; check: (result: Record<string, unknown>) => void }> = {
  migrate: {
    event: {},
    check: (r) => {
      const result = r as { applied: number[]; claimFunctions: { created: string[]; kept: string[]; dropped: string[]; notDropped: string[] } };
      assert.deepEqual(result.applied, [], 'the schema is already migrated');
      assert.deepEqual([result.claimFunctions.created, result.claimFunctions.dropped], [[], []], 'and its claim functions made');
      assert.equal(result.claimFunctions.kept.length, 2);
    },
  },
  outboxPoller: { event: { source: 'aws.events', 'detail-type': 'Scheduled Event', detail: {} }, check: (r) => assert.equal(r.claimed, 0) },
  inboxRelay: { event: { source: 'aws.events', 'detail-type': 'Scheduled Event', detail: {} }, check: (r) => assert.equal(r.claimed, 0) },
  reclaim: { event: {}, check: (r) => assert.deepEqual([r.outbox, r.inbox], [0, 0]) },
  retention: { event: {}, check: (r) => assert.ok('enabled' in r || 'deleted' in r, JSON.stringify(r)) },
  replay: { event: { topics: ['nothing.here'] }, check: (r) => assert.deepEqual(r, { moved: 0 }) },
  inboxHttp: { event: httpEvent('/inbox/no-such-source'), check: (r) => assert.equal(r.statusCode, 404) },
  inboxSqs: { event: { Records: [] }, check: (r) => assert.deepEqual(r, { batchItemFailures: [] }) },
};

/** The JSON value osls prints last (the handler's result; log lines before it are one-line JSON). */
function lastResult(stdout: string): Record<string, unknown> {
  const start = stdout.lastIndexOf('\n{\n');
  return JSON.parse(start >= 0 ? stdout.slice(start + 1) : stdout.slice(stdout.indexOf('{\n'))) as Record<string, unknown>;
}

function invokeLocal(serviceDir: string, name: string, event: unknown, env: NodeJS.ProcessEnv): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((done, fail) => {
    const args = [OSLS, 'invoke', 'local', '-f', functionKey(name), '--stage', 'test', '--data', JSON.stringify(event)];
    // Short passes: the pollers work until their deadline (60 s timeout − this margin).
    const margin = name === 'outboxPoller' || name === 'inboxRelay' ? { QUEUEBOX_LAMBDA__DEADLINE_MARGIN_MS: '53000' } : {};
    const child = spawn(process.execPath, args, { cwd: serviceDir, env: { ...env, ...margin }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), 90_000);
    child.on('error', fail);
    child.on('close', (code) => {
      clearTimeout(timer);
      done({ code, stdout, stderr });
    });
  });
}

describe('deploy from a fresh clone', { timeout: 300_000 }, () => {
  let db: TestDatabase;
  let serviceDir: string;
  before(async () => {
    db = await createTestDatabase();
    serviceDir = scratchRepoService('qb-service-');
  });
  after(async () => {
    rmSync(serviceDir, { recursive: true, force: true });
    await db.drop();
  });

  it('configures serverless.yml with queuebox.example.yml when there is no queuebox.yml, and with queuebox.yml once it exists', () => {
    const configPath = (cwd: string) => execFileSync(process.execPath, ['-e', `process.stdout.write(require(${JSON.stringify(resolve('infra/config-path.cjs'))})())`], { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
    const dir = mkdtempSync(join(tmpdir(), 'qb-clone-'));
    try {
      assert.equal(configPath(dir), EXAMPLE_CONFIG);
      writeFileSync(join(dir, 'queuebox.yml'), 'destinations: {}\n');
      assert.equal(configPath(dir), 'queuebox.yml');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('`osls invoke local -f <fn>` runs every function against the database', async () => {
    assert.deepEqual(Object.keys(CASES).sort(), FUNCTIONS.map((f) => f.name).sort(), 'a case per function');
    // What a shell has, plus the database the docs name: nothing inherited from the test run.
    const env: NodeJS.ProcessEnv = {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      QUEUEBOX_DATABASE_URL: db.url,
      QUEUEBOX_DATABASE__SCHEMA: db.schema,
      ...QUIET_OSLS_ENV,
      AWS_ACCESS_KEY_ID: 'local',
      AWS_SECRET_ACCESS_KEY: 'local',
    };
    // migrate first, then the others two at a time (each is a Node.js process of its own).
    const names = ['migrate', ...Object.keys(CASES).filter((n) => n !== 'migrate')];
    const failures: string[] = [];
    const run = async (name: string) => {
      const { code, stdout, stderr } = await invokeLocal(serviceDir, name, CASES[name]!.event, env);
      try {
        assert.equal(code, 0, 'exit code 0');
        CASES[name]!.check(lastResult(stdout));
      } catch (error) {
        failures.push(`${name}: ${error instanceof Error ? error.message : String(error)}\nstdout:\n${stdout}\nstderr:\n${stderr}`);
      }
    };
    await run(names.shift()!);
    while (names.length > 0) await Promise.all(names.splice(0, 2).map(run));
    assert.deepEqual(failures, []);
  });
});
