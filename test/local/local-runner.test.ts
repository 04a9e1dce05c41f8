import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import pg from 'pg';
import { DEMO_REFUSALS_NOTE, DUPLICATE_SIGNAL_GRACE_MS, runLocal } from '../../lib/local/local-runner.ts';
import { UsageError } from '../../lib/errors.ts';
import { createTestDatabase, testDatabaseUrl } from '../helpers/database.ts';
import { runTsx } from '../helpers/run-tsx.ts';

/** The processes of a process group, from /proc (pid, parent pid and command line). */
function groupProcesses(group: number): { pid: number; parent: number; command: string }[] {
  const found: { pid: number; parent: number; command: string }[] = [];
  for (const entry of readdirSync('/proc').filter((name) => /^\d+$/.test(name))) {
    try {
      // Field 5 of /proc/<pid>/stat is the process group; the command name (field 2) may hold spaces.
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(fields[2]) === group) found.push({ pid: Number(entry), parent: Number(fields[1]), command: readFileSync(`/proc/${entry}/cmdline`, 'utf8').replaceAll('\0', ' ') });
    } catch {
      // the process ended meanwhile
    }
  }
  return found;
}

describe('local run (npm start)', () => {
  const schemas: string[] = [];
  const newSchema = () => {
    const schema = `qb_local_${randomBytes(5).toString('hex')}`;
    schemas.push(schema);
    return schema;
  };
  after(async () => {
    const pool = new pg.Pool({ connectionString: testDatabaseUrl(), max: 1 });
    for (const schema of schemas) await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await pool.end();
  });

  it('`queuebox local --messages 20 --exit-when-drained` delivers the demo messages and the relayed payment webhooks to the emulator queues and exits 0', async () => {
    const schema = newSchema();
    // `npm start` is `node --import tsx bin/queuebox.ts local`: the same, without npm's start-up.
    const { code, stdout, stderr } = await runTsx(['bin/queuebox.ts', 'local', '--messages', '20', '--exit-when-drained'], { ...process.env, QUEUEBOX_DATABASE__SCHEMA: schema });
    assert.equal(code, 0, `exit code 0\nstdout:\n${stdout}\nstderr:\n${stderr}`);
    const last = /stopped \(drained\): (\{.*\})/.exec(stdout);
    assert.ok(last, `a final summary line:\n${stdout}`);
    const summary = JSON.parse(last[1]!) as {
      fed: number;
      counts: Record<string, number>;
      emulator: Record<string, number>;
      webhooks: Record<string, number>;
      inbox: Record<string, number>;
    };
    assert.equal(summary.fed, 20);
    // One webhook per order; orders n % 4 === 1 (5 of 20) are delivered twice, orders n % 10 === 7 (2 of 20) draw a forgery.
    assert.deepEqual(summary.webhooks, { received: 20, duplicate: 5, rejected: 2, failed: 0 });
    assert.deepEqual(summary.inbox, { pending: 0, processing: 0, processed: 20, dead: 0 }, 'each webhook stored once and relayed');
    assert.deepEqual(summary.counts, { pending: 0, processing: 0, sent: 40, dead: 0 }, '20 orders and 20 relayed webhooks sent');
    assert.equal(Object.values(summary.emulator).reduce((a, b) => a + b, 0), 40, 'every message is in an emulator queue');
    assert.ok(summary.emulator['queuebox-demo.fifo']! > 0 && summary.emulator['queuebox-demo-bus']! > 0, 'orders went to the FIFO queue, notifications to the EventBridge bus');
    assert.match(stdout, /webhooks: received \d+ · duplicate \d+ · rejected \d+ \| inbox: pending \d+ · processing \d+ · processed \d+ · dead \d+/, 'progress shows the inbox');

    const pool = new pg.Pool({ connectionString: testDatabaseUrl(), max: 1 });
    try {
      const inbox = await pool.query<{ id: string; idempotency_key: string; state: string }>(`SELECT id, idempotency_key, state FROM "${schema}".inbox`);
      const orders = await pool.query<{ id: string }>(`SELECT id FROM "${schema}".queuebox_demo_orders`);
      assert.deepEqual(inbox.rows.map((r) => r.idempotency_key).sort(), orders.rows.map((r) => `pay_${r.id}`).sort(), 'one row per order; forgeries stored nothing');
      const relayed = await pool.query<{ inbox_id: string; state: string }>(`SELECT headers->>'x-inbox-id' AS inbox_id, state FROM "${schema}".outbox WHERE headers ? 'x-inbox-id'`);
      assert.deepEqual(relayed.rows.map((r) => r.inbox_id).sort(), inbox.rows.map((r) => r.id).sort(), 'each inbox row reached the outbox once');
      assert.ok(relayed.rows.every((r) => r.state === 'sent'));
    } finally {
      await pool.end();
    }
  });

  it('refuses a database whose tables already hold rows it did not create, unless told to use them, and touches nothing', async () => {
    const db = await createTestDatabase();
    try {
      await db.query(`INSERT INTO "${db.schema}".outbox (topic, payload) VALUES ('customer.order', '{}')`);
      await db.query(`INSERT INTO "${db.schema}".inbox (source, idempotency_key, payload) VALUES ('payments', 'k-1', '{}')`);
      const lines: string[] = [];
      await assert.rejects(
        runLocal({ schema: db.schema, messages: 1, exitWhenDrained: true, out: (line) => lines.push(line) }),
        (e: unknown) => e instanceof UsageError && /already holds 1 outbox and 1 inbox rows .*--use-existing/.test(e.message),
      );
      assert.deepEqual(
        (await db.query<{ state: string }>(`SELECT state FROM "${db.schema}".outbox UNION ALL SELECT state FROM "${db.schema}".inbox`)).map((r) => r.state),
        ['pending', 'pending'],
        'nothing published, relayed or dead-lettered',
      );
    } finally {
      await db.drop();
    }
  });

  it('ends with its summary when Ctrl-C arrives twice, as under `npm start` (from the terminal and forwarded by npm)', async () => {
    const schema = newSchema();
    let signalled = false;
    let copies = 0;
    let spray: NodeJS.Timeout | undefined;
    const { code, signal, stdout, stderr } = await runTsx(['bin/queuebox.ts', 'local'], { ...process.env, QUEUEBOX_DATABASE__SCHEMA: schema }, 120_000, (child, out) => {
      if (signalled || !/sent [1-9]/.test(out)) return;
      signalled = true;
      const first = Date.now();
      child.kill('SIGINT');
      // The other copies keep coming for 400 ms, well inside the grace: a stop that is quick has
      // printed its summary and would be exiting when one lands (Node.js restores the default
      // action then).
      spray = setInterval(() => {
        if (Date.now() - first >= 400 || child.exitCode !== null || child.signalCode !== null) return clearInterval(spray);
        child.kill('SIGINT');
        copies += 1;
      }, 2);
    });
    clearInterval(spray);
    assert.ok(DUPLICATE_SIGNAL_GRACE_MS >= 800, 'the copies stop well inside the grace');
    assert.ok(signalled, `the run made progress before the signal:\n${stdout}\n${stderr}`);
    assert.ok(copies > 0, 'repeated copies of the signal were sent');
    assert.deepEqual({ code, signal }, { code: 0, signal: null }, `exit code 0 after ${copies} repeated copies\nstdout:\n${stdout}\nstderr:\n${stderr}`);
    assert.match(stdout, /stopped \(signal\): \{/, 'the final summary line');
  });

  it('`npm start`, Ctrl-C in a terminal while the run is busy: the run ends with its summary, then the database stops; no warning, no error, no temp directory left', async () => {
    // The README's command itself (npm, its shell, the run). A terminal sends Ctrl-C to its whole
    // foreground process group: the child leads a group of its own here and the signal goes to the
    // group, twice (the terminal's and npm's forwarded one). The run is held stopped (SIGSTOP) for
    // 300 ms around the signals, as a busy machine would hold it: a wrapper that relays signals and
    // kills a child that does not acknowledge within milliseconds (the `tsx` command does) would
    // kill the run here before its summary.
    const temp = mkdtempSync(join(tmpdir(), 'qb-local-tmp-'));
    chmodSync(temp, 0o1777); // as /tmp: as root, initdb runs as the postgres user and reads a file from here
    const env: NodeJS.ProcessEnv = { ...process.env, TMPDIR: temp };
    for (const name of ['DATABASE_URL', 'QUEUEBOX_DATABASE_URL', 'QUEUEBOX_DATABASE__SCHEMA']) delete env[name];
    const child = spawn('npm', ['start', '--silent', '--', '--speed', '4'], { env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    let signalled = false;
    let held: number[] = [];
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.stdout.on('data', (chunk: Buffer) => {
      stdout += chunk.toString();
      if (signalled || !/sent [1-9]/.test(stdout)) return;
      signalled = true;
      // The process doing the run: the one running bin/queuebox.ts with no such process below it.
      const running = groupProcesses(child.pid!).filter((p) => p.command.includes('bin/queuebox.ts'));
      held = running.filter((p) => !running.some((q) => q.parent === p.pid)).map((p) => p.pid);
      for (const pid of held) process.kill(pid, 'SIGSTOP');
      process.kill(-child.pid!, 'SIGINT');
      setTimeout(() => process.kill(-child.pid!, 'SIGINT'), 20);
      setTimeout(() => {
        for (const pid of held) {
          try {
            process.kill(pid, 'SIGCONT');
          } catch {
            // it was killed while held: the exit status and output below say so
          }
        }
      }, 300);
    });
    const timer = setTimeout(() => process.kill(-child.pid!, 'SIGKILL'), 120_000);
    const [code, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((resolve) => child.on('close', (c, s) => resolve([c, s])));
    clearTimeout(timer);
    const left = readdirSync(temp);
    rmSync(temp, { recursive: true, force: true });
    assert.ok(signalled, `the run made progress before the signal:\n${stdout}\n${stderr}`);
    assert.equal(held.length, 1, `one process ran the local run, held while the signals arrived: ${held.join(', ')}`);
    // npm's shell dies of the Ctrl-C at once, and npm then ends itself with the same signal (a
    // terminal shows status 130), after the run it started has finished.
    assert.ok(code === 0 || signal === 'SIGINT', `exit code 0 or ended by SIGINT (got ${code ?? signal})\nstdout:\n${stdout}\nstderr:\n${stderr}`);
    assert.match(stdout, /starting embedded PostgreSQL/);
    assert.match(stdout, /stopped \(signal\): \{/, 'the final summary line');
    assert.doesNotMatch(stdout + stderr, /final counts unavailable|shutting down|terminating connection|ERROR|FATAL/i);
    // Below Node.js 22 (outside `engines`) the AWS SDK rightly warns that it needs a newer Node.js.
    const sdkNodeWarning = /^\(node:\d+\) Warning: NodeVersionSupportWarning:[\s\S]*?--trace-warnings[^\n]*\n/;
    const unsupportedNode = Number(process.versions.node.split('.')[0]) < 22;
    assert.equal(unsupportedNode ? stderr.replace(sdkNodeWarning, '') : stderr, '', 'nothing on standard error');
    assert.equal(stdout.split(DEMO_REFUSALS_NOTE).length - 1, 1, 'the deliberate refusals are explained once');
    assert.deepEqual(left.filter((name) => name.startsWith('queuebox-pg-')), [], 'the embedded cluster directory is removed');
  });

  it('stops cleanly when asked while feeding a continuous stream: the running invocation finishes what it holds', async () => {
    const stop = new AbortController();
    const lines: string[] = [];
    const running = runLocal({ schema: newSchema(), feedPerSecond: 20, signal: stop.signal, out: (line) => lines.push(line) });
    const until = Date.now() + 30_000;
    while (!lines.some((l) => /sent [1-9]/.test(l)) && Date.now() < until) await new Promise((r) => setTimeout(r, 100));
    stop.abort();
    const summary = await running;
    assert.equal(summary.stoppedBecause, 'signal');
    assert.ok(summary.fed > 0 && (summary.counts.sent ?? 0) > 0, JSON.stringify(summary));
    assert.equal(summary.counts.processing ?? 0, 0, 'no row left in flight');
    assert.equal(Object.values(summary.emulator).reduce((a, b) => a + b, 0), summary.counts.sent);
    assert.ok(summary.webhooks.received > 0 && summary.webhooks.failed === 0, JSON.stringify(summary.webhooks));
    assert.equal(summary.inbox.processing ?? 0, 0, 'no inbox row left in flight');
  });
});
