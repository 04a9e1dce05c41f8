/**
 * docs/security.md, "Schema ownership": the grants it lists for a runtime role other than the
 * schema's owner are enough, run as written (its ```sql block, with this test's names) by the owner
 * before `migrate`: as the runtime role, `enqueue`, an outbox pass, an inbox message stored and
 * relayed, a pull claim and completion, `status`, `reclaim`, `replay --dry-run`, `cleanup --force`
 * and `migrate --check` all work. With `USAGE` on the schema alone, `status` fails as the page says.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { runCli } from '../../bin/cli-program.ts';
import { parseConfig } from '../../lib/config/load-config.ts';
import type { ConfigInput } from '../../lib/config/schema.ts';
import { PostgresDriver } from '../../lib/db/postgres/postgres-driver.ts';
import { runRelayPass } from '../../lib/inbox/relay-pass.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import { enqueue } from '../../lib/outbox/enqueue.ts';
import { runOutboxPass } from '../../lib/outbox/outbox-pass.ts';
import { createRouter } from '../../lib/outbox/routes.ts';
import { createPullWorker } from '../../lib/pull/pull-worker.ts';
import { createDeadline } from '../../lib/runtime/deadline.ts';
import { createInvocationContext } from '../../lib/runtime/invocation-context.ts';
import { testDatabaseUrl } from '../helpers/database.ts';
import { RecordingDestination } from '../helpers/recording-destination.ts';

const suffix = randomBytes(4).toString('hex');
const OWNER = `qb_grants_owner_${suffix}`;
const RUNTIME = `qb_grants_runtime_${suffix}`;
const BARE = `qb_grants_bare_${suffix}`;
const SCHEMA = `qb_grants_${suffix}`;

/** The page's grants for the runtime role: the ```sql block that sets the default privileges. */
function documentedGrants(role: string): string {
  const page = readFileSync('docs/security.md', 'utf8');
  const block = [...page.matchAll(/```sql\n([\s\S]*?)```/g)].map((m) => m[1]!).find((b) => b.includes('ALTER DEFAULT PRIVILEGES'));
  assert.ok(block, 'docs/security.md shows the runtime grants');
  return block.replace(/\bqueuebox_runtime\b/g, `"${role}"`).replace(/\bSCHEMA queuebox\b/g, `SCHEMA "${SCHEMA}"`);
}

