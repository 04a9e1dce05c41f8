import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { runCli } from '../../bin/cli-program.ts';
import { parseReplayRequest } from '../../lib/operations/replay.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';

describe('queuebox CLI', () => {
  let db: TestDatabase;
  let env: Record<string, string>;
  before(async () => {
    db = await createTestDatabase();
    env = { QUEUEBOX_DATABASE_URL: db.url, QUEUEBOX_DATABASE__SCHEMA: db.schema };
  });
  after(async () => db.drop());

  async function cli(...argv: string[]) {
    let stdout = '';
    let stderr = '';
    const code = await runCli(argv, { stdout: (t) => (stdout += t), stderr: (t) => (stderr += t), env });
    return { code, stdout, stderr };
  }

  it('says when a queuebox.yml beside it is not read (no --config, no QUEUEBOX_CONFIG), and runs on as before', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'qb-cli-beside-'));
    const home = process.cwd();
    try {
      writeFileSync(join(dir, 'queuebox.yml'), `database:\n  schema: ${db.schema}\n`);
      process.chdir(dir);
      const unnamed = await cli('status');
      assert.equal(unnamed.code, 0);
      assert.equal(unnamed.stderr, 'queuebox: ./queuebox.yml is not read: this command reads --config or QUEUEBOX_CONFIG only, so the defaults and QUEUEBOX_* variables apply. Add --config queuebox.yml to use it.\n');
      const named = await cli('--config', 'queuebox.yml', 'status');
      assert.deepEqual([named.code, named.stderr], [0, '']);
      let stderr = '';
      await runCli(['status'], { stdout: () => {}, stderr: (t) => (stderr += t), env: { ...env, QUEUEBOX_CONFIG: 'queuebox.yml' } });
      assert.equal(stderr, '', 'QUEUEBOX_CONFIG names it');
    } finally {
      process.chdir(home);
      rmSync(dir, { recursive: true, force: true });
    }
    assert.equal((await cli('status')).stderr, '', 'no file beside it: nothing said');
  });

  it('migrate is idempotent and says the schema is up to date', async () => {
    const result = await cli('migrate');
    assert.deepEqual([result.code, result.stdout], [0, 'schema is up to date\n']);
  });

  it('reclaim returns expired rows to pending now and prints the counts', async () => {
    await db.driver.outboxReclaimExpired({ throttleMs: 60_000 });
    await db.query(
      `INSERT INTO "${db.schema}".outbox (topic, payload, state, claim_token, lease_expires_at, claimed_at) VALUES ('t', '{}', 'processing', gen_random_uuid(), now() - interval '1 second', now())`,
    );
    const result = await cli('reclaim');
    assert.deepEqual([result.code, result.stdout], [0, 'reclaimed: outbox 1, inbox 0\n']);
    const json = await cli('reclaim', '--json');
    assert.deepEqual(JSON.parse(json.stdout), { outbox: 0, inbox: 0, outboxDead: 0, inboxDead: 0 });
    // A row whose lease expired during its last delivery (attempt 5 of 5) goes dead.
    await db.query(
      `INSERT INTO "${db.schema}".outbox (topic, payload, state, attempt, max_attempts, claim_token, lease_expires_at, claimed_at) VALUES ('t', '{}', 'processing', 4, 5, gen_random_uuid(), now() - interval '1 second', now())`,
    );
    const last = await cli('reclaim');
    assert.deepEqual([last.code, last.stdout], [0, 'reclaimed: outbox 0, inbox 0; dead after their last attempt: outbox 1, inbox 0\n']);
    await db.query(`DELETE FROM "${db.schema}".outbox WHERE state = 'dead' AND attempt = 4`);
  });

  it('status prints a table and --json the same report', async () => {
    await db.query(`INSERT INTO "${db.schema}".outbox (id, topic, payload, state, last_error) VALUES ($1, 'order.paid', '{}', 'dead', 'HTTP 400 bad')`, [randomUUID()]);
    const text = await cli('status');
    assert.equal(text.code, 0);
    assert.match(text.stdout, /outbox\s+pending\s+1/);
    assert.match(text.stdout, /HTTP 400 bad/);
    assert.match(text.stdout, /^outboxPoller\s+never$/m, 'no pass has finished against this database');
    await db.driver.passRecordFinished({ worker: 'inboxRelay' });
    const json = await cli('status', '--json');
    const report = JSON.parse(json.stdout);
    assert.equal(report.outbox.counts.dead, 1);
    assert.equal(report.outbox.dead[0].lastError, 'HTTP 400 bad');
    assert.deepEqual([report.passes.outboxPoller, report.passes.reclaim], [null, null]);
    assert.ok(Date.parse(report.passes.inboxRelay.finishedAt) > 0 && report.passes.inboxRelay.ageSeconds >= 0, JSON.stringify(report.passes));
  });

  it('replay without a filter or for another state is refused with exit code 1 and a clear message', async () => {
    const none = await cli('replay');
    assert.equal(none.code, 1);
    assert.equal(none.stderr, 'queuebox: replay needs at least one filter: --id, --topic, --destination, --created-from, --created-to or --last-error\n');
    const wrong = await cli('replay', '--topic', 'order.paid', '--state', 'dead', '--state', 'processing');
    assert.equal(wrong.code, 1);
    assert.equal(wrong.stderr, 'queuebox: replay: --state "processing" is not a state replay moves (only sent or dead)\n');
    const ok = await cli('replay', '--topic', 'order.paid', '--state', 'dead', '--json');
    assert.deepEqual([ok.code, JSON.parse(ok.stdout)], [0, { moved: 1 }]);
  });

  it('replay moves dead rows only by default, previews with --dry-run, and asks --yes above 100 rows', async () => {
    await db.query(`DELETE FROM "${db.schema}".outbox`);
    await db.query(`INSERT INTO "${db.schema}".outbox (topic, payload, state, last_error) SELECT 'bulk', '{}', 'dead', 'HTTP 500 ' || g FROM generate_series(1, 120) g`);
    await db.query(`INSERT INTO "${db.schema}".outbox (topic, payload, state) SELECT 'bulk', '{}', 'sent' FROM generate_series(1, 30)`);
    const counts = async () => (await db.query<{ state: string; n: string }>(`SELECT state, count(*) AS n FROM "${db.schema}".outbox GROUP BY state ORDER BY state`)).map((r) => `${r.state}=${r.n}`).join(' ');
    const dry = await cli('replay', '--topic', 'bulk', '--dry-run', '--sample', '3');
    assert.equal(dry.code, 0);
    const lines = dry.stdout.trimEnd().split('\n');
    assert.match(lines[0]!, /^would replay 120 dead rows \(dry run: nothing moved\)$/);
    assert.equal(lines.filter((l) => /^  \S+Z  dead  attempt 0  [0-9a-f-]{36}  bulk  HTTP 500 \d+$/.test(l)).length, 3);
    const json = JSON.parse((await cli('replay', '--topic', 'bulk', '--dry-run', '--json', '--state', 'sent')).stdout);
    assert.deepEqual([json.dryRun, json.count, json.sample.length], [true, 30, 10]);
    assert.equal(await counts(), 'dead=120 sent=30', 'dry runs move nothing');
    const sampleAlone = await cli('replay', '--topic', 'bulk', '--sample', '3', '--yes');
    assert.equal(sampleAlone.code, 1);
    assert.match(sampleAlone.stderr, /replay: --sample is the number of rows a --dry-run shows; add --dry-run/);
    assert.equal(await counts(), 'dead=120 sent=30', '--sample without --dry-run moves nothing');
    const refused = await cli('replay', '--topic', 'bulk');
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, /would move 120 rows .*--yes/);
    assert.equal(await counts(), 'dead=120 sent=30');
    const done = await cli('replay', '--topic', 'bulk', '--yes', '--json');
    assert.deepEqual([done.code, JSON.parse(done.stdout)], [0, { moved: 120 }]);
    assert.equal(await counts(), 'pending=120 sent=30', 'sent rows stay sent unless --state sent');
  });

  it('replay refuses an invalid --id or --created-from with one line naming the flag, no stack', async () => {
    const id = await cli('replay', '--id', 'nope');
    assert.equal(id.code, 1);
    assert.equal(id.stderr, 'queuebox: replay: --id "nope" must be a row id (UUID)\n');
    const time = await cli('replay', '--created-from', 'last tuesday');
    assert.equal(time.code, 1);
    assert.match(time.stderr, /^queuebox: replay: --created-from must be an ISO-8601 time/);
    assert.equal(time.stderr.split('\n').length, 2);
    const range = await cli('replay', '--created-from', '2026-12-01', '--created-to', '2026-11-01');
    assert.deepEqual([range.code, range.stderr], [1, 'queuebox: replay: --created-from must be before --created-to\n']);
    // The replay function's event and the console's form are refused by key, as they are written.
    assert.throws(() => parseReplayRequest({ ids: ['nope'] }), { message: 'replay: ids.0 must be a row id (UUID)' });
    assert.throws(() => parseReplayRequest({}), { message: 'replay needs at least one filter: ids, topics, destination, createdFrom, createdTo or lastErrorPrefix' });
  });

  it('replay --table inbox requeues dead relay and pull rows by source, consumption, id and last error, with a dry run and --yes above 100 rows', async () => {
    const inbox = `"${db.schema}".inbox`;
    await db.query(`DELETE FROM ${inbox}`);
    await db.query(
      `INSERT INTO ${inbox} (source, idempotency_key, aggregate_id, payload, consumption, state, attempt, last_error)
       SELECT 'stripe', 'push-' || g, 'cus-' || (g % 7), '{}', 'push', 'dead', 3, 'HTTP 503 upstream ' || g FROM generate_series(1, 110) g`,
    );
    await db.query(
      `INSERT INTO ${inbox} (source, idempotency_key, aggregate_id, payload, consumption, state, attempt, last_error)
       SELECT 'stripe', 'pull-' || g, NULL, '{}', 'pull', 'dead', 5, CASE WHEN g = 1 THEN 'handler threw: bad amount' ELSE 'handler timed out' END FROM generate_series(1, 3) g`,
    );
    await db.query(`INSERT INTO ${inbox} (source, idempotency_key, payload, consumption, state) VALUES ('stripe', 'done', '{}', 'push', 'processed'), ('github', 'gh-dead', '{}', 'push', 'dead')`);
    const counts = async () =>
      (await db.query<{ k: string; n: string }>(`SELECT consumption || ':' || state AS k, count(*) AS n FROM ${inbox} GROUP BY 1 ORDER BY 1`)).map((r) => `${r.k}=${r.n}`).join(' ');
    const start = 'pull:dead=3 push:dead=111 push:processed=1';
    assert.equal(await counts(), start);

    const dry = await cli('replay', '--table', 'inbox', '--source', 'stripe', '--dry-run', '--sample', '2');
    assert.equal(dry.code, 0, dry.stderr);
    const lines = dry.stdout.trimEnd().split('\n');
    assert.equal(lines[0], 'would requeue 113 dead inbox rows (dry run: nothing moved)');
    assert.equal(lines.filter((l) => /^  \S+Z  dead  attempt \d  [0-9a-f-]{36}  stripe \((push|pull)\)/.test(l)).length, 2);
    const pullDry = JSON.parse((await cli('replay', '--table', 'inbox', '--source', 'stripe', '--consumption', 'pull', '--dry-run', '--json')).stdout);
    assert.deepEqual([pullDry.dryRun, pullDry.table, pullDry.count, pullDry.sample.map((r: { consumption: string }) => r.consumption)], [true, 'inbox', 3, ['pull', 'pull', 'pull']]);
    assert.equal(await counts(), start, 'dry runs move nothing');

    const refused = await cli('replay', '--table', 'inbox', '--source', 'stripe', '--consumption', 'push');
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, /would move 110 rows \(more than 100\).*--yes/);
    assert.equal(await counts(), start, 'a refused replay moves nothing');

    const byError = await cli('replay', '--table', 'inbox', '--source', 'stripe', '--last-error', 'handler threw', '--json');
    assert.deepEqual([byError.code, JSON.parse(byError.stdout)], [0, { moved: 1 }]);
    const [pullRow] = await db.query<{ id: string }>(`SELECT id FROM ${inbox} WHERE idempotency_key = 'pull-2'`);
    const byId = await cli('replay', '--table', 'inbox', '--id', pullRow!.id);
    assert.deepEqual([byId.code, byId.stdout], [0, 'requeued 1 inbox rows\n']);
    const pushAll = await cli('replay', '--table', 'inbox', '--source', 'stripe', '--consumption', 'push', '--yes', '--json');
    assert.deepEqual([pushAll.code, JSON.parse(pushAll.stdout)], [0, { moved: 110 }]);
    assert.equal(await counts(), 'pull:dead=1 pull:pending=2 push:dead=1 push:pending=110 push:processed=1', 'the other source and the processed row stay');
    const [reset] = await db.query<{ attempts: string; errors: string; claims: string }>(
      `SELECT sum(attempt) AS attempts, count(last_error) AS errors, count(claim_token) AS claims FROM ${inbox} WHERE state = 'pending'`,
    );
    assert.deepEqual(reset, { attempts: '0', errors: '0', claims: '0' });
  });

  it('replay refuses outbox filters on the inbox and inbox filters on the outbox, and its help says how to requeue inbox rows', async () => {
    const topic = await cli('replay', '--table', 'inbox', '--topic', 'order.paid');
    assert.deepEqual([topic.code, topic.stderr], [1, 'queuebox: replay: --topic filters outbox rows; inbox rows filter by --source (and --consumption)\n']);
    const sent = await cli('replay', '--table', 'inbox', '--source', 'stripe', '--state', 'sent');
    assert.equal(sent.code, 1);
    assert.match(sent.stderr, /the inbox requeues dead rows only/);
    const source = await cli('replay', '--source', 'stripe');
    assert.equal(source.code, 1);
    assert.equal(source.stderr, 'queuebox: replay: --source filters inbox rows; add --table inbox, or filter outbox rows by --topic or --destination\n');
    const alone = await cli('replay', '--table', 'inbox', '--consumption', 'pull');
    assert.equal(alone.code, 1);
    assert.equal(alone.stderr, 'queuebox: replay needs at least one filter: --id, --source, --created-from, --created-to or --last-error\n');
    const table = await cli('replay', '--table', 'everything', '--id', randomUUID());
    assert.equal(table.code, 1);
    assert.match(table.stderr, /Allowed choices are outbox, inbox/);
    const help = await cli('replay', '--help');
    assert.equal(help.code, 0);
    assert.match(help.stdout, /--table <table>/);
    assert.match(help.stdout, /queuebox replay --table inbox --source stripe --dry-run/);
    assert.match(help.stdout, /A requeued inbox row is again the head of its aggregate/);
  });

  it('cleanup refuses while retention is disabled unless forced', async () => {
    const refused = await cli('cleanup');
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, /retention is disabled/);
    const forced = await cli('cleanup', '--force', '--json');
    assert.equal(forced.code, 0);
    assert.deepEqual(JSON.parse(forced.stdout).deleted, { outbox: 0, inbox: 0 });
  });

  it('cleanup reports progress in a bounded number of lines, or one updating line at a terminal', async () => {
    await db.query(`DELETE FROM "${db.schema}".outbox`);
    await db.query(`INSERT INTO "${db.schema}".outbox (topic, payload, state, updated_at) SELECT 'old', '{}', 'sent', now() - interval '30 days' FROM generate_series(1, 2000)`);
    env.QUEUEBOX_RETENTION__BATCH_SIZE = '20';
    const log = await cli('cleanup', '--force', '--json');
    assert.equal(log.code, 0);
    assert.equal(JSON.parse(log.stdout).deleted.outbox, 2000);
    assert.ok(log.stderr.split('\n').length <= 6, `100 batches, a handful of lines:\n${log.stderr}`);
    assert.match(log.stderr, /^outbox sent older than \d+ h: 2000 deleted$/m);
    await db.query(`INSERT INTO "${db.schema}".outbox (topic, payload, state, updated_at) SELECT 'old', '{}', 'sent', now() - interval '30 days' FROM generate_series(1, 200)`);
    let stderr = '';
    const code = await runCli(['cleanup', '--force'], { stdout: () => {}, stderr: (t) => (stderr += t), env, stderrIsTTY: true });
    delete env.QUEUEBOX_RETENTION__BATCH_SIZE;
    assert.equal(code, 0);
    assert.ok(stderr.split('\n').length <= 5, `one updating line per policy:\n${JSON.stringify(stderr)}`);
    assert.ok(stderr.includes('\r') && stderr.includes('outbox sent older than') && stderr.includes(': 200 deleted'));
  });

  it('an unreachable database is one line without a stack; --debug prints the stack', async () => {
    let stderr = '';
    const io = { stdout: () => {}, stderr: (t: string) => (stderr += t), env: { QUEUEBOX_DATABASE_URL: 'postgres://postgres@127.0.0.1:1/test' } };
    assert.equal(await runCli(['status'], io), 1);
    assert.match(stderr, /^queuebox: cannot reach the database: connect ECONNREFUSED 127\.0\.0\.1:1 .*--debug.*\n$/);
    assert.equal(stderr.split('\n').length, 2, 'one line');
    stderr = '';
    assert.equal(await runCli(['--debug', 'status'], io), 1);
    assert.match(stderr, /\n\s+at /, 'the stack with --debug');
  });

  it('a database error is one line with its code and no stack', async () => {
    let stderr = '';
    assert.equal(await runCli(['status'], { stdout: () => {}, stderr: (t) => (stderr += t), env: { ...env, QUEUEBOX_DATABASE_URL: db.url.replace(/\/[^/?]+(\?|$)/, '/queuebox_no_such_db$1') } }), 1);
    assert.match(stderr, /^queuebox: database "queuebox_no_such_db" does not exist \(3D000\) \(run with --debug for the stack\)\n$/);
  });

  it('a configuration error names the key and exits 1', async () => {
    env.QUEUEBOX_OUTBOX__BATCH_SIZE = 'many';
    const result = await cli('status');
    delete env.QUEUEBOX_OUTBOX__BATCH_SIZE;
    assert.equal(result.code, 1);
    assert.match(result.stderr, /outbox\.batchSize/);
  });

  it('local hands its options to the local runner', async () => {
    let seen: Record<string, unknown> | undefined;
    const code = await runCli(['local', '--messages', '5', '--exit-when-drained', '--use-existing'], { stdout: () => {}, stderr: () => {}, env, runLocal: async (o) => (seen = o) });
    assert.equal(code, 0);
    assert.equal(seen?.messages, 5);
    assert.equal(seen?.exitWhenDrained, true);
    assert.equal(seen?.useExisting, true);
    assert.equal(seen?.demo, undefined, 'neither --demo nor --no-demo: the runner decides (the demo unless a config file is given)');
    for (const [flag, demo] of [['--demo', true], ['--no-demo', false]] as const) {
      assert.equal(await runCli(['local', flag], { stdout: () => {}, stderr: () => {}, env, runLocal: async (o) => (seen = o) }), 0);
      assert.equal(seen?.demo, demo, flag);
    }
  });

  it('local exits 1 when a drained run leaves rows dead, and 0 when it was stopped by a signal', async () => {
    let stderr = '';
    const io = (summary: Record<string, unknown>) => ({ stdout: () => {}, stderr: (t: string) => (stderr += t), env, runLocal: async () => summary });
    assert.equal(await runCli(['local', '--no-demo', '--exit-when-drained'], io({ stoppedBecause: 'drained', newlyDead: 2 })), 1);
    assert.match(stderr, /the run drained with 2 rows dead \(printed above with their errors\)/);
    assert.equal(await runCli(['local', '--no-demo', '--exit-when-drained'], io({ stoppedBecause: 'drained', newlyDead: 0 })), 0);
    assert.equal(await runCli(['local', '--no-demo'], io({ stoppedBecause: 'signal', newlyDead: 3 })), 0);
  });

  it('--version prints the package version', async () => {
    const { version } = JSON.parse(readFileSync('package.json', 'utf8')) as { version: string };
    const result = await cli('--version');
    assert.deepEqual([result.code, result.stdout], [0, `${version}\n`]);
  });

  it('local refuses an unknown option (a typo must not start an endless run) and lists every option in --help', async () => {
    let ran = false;
    const io = (out: { text: string }) => ({ stdout: (t: string) => (out.text += t), stderr: (t: string) => (out.text += t), env, runLocal: async () => (ran = true) });
    const typo = { text: '' };
    assert.equal(await runCli(['local', '--mesages', '5'], io(typo)), 1);
    assert.match(typo.text, /unknown option '--mesages'/);
    const extra = { text: '' };
    assert.equal(await runCli(['local', 'now'], io(extra)), 1);
    assert.match(extra.text, /too many arguments/);
    assert.equal(ran, false, 'nothing ran');
    const help = { text: '' };
    assert.equal(await runCli(['local', '--help'], io(help)), 0);
    for (const flag of ['--messages <n>', '--exit-when-drained', '--speed <factor>']) assert.ok(help.text.includes(flag), `--help lists ${flag}:\n${help.text}`);
  });

  it('local hands --speed to the local runner as a number, and refuses one that is not positive', async () => {
    let seen: Record<string, unknown> | undefined;
    assert.equal(await runCli(['local', '--speed', '2.5'], { stdout: () => {}, stderr: () => {}, env, runLocal: async (o) => (seen = o) }), 0);
    assert.equal(seen?.speed, 2.5);
    let stderr = '';
    assert.equal(await runCli(['local', '--speed', '0'], { stdout: () => {}, stderr: (t) => (stderr += t), env, runLocal: async () => {} }), 1);
    assert.match(stderr, /option '--speed <factor>' argument '0' is invalid\. expected a positive number/);
  });

  it('names the option of a numeric argument it refuses', async () => {
    for (const [args, expected] of [
      [['status', '--dead-limit', '-1'], /option '--dead-limit <n>' argument '-1' is invalid\. expected a positive integer/],
      [['status', '--dead-limit', '2.5'], /option '--dead-limit <n>' argument '2\.5' is invalid\. expected a positive integer/],
      [['local', '--messages', ''], /option '--messages <n>' argument '' is invalid\. expected a positive integer/],
      [['console', '--port', 'abc'], /option '--port <n>' argument 'abc' is invalid\. expected a positive integer/],
    ] as const) {
      let stderr = '';
      assert.equal(await runCli([...args], { stdout: () => {}, stderr: (t) => (stderr += t), env, runLocal: async () => {} }), 1, args.join(' '));
      assert.match(stderr, expected, args.join(' '));
    }
  });
});
