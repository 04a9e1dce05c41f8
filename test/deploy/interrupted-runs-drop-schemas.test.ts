/**
 * docs/reliability.md and docs/performance.md: Ctrl-C stops `npm run test:faults` and the bench
 * commands, and the run drops the schemas it created in the user's `DATABASE_URL` database before
 * it exits (130). Each runs the command its npm script runs (`package.json`; `npm run` waits for
 * it, then ends by the same signal, which a shell shows as 130), in a process group of its own in
 * a fresh database, and gets SIGINT as a terminal's Ctrl-C sends it (to the whole group) once its
 * schema holds rows: the faults runner in the middle of its run, the bench with a case child
 * (a process of its own) draining.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { createScratchDatabase, type ScratchDatabase } from '../helpers/database.ts';

interface Interrupted {
  code: number | null;
  signal: NodeJS.Signals | null;
  output: string;
  /** The schema the run had created (and filled) when it got SIGINT. */
  schema: string;
}

const scripts = (JSON.parse(readFileSync('package.json', 'utf8')) as { scripts: Record<string, string> }).scripts;

/**
 * Runs npm script `script` with `args` in a process group with `DATABASE_URL` set; once a schema
 * whose name starts with `prefix` holds outbox or inbox rows and the output contains `after`,
 * sends SIGINT to the group and waits for the command to end.
 */
async function interruptOnceFilled(url: string, script: string, args: string[], prefix: string, after = ''): Promise<Interrupted> {
  const child = spawn('sh', ['-c', `exec ${scripts[script]!} "$@"`, script, ...args], {
    env: { ...process.env, DATABASE_URL: url },
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const ended = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.on('close', (code, signal) => resolve({ code, signal })));
  let running = true;
  void ended.then(() => (running = false));
  const db = new pg.Client({ connectionString: url });
  await db.connect();
  let schema: string | undefined;
  try {
    for (const until = Date.now() + 180_000; running && schema === undefined && Date.now() < until; ) {
      if (output.includes(after)) schema = await filledSchema(db, prefix);
      if (schema === undefined) await new Promise((resolve) => setTimeout(resolve, 200));
    }
    assert.ok(schema !== undefined, `no ${prefix}… schema with rows appeared; the command ${running ? 'still runs' : 'ended'}:\n${output}`);
    process.kill(-child.pid!, 'SIGINT');
    const timer = setTimeout(() => process.kill(-child.pid!, 'SIGKILL'), 60_000);
    const { code, signal } = await ended;
    clearTimeout(timer);
    return { code, signal, output, schema };
  } finally {
    if (running) process.kill(-child.pid!, 'SIGKILL');
    await db.end();
  }
}

/** A schema named `prefix…` whose outbox or inbox holds rows (its tables may not exist yet). */
async function filledSchema(db: pg.Client, prefix: string): Promise<string | undefined> {
  const { rows } = await db.query<{ nspname: string }>('SELECT nspname FROM pg_namespace WHERE starts_with(nspname, $1)', [prefix]);
  for (const { nspname } of rows) {
    const counted = await db
      .query<{ n: number }>(`SELECT (SELECT count(*) FROM "${nspname}".outbox)::int + (SELECT count(*) FROM "${nspname}".inbox)::int AS n`)
      .catch(() => ({ rows: [{ n: 0 }] }));
    if (counted.rows[0]!.n > 0) return nspname;
  }
  return undefined;
}

async function schemasLike(url: string, prefix: string): Promise<string[]> {
  const db = new pg.Client({ connectionString: url });
  await db.connect();
  try {
    const { rows } = await db.query<{ nspname: string }>('SELECT nspname FROM pg_namespace WHERE starts_with(nspname, $1) ORDER BY 1', [prefix]);
    return rows.map((r) => r.nspname);
  } finally {
    await db.end();
  }
}

describe('an interrupted fault run or bench drops the schemas it created', { timeout: 600_000 }, () => {
  let scratch: ScratchDatabase;
  before(async () => {
    scratch = await createScratchDatabase('qb_interrupt_');
  });
  after(() => scratch.drop(30_000));

  it('npm run test:faults: Ctrl-C in the middle of the run drops its qb_test_ schema and exits 130', { timeout: 300_000 }, async () => {
    const run = await interruptOnceFilled(scratch.url, 'test:faults', [], 'qb_test_', '# seeded');
    assert.deepEqual(await schemasLike(scratch.url, 'qb_test_'), [], `schemas left:\n${run.output}`);
    assert.match(run.output, new RegExp(`dropped schema ${run.schema}`));
    assert.equal(run.code, 130, `exit code after SIGINT (signal ${run.signal}):\n${run.output}`);
  });

  it('npm run bench: Ctrl-C while a case child drains drops the case’s qb_bench_ schemas and exits 130', { timeout: 300_000 }, async () => {
    const run = await interruptOnceFilled(scratch.url, 'bench', ['--cases', 'floor,queuebox', '--workloads', 'keys-100', '--sizes', '20000'], 'qb_bench_');
    assert.deepEqual(await schemasLike(scratch.url, 'qb_bench_'), [], `schemas left:\n${run.output}`);
    assert.match(run.output, new RegExp(`dropped schema ${run.schema}`));
    assert.equal(run.code, 130, `exit code after SIGINT (signal ${run.signal}):\n${run.output}`);
  });
});
