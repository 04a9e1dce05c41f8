import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { runCli } from '../../bin/cli-program.ts';
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
    assert.deepEqual(JSON.parse(json.stdout), { outbox: 0, inbox: 0 });
  });

  it('status prints a table and --json the same report', async () => {
    await db.query(`INSERT INTO "${db.schema}".outbox (id, topic, payload, state, last_error) VALUES ($1, 'order.paid', '{}', 'dead', 'HTTP 400 bad')`, [randomUUID()]);
    const text = await cli('status');
    assert.equal(text.code, 0);
    assert.match(text.stdout, /outbox\s+pending\s+1/);
    assert.match(text.stdout, /HTTP 400 bad/);
    const json = await cli('status', '--json');
    const report = JSON.parse(json.stdout);
    assert.equal(report.outbox.counts.dead, 1);
    assert.equal(report.outbox.dead[0].lastError, 'HTTP 400 bad');
  });

  it('replay without a filter or for another state is refused with exit code 1 and a clear message', async () => {
    const none = await cli('replay');
    assert.equal(none.code, 1);
    assert.match(none.stderr, /replay needs at least one filter/);
    const wrong = await cli('replay', '--topic', 'order.paid', '--state', 'processing');
    assert.equal(wrong.code, 1);
    assert.match(wrong.stderr, /only sent or dead/);
    const ok = await cli('replay', '--topic', 'order.paid', '--state', 'dead', '--json');
    assert.deepEqual([ok.code, JSON.parse(ok.stdout)], [0, { moved: 1 }]);
  });

  it('cleanup refuses while retention is disabled unless forced', async () => {
    const refused = await cli('cleanup');
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, /retention is disabled/);
    const forced = await cli('cleanup', '--force', '--json');
    assert.equal(forced.code, 0);
    assert.deepEqual(JSON.parse(forced.stdout).deleted, { outbox: 0, inbox: 0 });
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
    const code = await runCli(['local', '--messages', '5', '--exit-when-drained'], { stdout: () => {}, stderr: () => {}, env, runLocal: async (o) => (seen = o) });
    assert.equal(code, 0);
    assert.equal(seen?.messages, 5);
    assert.equal(seen?.exitWhenDrained, true);
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
    assert.match(stderr, /expected a positive number, got 0/);
  });
});
