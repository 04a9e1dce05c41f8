/**
 * `queuebox local` for your own work: with a config file the run has no demo — it runs the
 * scheduled functions against your database and your destinations only — prints every row that
 * becomes dead with its destination and error, and a finite run (`--exit-when-drained`) that ends
 * with dead rows exits 1. Flags that cannot do what they say are refused before anything starts.
 * "Your SQS" is an emulator this test starts, with one queue that exists and one that does not.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { stringify } from 'yaml';
import { runCli } from '../../bin/cli-program.ts';
import { runLocal } from '../../lib/local/local-runner.ts';
import { DEMO_STANDARD_QUEUE, EMULATOR_REGION, startLocalSqsEmulator, type LocalSqsEmulator } from '../../lib/local/local-sqs-emulator.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { runTsx } from '../helpers/run-tsx.ts';

describe('queuebox local with your own config and database (no demo)', () => {
  let db: TestDatabase;
  let sqs: LocalSqsEmulator;
  let dir: string;
  let configFile: string;
  const credentials = { AWS_ACCESS_KEY_ID: 'local', AWS_SECRET_ACCESS_KEY: 'local' };

  before(async () => {
    db = await createTestDatabase();
    sqs = await startLocalSqsEmulator();
    dir = mkdtempSync(join(tmpdir(), 'qb-local-own-'));
    configFile = join(dir, 'queuebox.yml');
    const sqsAt = (queueUrl: string) => ({ type: 'sqs', queueUrl, endpoint: sqs.endpoint, region: EMULATOR_REGION });
    writeFileSync(
      configFile,
      stringify({
        database: { schema: db.schema },
        destinations: { shipping: sqsAt(sqs.standardQueueUrl), billing: sqsAt(`${sqs.endpoint}/000000000000/no-such-queue`) },
        outbox: { routes: [{ topicPattern: 'order.**', destination: 'shipping' }, { topicPattern: '**', destination: 'billing' }] },
        observability: { logLevel: 'SILENT' },
      }),
    );
  });
  after(async () => {
    await sqs.stop();
    rmSync(dir, { recursive: true, force: true });
    await db.drop();
  });

  const tables = async () =>
    (await db.query<{ table_name: string }>(`SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY 1`, [db.schema])).map((r) => r.table_name);

  it('runs only your functions: no demo table or rows; prints the dead row with its destination and error; the drained run exits 1', async () => {
    const before = await tables();
    // One attempt each: the row for the missing queue is dead after its first delivery.
    await db.query(`INSERT INTO "${db.schema}".outbox (topic, payload, max_attempts) VALUES ('order.shipped', '{"orderId":"o-1"}', 1), ('invoice.issued', '{"invoiceId":"i-1"}', 1)`);
    const { code, stdout, stderr } = await runTsx(['bin/queuebox.ts', '--config', configFile, 'local', '--exit-when-drained', '--use-existing'], {
      ...process.env,
      ...credentials,
      QUEUEBOX_DATABASE_URL: db.url,
    });
    const output = `exit ${code}\nstdout:\n${stdout}\nstderr:\n${stderr}`;
    assert.equal(code, 1, output);
    assert.match(stdout, /QueueBox local \(no demo\): database .*; your destinations shipping, billing/, output);
    assert.doesNotMatch(stdout, /SQS emulator|demo queues|demo webhooks|writing \d+ demo orders/, output);
    const rows = await db.query<{ id: string; topic: string; state: string; last_error: string | null }>(`SELECT id, topic, state, last_error FROM "${db.schema}".outbox ORDER BY topic`);
    assert.deepEqual(
      rows.map((r) => [r.topic, r.state]),
      [
        ['invoice.issued', 'dead'],
        ['order.shipped', 'sent'],
      ],
      'your two rows and no demo row',
    );
    const dead = rows[0]!;
    assert.ok(dead.last_error, 'the dead row has its error');
    const line = stdout.split('\n').find((l) => l.startsWith(`dead outbox row ${dead.id} `));
    assert.ok(line, `a line for the dead row:\n${output}`);
    assert.ok(line.includes('(topic invoice.issued → destination billing): ') && line.includes(dead.last_error.split('\n')[0]!), line);
    assert.match(stdout, /stopped \(drained\): \{.*"newlyDead":1/, output);
    assert.match(stderr, /queuebox: the run drained with 1 row dead \(printed above with its error\); `queuebox status` lists them/, output);
    assert.deepEqual(await tables(), before, 'no demo table');
    assert.equal(sqs.counts()[DEMO_STANDARD_QUEUE], 1, 'the good row reached your queue');
  });

  it('drains your backlog and returns 0 dead when every row is delivered', async () => {
    Object.assign(process.env, credentials);
    await db.query(`DELETE FROM "${db.schema}".outbox`);
    await db.query(`INSERT INTO "${db.schema}".outbox (topic, payload) VALUES ('order.paid', '{"orderId":"o-2"}')`);
    const lines: string[] = [];
    const summary = await runLocal({ configPath: configFile, env: { QUEUEBOX_DATABASE_URL: db.url }, exitWhenDrained: true, useExisting: true, out: (l) => lines.push(l) });
    assert.deepEqual([summary.stoppedBecause, summary.demo, summary.newlyDead, summary.fed], ['drained', false, 0, 0], lines.join('\n'));
    assert.deepEqual(summary.counts, { pending: 0, processing: 0, sent: 1, dead: 0 });
    assert.ok(!lines.some((l) => l.startsWith('dead ')), lines.join('\n'));
  });

  it('refuses --exit-when-drained with the demo unless --messages makes it finite, and --messages without the demo; nothing starts', async () => {
    let started = false;
    const cli = async (...argv: string[]) => {
      let stderr = '';
      const code = await runCli(argv, {
        stdout: () => {},
        stderr: (t) => (stderr += t),
        env: {},
        runLocal: (options) => runLocal({ ...options, env: { QUEUEBOX_DATABASE_URL: db.url }, out: () => (started = true) }),
      });
      return { code, stderr };
    };
    const endless = await cli('local', '--exit-when-drained');
    assert.equal(endless.code, 1);
    assert.match(endless.stderr, /--exit-when-drained needs a finite run: the demo feeds a continuous stream that never drains\. Pass --messages N with it/);
    // The other way out names every flag it needs: without the demo, a database that already
    // holds rows (the backlog to drain) is refused unless --use-existing is given.
    const suggested = /to drain the backlog of your own database and exit, run queuebox --config <file> local (--[a-z-]+(?: --[a-z-]+)*)/.exec(endless.stderr);
    assert.ok(suggested, endless.stderr);
    assert.deepEqual(suggested[1]!.split(' ').sort(), ['--exit-when-drained', '--no-demo', '--use-existing']);
    const demoFed = await cli('--config', configFile, 'local', '--messages', '3');
    assert.equal(demoFed.code, 1);
    assert.match(demoFed.stderr, /--messages feeds demo orders, and this run has no demo .*pass --demo/);
    assert.equal(started, false, 'nothing started, nothing printed');
  });
});
