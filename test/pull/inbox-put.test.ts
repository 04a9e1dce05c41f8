/**
 * Starting a pull worker on a laptop: `queuebox inbox put` stores a message in a pull source
 * through the source's own receiver (SQS record or signed API Gateway request: same checks, same
 * idempotency), and the worker claims it. A worker for a source the configuration does not
 * declare as a pull source, or given a driver that is still a Promise, is refused when created;
 * `start()` resolves once its first claim answered and rejects when it cannot claim.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { stringify } from 'yaml';
import { runCli } from '../../bin/cli-program.ts';
import { loadConfig, parseConfig } from '../../lib/config/load-config.ts';
import { createDriver } from '../../lib/db/create-driver.ts';
import { UsageError } from '../../lib/errors.ts';
import { createPullWorker } from '../../lib/pull/pull-worker.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { memoryLogger } from './pull-fixtures.ts';

describe('queuebox inbox put and the pull worker start-up', () => {
  let db: TestDatabase;
  let dir: string;
  let configFile: string;
  let env: Record<string, string>;
  const SECRET = 'whsec_local_put_test_0123456789';

  before(async () => {
    db = await createTestDatabase();
    dir = mkdtempSync(join(tmpdir(), 'qb-inbox-put-'));
    configFile = join(dir, 'queuebox.yml');
    writeFileSync(
      configFile,
      stringify({
        database: { schema: db.schema },
        observability: { logLevel: 'SILENT' },
        inbox: {
          sources: {
            'partner-orders': { type: 'sqs', queueName: 'partner-orders-queue', consumption: 'pull', aggregateIdPath: '$.orderId' },
            hooks: { type: 'http', path: '/hooks', consumption: 'pull', auth: { type: 'hmac', secretEnv: 'HOOKS_SECRET' }, idempotencyKeyPath: '$.id', aggregateIdPath: '$.orderId' },
            payments: { type: 'sqs', consumption: 'push' },
          },
        },
      }),
    );
    env = { QUEUEBOX_DATABASE_URL: db.url, HOOKS_SECRET: SECRET };
  });
  after(async () => {
    rmSync(dir, { recursive: true, force: true });
    await db.drop();
  });

  async function cli(...argv: string[]) {
    let stdout = '';
    let stderr = '';
    const code = await runCli(['--config', configFile, ...argv], { stdout: (t) => (stdout += t), stderr: (t) => (stderr += t), env });
    return { code, stdout, stderr };
  }
  const rows = (source: string) =>
    db.query<{ id: string; idempotency_key: string; aggregate_id: string | null; consumption: string; state: string; last_error: string | null }>(
      `SELECT id, idempotency_key, aggregate_id, consumption, state, last_error FROM "${db.schema}".inbox WHERE source = $1 ORDER BY created_at, id`,
      [source],
    );

  it('puts a message into an sqs pull source once per key; a second put is a duplicate; a body the receiver cannot accept is stored dead and exits 1', async () => {
    const first = await cli('inbox', 'put', '--source', 'partner-orders', '--key', 'evt-1', '--body', '{"orderId":"o-1","amountCents":1200}');
    assert.equal(first.code, 0, first.stderr);
    const [row] = await rows('partner-orders');
    assert.ok(row);
    assert.equal(first.stdout, `stored inbox row ${row.id} (source partner-orders, pull, idempotency key evt-1)\n`);
    assert.deepEqual([row.idempotency_key, row.aggregate_id, row.consumption, row.state], ['evt-1', 'o-1', 'pull', 'pending']);
    const again = await cli('inbox', 'put', '--source', 'partner-orders', '--key', 'evt-1', '--body', '{"orderId":"o-1","amountCents":1200}', '--json');
    assert.equal(again.code, 0, again.stderr);
    assert.deepEqual(JSON.parse(again.stdout), { outcome: 'duplicate', id: row.id, source: 'partner-orders', idempotencyKey: 'evt-1', consumption: 'pull' });
    const bad = await cli('inbox', 'put', '--source', 'partner-orders', '--key', 'evt-2', '--body', '[1, 2]');
    assert.equal(bad.code, 1);
    // A record stored dead at receipt is keyed by its MessageId (a corrected message sent later with evt-2 is stored).
    assert.match(bad.stdout, /^stored dead: inbox row \S+ \(source partner-orders, pull, idempotency key rejected:[0-9a-f-]{36}\): /);
    assert.match(bad.stderr, /the partner-orders receiver stored the message dead: /);
    assert.deepEqual((await rows('partner-orders')).map((r) => [r.idempotency_key.replace(/^rejected:.*/, 'rejected:…'), r.state]), [['evt-1', 'pending'], ['rejected:…', 'dead']]);
  });

  it('puts a message into a signed http pull source as a sender with its secret; a refused request stores nothing and exits 1', async () => {
    const put = await cli('inbox', 'put', '--source', 'hooks', '--body', '{"id":"h-1","orderId":"o-9"}');
    assert.equal(put.code, 0, put.stderr);
    assert.match(put.stdout, /^stored inbox row \S+ \(source hooks, pull, idempotency key h-1\)\n$/);
    const missingKey = await cli('inbox', 'put', '--source', 'hooks', '--body', '{"orderId":"o-9"}');
    assert.equal(missingKey.code, 1);
    assert.match(missingKey.stdout, /^refused \(400\): missing idempotency key: put a value at \$\.id in the body\n$/);
    delete env.HOOKS_SECRET;
    const noSecret = await cli('inbox', 'put', '--source', 'hooks', '--body', '{"id":"h-2"}');
    env.HOOKS_SECRET = SECRET;
    assert.equal(noSecret.code, 1);
    assert.match(noSecret.stderr, /inbox\.sources\.hooks\.auth\.secretEnv/);
    assert.deepEqual((await rows('hooks')).map((r) => [r.idempotency_key, r.aggregate_id, r.state]), [['h-1', 'o-9', 'pending']]);
  });

  it('refuses an unknown source, listing the configured ones, and a put without a body', async () => {
    const unknown = await cli('inbox', 'put', '--source', 'partner-order', '--body', '{}');
    assert.equal(unknown.code, 1);
    assert.match(unknown.stderr, /no inbox source "partner-order" in the configuration; its sources are: partner-orders \(sqs, pull\), hooks \(http, pull\), payments \(sqs, push\)/);
    const noBody = await cli('inbox', 'put', '--source', 'partner-orders');
    assert.equal(noBody.code, 1);
    assert.match(noBody.stderr, /give the message body with --body <json> or --body-file <path>/);
  });

  it('a worker claims and completes what was put', async () => {
    const config = loadConfig({ path: configFile, env });
    const driver = await createDriver(config, env);
    try {
      const seen: string[] = [];
      const worker = createPullWorker({ driver, config, source: 'hooks', logger: memoryLogger(), metrics: false, handler: async (message) => void seen.push(message.idempotencyKey) });
      const summary = await worker.runOnce();
      assert.deepEqual([summary.completed, seen], [1, ['h-1']]);
      assert.deepEqual((await rows('hooks')).map((r) => r.state), ['processed']);
    } finally {
      await driver.close();
    }
  });

  it('refuses a worker for a source that is not a configured pull source, listing the pull sources', () => {
    const config = loadConfig({ path: configFile, env });
    const make = (source: string) => () => createPullWorker({ driver: db.driver, config, source, handler: async () => {} });
    assert.throws(make('partner-order'), (e: unknown) => e instanceof UsageError && e.message === 'pull worker source "partner-order" is not an inbox source of the configuration; the configured pull sources are: partner-orders, hooks');
    assert.throws(make('payments'), (e: unknown) => e instanceof UsageError && /^pull worker source "payments" is a push source: the inbox relay forwards its rows .*; the configured pull sources are: partner-orders, hooks$/.test(e.message));
    assert.doesNotThrow(make('partner-orders'));
    const pushOnly = parseConfig({ inbox: { sources: { payments: { type: 'sqs', consumption: 'push' } } } });
    assert.throws(
      () => createPullWorker({ driver: db.driver, config: pushOnly, source: 'jobs', handler: async () => {} }),
      (e: unknown) => e instanceof UsageError && e.message === 'pull worker source "jobs" is not an inbox source of the configuration; the configuration declares no pull source (inbox.sources.<name>.consumption: pull)',
    );
    const noSources = parseConfig({});
    assert.doesNotThrow(() => createPullWorker({ driver: db.driver, config: noSources, source: 'jobs', handler: async () => {} }), 'a configuration with no inbox source at all (a worker\'s own minimal one) is not checked against');
  });

  it('refuses a driver that is still a Promise (createDriver without await), saying so', async () => {
    const pending = createDriver(db.config);
    assert.throws(
      // @ts-expect-error the mistake under test: the Promise instead of the driver
      () => createPullWorker({ driver: pending, source: 'partner-orders', handler: async () => {} }),
      (e: unknown) => e instanceof UsageError && /`driver` is a Promise: createDriver is async, so await it \(`const driver = await createDriver\(config\)`\)/.test(e.message),
    );
    await (await pending).close();
  });

  it('start() resolves once its first claim answered, and rejects with the loop stopped when it cannot claim', async () => {
    const config = loadConfig({ path: configFile, env });
    const worker = createPullWorker({ driver: db.driver, config, source: 'partner-orders', pollMs: 50, logger: memoryLogger(), metrics: false, handler: async () => {} });
    await worker.start();
    const summary = await worker.stop();
    assert.equal(summary?.claimed, 1, 'the pending row put earlier was claimed by the first claim');

    const unreachable = parseConfig({ database: { url: 'postgres://queuebox@127.0.0.1:1/none', connectTimeoutMs: 2000 } });
    const driver = await createDriver(unreachable);
    try {
      const failing = createPullWorker({ driver, source: 'partner-orders', pollMs: 50, logger: memoryLogger(), metrics: false, handler: async () => {} });
      await assert.rejects(failing.start(), (e: unknown) => e instanceof Error && /ECONNREFUSED|connect/i.test(e.message));
      assert.equal(await failing.stop(), undefined, 'the loop is stopped: nothing left to stop');
    } finally {
      await driver.close();
    }
  });
});
