/**
 * QueueBox behind a real PgBouncer in transaction mode, configured as docs/operations.md says:
 * QueueBox's connections carry `statement_timeout` and `idle_in_transaction_session_timeout` as
 * startup parameters, which PgBouncer refuses unless told to ignore them; the role then carries
 * the same timeouts (`ALTER ROLE … SET`). Through it: the refusal without that setting names the
 * fix, two passes drain keyed rows in order, and a pull worker's forced stop ends its handler's
 * business transaction — the server process named through the pooler, not the pooler's own id.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { parseConfig } from '../../lib/config/load-config.ts';
import { PostgresDriver } from '../../lib/db/postgres/postgres-driver.ts';
import { createPullWorker } from '../../lib/index.ts';
import { runOutboxPass } from '../../lib/outbox/outbox-pass.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { insertOutboxRows, passFixture } from '../helpers/outbox-pass-fixture.ts';
import { pgBouncerMissing, startPgBouncer, type PgBouncer } from '../helpers/pgbouncer.ts';
import { RecordingDestination } from '../helpers/recording-destination.ts';
import { createGate, waitUntil } from '../helpers/wait.ts';
import { insertPullRows, memoryLogger, readPullRows } from '../pull/pull-fixtures.ts';

/** What docs/operations.md tells PgBouncer to ignore. */
const IGNORED = ['statement_timeout', 'idle_in_transaction_session_timeout'];