describe('a runtime role with the grants docs/security.md lists (PostgreSQL)', { timeout: 180_000 }, () => {
  const admin = new pg.Pool({ connectionString: testDatabaseUrl(), max: 1 });
  const password = randomBytes(12).toString('hex');
  const urlOf = (role: string) => {
    const url = new URL(testDatabaseUrl());
    url.username = role;
    url.password = password;
    return url.toString();
  };
  const input: ConfigInput = {
    database: { schema: SCHEMA },
    destinations: { orders: { type: 'sqs', queueUrl: 'https://sqs.eu-west-1.amazonaws.com/123456789012/orders' } },
    outbox: { routes: [{ topicPattern: '**', destination: 'orders' }] },
    inbox: {
      sources: {
        shop: { type: 'sqs', queueName: 'shop', eventTypePath: '$.type' },
        'partner-orders': { type: 'sqs', queueName: 'partner-orders', consumption: 'pull' },
      },
    },
    observability: { logLevel: 'SILENT' },
  };
  const configFor = (role: string) => parseConfig({ ...input, database: { schema: SCHEMA, url: urlOf(role) } });
  let dir: string | undefined;
  let configFile: string;

  const cli = async (role: string, ...args: string[]): Promise<{ code: number; output: string }> => {
    let output = '';
    const code = await runCli(args, { stdout: (t) => (output += t), stderr: (t) => (output += t), env: { QUEUEBOX_CONFIG: configFile, QUEUEBOX_DATABASE_URL: urlOf(role) } });
    return { code, output };
  };
  const ok = async (role: string, ...args: string[]): Promise<string> => {
    const { code, output } = await cli(role, ...args);
    assert.equal(code, 0, `queuebox ${args.join(' ')} as the runtime role:\n${output}`);
    return output;
  };

  before(async () => {
    for (const role of [OWNER, RUNTIME, BARE]) await admin.query(`CREATE ROLE "${role}" LOGIN PASSWORD '${password}'`);
    await admin.query(`CREATE SCHEMA "${SCHEMA}" AUTHORIZATION "${OWNER}"`);
    const owner = new pg.Client({ connectionString: urlOf(OWNER) });
    await owner.connect();
    try {
      await owner.query(documentedGrants(RUNTIME));
      await owner.query(`GRANT USAGE ON SCHEMA "${SCHEMA}" TO "${BARE}"`);
    } finally {
      await owner.end();
    }
    const migrator = new PostgresDriver({ config: configFor(OWNER), url: urlOf(OWNER) });
    try {
      await migrator.migrate();
    } finally {
      await migrator.close();
    }
    dir = mkdtempSync(join(tmpdir(), 'qb-grants-'));
    configFile = join(dir, 'queuebox.yml');
    writeFileSync(configFile, JSON.stringify(input));
  });
  after(async () => {
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
    await admin.query(`DROP SCHEMA IF EXISTS "${SCHEMA}" CASCADE`);
    for (const role of [RUNTIME, BARE, OWNER]) await admin.query(`DROP OWNED BY "${role}"; DROP ROLE "${role}"`).catch(() => {});
    await admin.end();
  });

  it('enqueues, publishes, stores, relays, claims and completes, and runs the operator commands', async () => {
    const config = configFor(RUNTIME);
    const driver = new PostgresDriver({ config, url: urlOf(RUNTIME) });
    const pool = new pg.Pool({ connectionString: urlOf(RUNTIME), max: 1 });
    const metrics = new QueueBoxMetrics({ namespace: 'QueueBoxTest', serviceName: 'grants', write: () => {} });
    const logger = createLogger({ serviceName: 'grants', logLevel: 'SILENT' });
    const deadline = () => createDeadline(createInvocationContext({ timeoutMs: 30_000 }), 0);
    try {
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        await enqueue(client, { topic: 'order.paid', key: 'o-1', payload: { orderId: 'o-1' } }, { schema: SCHEMA });
        await client.query('COMMIT');
      } finally {
        client.release();
      }
      const destination = new RecordingDestination({ name: 'orders' });
      const pass = await runOutboxPass({ driver, config, destinations: new Map([['orders', destination]]), router: createRouter(config.outbox.routes), deadline: deadline(), metrics, logger, mode: 'drain' });
      assert.equal(pass.sent, 1, JSON.stringify(pass));

      await ok(RUNTIME, 'inbox', 'put', '--source', 'shop', '--key', 'k-1', '--body', '{"type":"created"}');
      const relay = await runRelayPass({ config, driver, logger, metrics, deadline: deadline(), mode: 'drain' });
      assert.equal(relay.forwarded, 1, JSON.stringify(relay));

      await ok(RUNTIME, 'inbox', 'put', '--source', 'partner-orders', '--key', 'k-2', '--body', '{"orderId":"o-2"}');
      const pulled = await createPullWorker({ driver, config, source: 'partner-orders', metrics, handler: async () => {} }).runOnce({ context: createInvocationContext({ timeoutMs: 30_000 }) });
      assert.equal(pulled.completed, 1, JSON.stringify(pulled));
    } finally {
      await pool.end();
      await driver.close();
    }
    assert.match(await ok(RUNTIME, 'status'), /outbox/);
    assert.match(await ok(RUNTIME, 'reclaim'), /reclaimed: outbox 0, inbox 0/);
    assert.match(await ok(RUNTIME, 'replay', '--state', 'sent', '--topic', 'order.paid', '--dry-run'), /would replay 1 sent row/);
    await ok(RUNTIME, 'cleanup', '--force');
    assert.match(await ok(RUNTIME, 'migrate', '--check'), /up to date/);
  });

  it('with USAGE on the schema alone, status fails as the page says', async () => {
    const { code, output } = await cli(BARE, 'status');
    assert.equal(code, 1, output);
    assert.match(output, /permission denied for table queuebox_migrations/);
    assert.match(readFileSync('docs/security.md', 'utf8'), /`queuebox status` fails with `permission\s+denied for table queuebox_migrations`/);
  });
});
