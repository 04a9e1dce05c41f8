/**
 * The pull-worker examples run as written, against a fresh database (the examples use its default
 * schema, as an application would), with `queuebox.yml` from `QUEUEBOX_CONFIG` and the database
 * from `QUEUEBOX_DATABASE_URL`; messages go in with `queuebox inbox put`:
 *
 * - the README's "Pull workers" block, in a process of its own, with the source and the table the
 *   README shows before it (its ```yaml and ```sql blocks): it writes its `shipments` row, then
 *   SIGTERM stops it and the process exits 0;
 * - docs/pull-workers.md shows docs/examples/pull-worker-*.ts verbatim, every block of it; the
 *   long-running process (pull-worker-service.ts) runs like the README's, and lives through the
 *   server ending its idle pooled connections (a failover, a proxy's idle timeout); the Lambda
 *   function (pull-worker-lambda.ts) is invoked with a real-shaped context.
 *
 * `queuebox` resolves to this repository's sources (tsconfig.json `paths`), as it does in the
 * examples' type check.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { parse, stringify } from 'yaml';
import { runCli } from '../../bin/cli-program.ts';
import { createScratchDatabase, type ScratchDatabase } from '../helpers/database.ts';
import { fakeLambdaContext } from '../helpers/lambda-context.ts';
import { ORDERS_PAID_DDL } from '../../docs/examples/pull-worker-example.ts';

/** The ```<lang> block under the README's `### Pull workers` heading: the worker (ts), its source (yaml) and table (sql). */
function readmePullWorker(lang = 'ts'): string {
  const readme = readFileSync('README.md', 'utf8');
  const section = readme.slice(readme.indexOf('### Pull workers'), readme.indexOf('\n## ', readme.indexOf('### Pull workers')));
  const block = new RegExp('```' + lang + '\\n([\\s\\S]*?)```').exec(section);
  assert.ok(block, `the README shows the pull worker's ${lang} block`);
  return block[1]!;
}