describe('behind PgBouncer in transaction mode', { skip: pgBouncerMissing(), timeout: 120_000 }, () => {
  let db: TestDatabase;
  let role: string;
  let roleUrl: string;
  let bouncer: PgBouncer;
  let driver: PostgresDriver;
  const drivers: PostgresDriver[] = [];

  /** A driver of the test's schema whose connections go through `url`. */
  const driverThrough = (url: string, overrides: Record<string, unknown> = {}) => {
    const config = parseConfig({
      ...db.config,
      database: { ...db.config.database, url, ...overrides },
    } as never);
    const d = new PostgresDriver({ config, url });
    drivers.push(d);
    return d;
  };

  before(async () => {
    db = await createTestDatabase({
      database: { poolMax: 3 },
      destinations: { main: { type: 'sqs', queueUrl: 'http://localhost:1/000000000000/main' } },
      outbox: { routes: [{ topicPattern: '**', destination: 'main' }], pollIntervalMs: 10 },
    });
    // A role of its own, so that its timeouts (set on the role, as the docs say) touch no other test.
    role = `qb_bouncer_${randomBytes(4).toString('hex')}`;
    const password = randomBytes(12).toString('hex');
    const { statementTimeoutMs, idleInTransactionTimeoutMs } = db.config.database;
    await db.query(`CREATE ROLE ${role} LOGIN SUPERUSER PASSWORD '${password}'`);
    await db.query(`ALTER ROLE ${role} SET statement_timeout = ${statementTimeoutMs}`);
    await db.query(`ALTER ROLE ${role} SET idle_in_transaction_session_timeout = ${idleInTransactionTimeoutMs}`);
    const direct = new URL(db.url);
    direct.username = role;
    direct.password = password;
    roleUrl = direct.toString();
    bouncer = await startPgBouncer(roleUrl, { poolSize: 4, ignoreStartupParameters: IGNORED });
    driver = driverThrough(bouncer.url);
  });
  after(async () => {
    await Promise.all(drivers.map((d) => d.close().catch(() => {})));
    await bouncer?.close();
    await db?.drop();
    if (role !== undefined) await new pg.Client({ connectionString: db.url }).connect().then(async (c) => {
      try {
        await c.query(`DROP ROLE IF EXISTS ${role}`);
      } finally {
        await c.end();
      }
    });
  });

  it('without ignore_startup_parameters PgBouncer refuses QueueBox\'s connections, and the error names the setting and the role\'s timeouts', async () => {
    const strict = await startPgBouncer(roleUrl, { poolSize: 1 });
    try {
      const refused = driverThrough(strict.url);
      await assert.rejects(
        () => refused.outboxStats({}),
        (error: Error) => {
          assert.match(error.message, /unsupported startup parameter: (statement_timeout|idle_in_transaction_session_timeout)/);
          assert.match(error.message, /ignore_startup_parameters = statement_timeout, idle_in_transaction_session_timeout/);
          assert.match(error.message, /ALTER ROLE/);
          return true;
        },
      );
    } finally {
      await strict.close();
    }
  });

  it('with the documented settings, every server connection QueueBox gets runs under the role\'s timeouts, equal to the configured ones', async () => {
    const pool = (driver as unknown as { pool: pg.Pool }).pool;
    const rows = await Promise.all(
      Array.from({ length: 3 }, () =>
        pool.query<{ s: number; i: number }>(
          `SELECT (SELECT setting::int FROM pg_settings WHERE name = 'statement_timeout') AS s, (SELECT setting::int FROM pg_settings WHERE name = 'idle_in_transaction_session_timeout') AS i`,
        ),
      ),
    );
    for (const { rows: [row] } of rows) assert.deepEqual(row, { s: db.config.database.statementTimeoutMs, i: db.config.database.idleInTransactionTimeoutMs });
  });

  it('two passes drain keyed rows through it: every row sent once, in order per key', async () => {
    const keys = 20;
    await insertOutboxRows(db, Array.from({ length: 600 }, (_, i) => ({ topic: 'orders.paid', key: `k${i % keys}`, payload: { i } })));
    const destination = new RecordingDestination({ name: 'main' });
    const passes = [driver, driverThrough(bouncer.url)].map((d) => runOutboxPass(passFixture(db, { destinations: [destination], driver: d, mode: 'drain', timeoutMs: 60_000 })));
    const summaries = await Promise.all(passes);
    assert.equal(summaries.reduce((n, s) => n + s.sent, 0), 600);
    assert.equal(destination.deliveries.length, 600, 'each row delivered once');
    const byKey = new Map<string, number[]>();
    for (const m of destination.deliveries) byKey.set(m.key!, [...(byKey.get(m.key!) ?? []), (m.payload as { i: number }).i]);
    for (const [key, order] of byKey) assert.deepEqual(order, [...order].sort((a, b) => a - b), `key ${key} in order`);
    const [left] = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".outbox WHERE state <> 'sent'`);
    assert.equal(left!.n, 0);
  });

  it('a pull worker\'s forced stop ends its handler\'s open business transaction through the pooler: the lock is freed, nothing commits', async () => {
    await db.query(`CREATE TABLE "${db.schema}".orders_paid (order_id text PRIMARY KEY)`);
    await insertPullRows(db, 'held', [{ key: 'h1' }]);
    const inTransaction = createGate();
    const logger = memoryLogger();
    const worker = createPullWorker({
      driver,
      source: 'held',
      batch: 1,
      concurrency: 1,
      logger,
      metrics: false,
      handler: async (message, { transaction }) => {
        await transaction(async (tx) => {
          await tx.query(`INSERT INTO "${db.schema}".orders_paid VALUES ($1)`, [message.idempotencyKey]);
          inTransaction.open();
          await tx.query('SELECT pg_sleep(20)');
        });
      },
    });
    worker.start();
    await inTransaction.wait();
    const stopped = Date.now();
    const summary = await worker.stop({ timeoutMs: 200 });
    assert.ok(Date.now() - stopped < 10_000, 'the stop did not wait for the handler\'s statement');
    assert.equal(summary!.abandoned, 1);
    // Another writer of the same business key, directly on the server, is not held up.
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    try {
      await client.query('SET lock_timeout = 3000');
      await client.query(`INSERT INTO "${db.schema}".orders_paid VALUES ('h1')`);
    } finally {
      await client.end();
    }
    await waitUntil('the handler\'s statement is gone from the server', async () =>
      (await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE query LIKE '%pg_sleep(20)%' AND pid <> pg_backend_pid()`))[0]!.n === 0,
    );
    const [row] = await readPullRows(db, 'held');
    assert.equal(row!.state, 'processing', 'left to its lease, not completed');
  });
});
