/**
 * `queuebox local` with scale-out on (`outbox.scaleOut.maxConcurrentPasses` 3): a pass that sees
 * more due rows than it can send before its deadline starts more passes of its function, as
 * deployed — but in the local process, not through AWS Lambda (which a laptop cannot reach, and
 * must not). The backlog is sized against a slowed pass (batches of 5, one call at a time), and
 * the speed-up makes each invocation 6 s long, so the first pass always wants more passes.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { stringify } from 'yaml';
import { runLocal } from '../../lib/local/local-runner.ts';
import { DEMO_STANDARD_QUEUE, EMULATOR_REGION, startLocalSqsEmulator, type LocalSqsEmulator } from '../../lib/local/local-sqs-emulator.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';

const ROWS = 10_000;

describe('queuebox local with outbox scale-out on (no demo)', { timeout: 240_000 }, () => {
  let db: TestDatabase;
  let sqs: LocalSqsEmulator;
  let dir: string;
  let configFile: string;
  const saved = { ...process.env };

  before(async () => {
    db = await createTestDatabase();
    sqs = await startLocalSqsEmulator();
    dir = mkdtempSync(join(tmpdir(), 'qb-local-scale-out-'));
    configFile = join(dir, 'queuebox.yml');
    writeFileSync(
      configFile,
      stringify({
        database: { schema: db.schema },
        destinations: { shipping: { type: 'sqs', queueUrl: sqs.standardQueueUrl, endpoint: sqs.endpoint, region: EMULATOR_REGION } },
        // claims of a fixed 5 rows (no growth): the backlog estimate this test's row count was chosen for
        outbox: { routes: [{ topicPattern: '**', destination: 'shipping' }], batchSize: 5, maxBatchSize: 5, concurrency: 1, scaleOut: { maxConcurrentPasses: 3 } },
        lambda: { deadlineMarginMs: 1000 },
        observability: { logLevel: 'SILENT' },
      }),
    );
    // Credentials for the emulator; no region: an invoke through the AWS SDK could not even be sent.
    Object.assign(process.env, { AWS_ACCESS_KEY_ID: 'local', AWS_SECRET_ACCESS_KEY: 'local' });
    delete process.env.AWS_REGION;
    delete process.env.AWS_DEFAULT_REGION;
  });
  after(async () => {
    for (const name of ['AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY', 'AWS_REGION', 'AWS_DEFAULT_REGION']) {
      if (saved[name] === undefined) delete process.env[name];
      else process.env[name] = saved[name];
    }
    await sqs.stop();
    rmSync(dir, { recursive: true, force: true });
    await db.drop();
  });

  it('says so at start-up, starts the extra passes in its own process, and they drain the backlog with the scheduled ones', async () => {
    await db.query(`INSERT INTO "${db.schema}".outbox (topic, payload) SELECT 'order.paid', jsonb_build_object('n', g) FROM generate_series(1, $1::int) g`, [ROWS]);
    const lines: string[] = [];
    const summary = await runLocal({ configPath: configFile, env: { QUEUEBOX_DATABASE_URL: db.url }, exitWhenDrained: true, useExisting: true, speed: 10, out: (l) => lines.push(l) });
    const output = lines.join('\n');
    assert.ok(lines.includes('outboxPoller: scale-out up to 3 passes at once; the passes it starts run in this process, not through AWS Lambda'), output);
    assert.ok(!lines.some((l) => l.startsWith('inboxRelay: scale-out')), `the relay's scale-out is off: ${output}`);
    assert.equal(summary.stoppedBecause, 'drained', output);
    assert.deepEqual(summary.counts, { pending: 0, processing: 0, sent: ROWS, dead: 0 }, output);
    assert.ok(summary.scaleOutPasses >= 1, `passes started by scale-out: ${summary.scaleOutPasses}\n${output}`);
    assert.ok(summary.invocations > summary.scaleOutPasses, output);
    assert.equal(sqs.counts()[DEMO_STANDARD_QUEUE], ROWS, 'every row reached the queue');
    // Each started pass took its slot over and freed it when it returned: no slot is held.
    const held = await db.query(`SELECT name FROM "${db.schema}".queuebox_maintenance WHERE name LIKE 'scale-out:%' AND last_run_at > clock_timestamp()`);
    assert.deepEqual(held, [], 'no scale-out slot left held');
  });
});