describe('pull worker examples of the README and docs/pull-workers.md', () => {
  let database: ScratchDatabase;
  let pool: pg.Pool;
  let dir: string;
  let env: Record<string, string>;

  before(async () => {
    database = await createScratchDatabase('qb_pull_docs_');
    pool = new pg.Pool({ connectionString: database.url, max: 2 });
    await pool.query(readmePullWorker('sql'));
    await pool.query(ORDERS_PAID_DDL);
    // Inside the repository, so that `queuebox` resolves through its tsconfig.json.
    dir = mkdtempSync(join(resolve('test/pull'), '.docs-run-'));
    const configFile = join(dir, 'queuebox.yml');
    writeFileSync(
      configFile,
      stringify({
        observability: { logLevel: 'SILENT' },
        inbox: {
          sources: {
            ...(parse(readmePullWorker('yaml')) as { inbox: { sources: Record<string, unknown> } }).inbox.sources,
            orders: { type: 'sqs', consumption: 'pull' },
          },
        },
      }),
    );
    env = { QUEUEBOX_CONFIG: configFile, QUEUEBOX_DATABASE_URL: database.url };
  });
  after(async () => {
    rmSync(dir, { recursive: true, force: true });
    await pool?.end();
    // The Lambda example's pool lives as long as its container: the drop waits for its idle
    // connections to close (10 s idle timeout), so that it terminates none the pool still holds.
    await database?.drop(15_000);
  });

  async function put(source: string, key: string, body: unknown): Promise<void> {
    let stderr = '';
    const code = await runCli(['inbox', 'put', '--source', source, '--key', key, '--body', JSON.stringify(body)], { stdout: () => {}, stderr: (t) => (stderr += t), env });
    assert.equal(code, 0, stderr);
  }

  async function waitFor(query: string, values: unknown[]): Promise<void> {
    const until = Date.now() + 60_000;
    while (Date.now() < until) {
      if ((await pool.query(query, values)).rowCount! > 0) return;
      await new Promise((r) => setTimeout(r, 200));
    }
    assert.fail(`timed out waiting for ${query}`);
  }

  /** Runs `file` as a process of its own until `done` holds, then SIGTERM: it must exit 0 on its own. */
  async function runProcess(file: string, done: () => Promise<void>, extraEnv: Record<string, string> = {}): Promise<void> {
    const child = spawn(process.execPath, ['--import', 'tsx', file], { env: { ...process.env, ...env, ...extraEnv }, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (c: Buffer) => (output += c.toString()));
    child.stderr.on('data', (c: Buffer) => (output += c.toString()));
    const closed = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((r) => child.on('close', (code, signal) => r({ code, signal })));
    const killer = setTimeout(() => child.kill('SIGKILL'), 90_000);
    try {
      await Promise.race([done(), closed.then(() => assert.fail(`the process ended before its work was done:\n${output}`))]);
      child.kill('SIGTERM');
      assert.deepEqual(await closed, { code: 0, signal: null }, `a clean exit after SIGTERM:\n${output}`);
    } finally {
      clearTimeout(killer);
      child.kill('SIGKILL');
    }
  }

  it("runs the README's pull worker: the put message becomes a shipment; SIGTERM ends it cleanly", async () => {
    const file = join(dir, 'readme-pull-worker.ts');
    writeFileSync(file, readmePullWorker());
    await put('partner-orders', 'evt-1', { orderId: 'o-1' });
    await runProcess(file, () => waitFor('SELECT 1 FROM shipments WHERE order_id = $1', ['o-1']));
    assert.deepEqual((await pool.query(`SELECT state FROM inbox WHERE source = 'partner-orders'`)).rows, [{ state: 'processed' }]);
  });

  it('docs/pull-workers.md shows every example file verbatim, and only those', () => {
    const page = readFileSync('docs/pull-workers.md', 'utf8');
    const blocks = [...page.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]!.trim());
    const files = readdirSync('docs/examples').filter((f) => f.startsWith('pull-worker-')).sort();
    assert.deepEqual(files, ['pull-worker-example.ts', 'pull-worker-lambda.ts', 'pull-worker-service.ts']);
    assert.deepEqual(blocks.sort(), files.map((f) => readFileSync(join('docs/examples', f), 'utf8').trim()).sort());
    for (const block of blocks) assert.doesNotMatch(block, /from '\.\.\/\.\.\/lib/, 'examples import the package, not the sources');
  });

  it('runs the long-running process of docs/pull-workers.md: the order is captured and paid, its idle connections may end; SIGTERM ends it cleanly', async () => {
    await put('orders', 'evt-2', { orderId: 'o-2', amountCents: 700 });
    // The process's connections carry this name (node-postgres reads PGAPPNAME), so the test can
    // end them as a failover or a proxy's idle timeout would.
    const appName = 'qb-docs-pull-service';
    let terminated = 0;
    await runProcess(
      'docs/examples/pull-worker-service.ts',
      async () => {
        await waitFor('SELECT 1 FROM orders_paid WHERE order_id = $1', ['o-2']);
        // Between polls (every 1000 ms) the pool's connections are idle.
        const until = Date.now() + 10_000;
        while (terminated === 0 && Date.now() < until) {
          const { rows } = await pool.query<{ n: number }>(
            `SELECT count(*)::int AS n FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1 AND state = 'idle') AS t`,
            [appName],
          );
          terminated += rows[0]!.n;
          if (terminated === 0) await new Promise((r) => setTimeout(r, 50));
        }
        assert.ok(terminated > 0, 'an idle connection of the process was terminated');
        // Still running, on new connections: the next order is paid too.
        await put('orders', 'evt-4', { orderId: 'o-4', amountCents: 400 });
        await waitFor('SELECT 1 FROM orders_paid WHERE order_id = $1', ['o-4']);
      },
      { PGAPPNAME: appName },
    );
    assert.deepEqual((await pool.query(`SELECT capture_id, amount_cents FROM orders_paid WHERE order_id = 'o-2'`)).rows, [{ capture_id: 'cap-orders:evt-2', amount_cents: 700 }]);
  });

  it('runs the Lambda function of docs/pull-workers.md: one invocation completes the put order', async () => {
    await put('orders', 'evt-3', { orderId: 'o-3', amountCents: 300 });
    Object.assign(process.env, env);
    const { handler } = (await import(resolve('docs/examples/pull-worker-lambda.ts'))) as typeof import('../../docs/examples/pull-worker-lambda.ts');
    const summary = await handler({}, fakeLambdaContext({ functionName: 'orders-worker', timeoutMs: 30_000 }));
    assert.equal(summary.completed, 1, JSON.stringify(summary));
    assert.deepEqual((await pool.query(`SELECT capture_id FROM orders_paid WHERE order_id = 'o-3'`)).rows, [{ capture_id: 'cap-orders:evt-3' }]);
  });
});
