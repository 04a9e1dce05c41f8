/**
 * `queuebox local --demo` with a config file: the demo's fake orders go to the emulator only.
 *
 * - A configuration that names destinations of its own (here an EventBridge bus `prod-bus`, served
 *   by a local stand-in so a delivery would show) is refused before anything starts, naming them:
 *   nothing is migrated, nothing reaches the bus.
 * - A configuration that names none runs the demo on the emulator, and every request the emulator
 *   receives is signed with the stand-in key, never with the keys in the environment.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { stringify } from 'yaml';
import { runCli } from '../../bin/cli-program.ts';
import { startLocalEventBridge, type LocalEventBridge } from '../../lib/local/local-eventbridge.ts';
import { runLocal } from '../../lib/local/local-runner.ts';
import { startLocalSqsEmulator, type LocalSqsEmulator } from '../../lib/local/local-sqs-emulator.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';

/** An HTTP proxy to `target` that records the Authorization and session-token headers of each request. */
async function recordingProxy(target: string): Promise<{ url: string; seen: { authorization: string; sessionToken: string | undefined }[]; server: Server }> {
  const to = new URL(target);
  const seen: { authorization: string; sessionToken: string | undefined }[] = [];
  const server = createServer((req, res) => {
    seen.push({ authorization: String(req.headers.authorization ?? ''), sessionToken: req.headers['x-amz-security-token'] as string | undefined });
    const upstream = request({ host: to.hostname, port: to.port, method: req.method, path: req.url, headers: req.headers }, (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.headers);
      answer.pipe(res);
    });
    upstream.on('error', () => res.destroy());
    req.pipe(upstream);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen, server };
}

describe('queuebox local --demo with a config file', () => {
  let db: TestDatabase;
  let dir: string;
  let bus: LocalEventBridge;
  // Keys in the environment, where the SDK's default provider chain reads them: a developer's own.
  const keys = { AWS_ACCESS_KEY_ID: 'my-real-key', AWS_SECRET_ACCESS_KEY: 'my-real-secret', AWS_SESSION_TOKEN: 'my-real-session' };
  const saved = Object.fromEntries(Object.keys(keys).map((k) => [k, process.env[k]]));

  before(async () => {
    db = await createTestDatabase();
    dir = mkdtempSync(join(tmpdir(), 'qb-local-demo-config-'));
    bus = await startLocalEventBridge({ buses: ['prod-bus'] });
    Object.assign(process.env, keys);
  });
  after(async () => {
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
    await bus.stop();
    rmSync(dir, { recursive: true, force: true });
    await db.drop();
  });

  const tables = async () =>
    (await db.query<{ table_name: string }>(`SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY 1`, [db.schema])).map((r) => r.table_name);

  it('is refused with a configuration that names destinations of its own, naming them, before anything starts: nothing reaches them', async () => {
    const file = join(dir, 'own-destinations.yml');
    writeFileSync(
      file,
      stringify({
        database: { schema: db.schema },
        destinations: { mine: { type: 'eventbridge', eventBusName: 'prod-bus', source: 'com.example.shop', endpoint: bus.endpoint, region: 'eu-west-1' } },
        outbox: { routes: [{ topicPattern: '**', destination: 'mine' }] },
        observability: { logLevel: 'SILENT' },
      }),
    );
    const tablesBefore = await tables();
    let stderr = '';
    const printed: string[] = [];
    const code = await runCli(['--config', file, 'local', '--demo', '--messages', '5', '--exit-when-drained'], {
      stdout: () => {},
      stderr: (t) => (stderr += t),
      env: {},
      runLocal: (options) => runLocal({ ...options, env: { ...process.env, QUEUEBOX_DATABASE_URL: db.url }, out: (line) => printed.push(line) }),
    });
    assert.equal(bus.events('prod-bus').length, 0, `the user's own bus received nothing\n${printed.join('\n')}`);
    assert.equal(code, 1, printed.join('\n'));
    assert.match(stderr, /--demo publishes fake demo orders, and this configuration names destinations mine and routes \*\* → mine of its own/);
    assert.match(stderr, /Drop --demo .*or run --demo with a configuration that names no destinations or routes: its demo publishes to the SQS emulator/);
    assert.deepEqual(printed, [], 'nothing started, nothing printed');
    assert.deepEqual(await tables(), tablesBefore, 'no demo table created');
    assert.deepEqual(await db.query(`SELECT id FROM "${db.schema}".outbox`), [], 'no demo order written');
  });

  it('with a configuration that names no destinations, runs the demo on the emulator, signing with the stand-in key, not the environment’s', async () => {
    // A schema of its own: the run refuses one that holds rows it did not create.
    const own = await createTestDatabase();
    const file = join(dir, 'no-destinations.yml');
    writeFileSync(file, stringify({ database: { schema: own.schema }, observability: { logLevel: 'SILENT' } }));
    const real = await startLocalSqsEmulator();
    const sqs = await recordingProxy(real.endpoint);
    const eventBridge = await recordingProxy(real.eventBridgeEndpoint);
    // The emulator as the run sees it: every request goes through the recording proxies.
    const emulator: LocalSqsEmulator = {
      ...real,
      endpoint: sqs.url,
      fifoQueueUrl: real.fifoQueueUrl.replace(real.endpoint, sqs.url),
      standardQueueUrl: real.standardQueueUrl.replace(real.endpoint, sqs.url),
      eventBridgeEndpoint: eventBridge.url,
    };
    const printed: string[] = [];
    try {
      const summary = await runLocal({
        configPath: file,
        demo: true,
        messages: 6,
        exitWhenDrained: true,
        emulator,
        env: { ...process.env, QUEUEBOX_DATABASE_URL: own.url },
        out: (line) => printed.push(line),
      });
      assert.equal(summary.stoppedBecause, 'drained', printed.join('\n'));
      // 6 orders and their 6 payment webhooks, relayed by the demo inbox.
      assert.deepEqual(summary.counts, { pending: 0, processing: 0, sent: 12, dead: 0 }, printed.join('\n'));
      assert.equal(Object.values(summary.emulator).reduce((a, b) => a + b, 0), 12, JSON.stringify(summary.emulator));
      assert.ok(summary.emulator['queuebox-demo.fifo']! > 0 && summary.emulator['queuebox-demo-bus']! > 0, JSON.stringify(summary.emulator));
      assert.ok(printed.some((l) => l.startsWith('demo queues: ') && l.includes('** → events')), printed.join('\n'));
    } finally {
      await own.drop();
      await new Promise((resolve) => sqs.server.close(resolve));
      await new Promise((resolve) => eventBridge.server.close(resolve));
      await real.stop();
    }
    const seen = [...sqs.seen, ...eventBridge.seen];
    assert.ok(sqs.seen.length > 0 && eventBridge.seen.length > 0, 'both emulators were called through the proxies');
    const keyIds = new Set(seen.map((s) => /Credential=([^/]*)\//.exec(s.authorization)?.[1]));
    assert.deepEqual([...keyIds], ['local'], 'every request is signed with the stand-in key');
    assert.deepEqual(
      seen.filter((s) => s.sessionToken !== undefined),
      [],
      'no session token from the environment is sent',
    );
    assert.equal(bus.events('prod-bus').length, 0);
  });
});
