/**
 * A database whose DateStyle is not ISO (`ALTER DATABASE … SET datestyle = 'SQL, DMY'`, `German`,
 * `Postgres, MDY`: operators have these), with a TimeZone that is not UTC. PostgreSQL then writes
 * a timestamptz as `17/03/2024 18:04:56.789123 IST`, `17.03.2024 …` or `Sun Mar 17 …`, which `pg`
 * does not parse (it gives null). Every time QueueBox reads is the time the row holds, to the
 * millisecond (rounded down, as `pg` reads ISO text): the CLI's `status` and replay preview, a
 * pull handler's message (on QueueBox's pool and on the application's), the console's pages,
 * and the rows an outbox pass and a relay pass claim.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, beforeEach, describe, it } from 'node:test';
import pg from 'pg';
import { runCli } from '../../bin/cli-program.ts';
import { startConsoleServer, type ConsoleServer } from '../../lib/console/console-server.ts';
import type { ConfigInput } from '../../lib/config/schema.ts';
import type { Driver, InboxRow, OutboxRow } from '../../lib/db/driver.ts';
import { passRowName } from '../../lib/db/pass-row-name.ts';
import { PostgresDriver } from '../../lib/db/postgres/postgres-driver.ts';
import { runRelayPass } from '../../lib/inbox/relay-pass.ts';
import { createPullWorker, type PullWorkerOptions } from '../../lib/index.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import { runOutboxPass } from '../../lib/outbox/outbox-pass.ts';
import { createDeadline } from '../../lib/runtime/deadline.ts';
import { consoleCall } from '../console/console-fixture.ts';
import { createTestDatabase, testDatabaseUrl, type TestDatabase } from '../helpers/database.ts';
import { fakeLambdaContext } from '../helpers/lambda-context.ts';
import { delegatingPassDriver, passFixture } from '../helpers/outbox-pass-fixture.ts';
import { pgBouncerMissing, startPgBouncer, type PgBouncer } from '../helpers/pgbouncer.ts';
import { RecordingDestination } from '../helpers/recording-destination.ts';

/** Times written as SQL literals, and the `Date` each must read as. */
const T = {
  /** Day 17: no month, so a DMY/MDY mix-up cannot pass; its microseconds are rounded down. */
  march: { sql: '2024-03-17 12:34:56.789123+00', iso: '2024-03-17T12:34:56.789Z' },
  /** The next day in Asia/Kolkata and Europe/Berlin, the same day in America/St_Johns. */
  november: { sql: '2024-11-05 23:59:59.999999+00', iso: '2024-11-05T23:59:59.999Z' },
  /** A claim in flight before `march`'s lease ran out. */
  claimed: { sql: '2024-03-17 12:30:00.5+00', iso: '2024-03-17T12:30:00.500Z' },
  /** Its float8 epoch in ms (`date_part`, the outbox claim's) is 2147552167126.9998: one ms short. */
  far: { sql: '2038-01-19 22:16:07.127+00', iso: '2038-01-19T22:16:07.127Z' },
} as const;

/** As the console writes a time (`layout.ts`). */
const shown = (iso: string) => iso.replace('T', ' ');

/** The database settings of each case: constants of this file, written into `ALTER DATABASE`. */
const CASES = [
  { datestyle: 'SQL, DMY', timezone: 'Asia/Kolkata', intervalstyle: 'postgres' },
  { datestyle: 'German, DMY', timezone: 'Europe/Berlin', intervalstyle: 'sql_standard' },
  { datestyle: 'Postgres, MDY', timezone: 'America/St_Johns', intervalstyle: 'postgres_verbose' },
] as const;

interface StyledDatabase {
  db: TestDatabase;
  /** Drops the test database's schema, then the database. */
  drop(): Promise<void>;
}

/** A database of its own on the test server with the settings of `c`, and a migrated test schema in it. */
async function styledDatabase(c: (typeof CASES)[number], overrides: ConfigInput): Promise<StyledDatabase> {
  const server = testDatabaseUrl();
  const name = `qb_datestyle_${randomBytes(5).toString('hex')}`;
  const admin = new pg.Client({ connectionString: server });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE "${name}"`);
    await admin.query(`ALTER DATABASE "${name}" SET datestyle = '${c.datestyle}'`);
    await admin.query(`ALTER DATABASE "${name}" SET timezone = '${c.timezone}'`);
    await admin.query(`ALTER DATABASE "${name}" SET intervalstyle = '${c.intervalstyle}'`);
  } finally {
    await admin.end();
  }
  const url = new URL(server);
  url.pathname = `/${name}`;
  // `createTestDatabase` reads DATABASE_URL before its first await: it makes its schema in this database.
  const saved = process.env.DATABASE_URL;
  process.env.DATABASE_URL = url.href;
  let created: Promise<TestDatabase>;
  try {
    created = createTestDatabase(overrides);
  } finally {
    process.env.DATABASE_URL = saved;
  }
  const db = await created;
  return {
    db,
    async drop() {
      await db.drop();
      const cleanup = new pg.Client({ connectionString: server });
      await cleanup.connect();
      try {
        await cleanup.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
      } finally {
        await cleanup.end();
      }
    },
  };
}

for (const c of CASES) {
  describe(`a database whose DateStyle is ${c.datestyle} (TimeZone ${c.timezone}, IntervalStyle ${c.intervalstyle})`, () => {
    let styled: StyledDatabase | undefined;
    let db: TestDatabase;
    let outbox: string;
    let inbox: string;
    const env = () => ({ QUEUEBOX_DATABASE_URL: db.url, QUEUEBOX_DATABASE__SCHEMA: db.schema });
    const logger = createLogger({ serviceName: 'test', logLevel: 'SILENT' });

    before(async () => {
      styled = await styledDatabase(c, {
        destinations: { main: { type: 'sqs', queueUrl: 'http://localhost:1/000000000000/main' } },
        outbox: { routes: [{ topicPattern: '**', destination: 'main' }], pollIntervalMs: 10 },
        inbox: { sources: { hooks: { type: 'sqs', consumption: 'push' }, orders: { type: 'sqs', consumption: 'pull' } } },
        observability: { logLevel: 'SILENT' },
      });
      db = styled.db;
      outbox = `"${db.schema}".outbox`;
      inbox = `"${db.schema}".inbox`;
    });
    after(async () => styled?.drop());
    beforeEach(async () => {
      await db.query(`TRUNCATE ${outbox}, ${inbox}, "${db.schema}".queuebox_maintenance`);
    });

    async function cli(...args: string[]) {
      let stdout = '';
      let stderr = '';
      const code = await runCli(args, { stdout: (t) => (stdout += t), stderr: (t) => (stderr += t), env: env() });
      return { code, stdout, stderr };
    }
    /** The id of the one row `sql` inserts. */
    const insert = async (sql: string) => (await db.query<{ id: string }>(`${sql} RETURNING id`))[0]!.id;
    /** `column` of row `id` of `table`, in ms since the epoch rounded down (as QueueBox must read it). */
    const storedMs = async (table: string, column: string, id: string) =>
      Number((await db.query<{ ms: string }>(`SELECT floor(extract(epoch FROM ${column}) * 1000)::text AS ms FROM ${table} WHERE id = $1`, [id]))[0]!.ms);

    it('the session writes times in that style (the case this file is about)', async () => {
      const [row] = await db.query<{ datestyle: string; text: string }>(`SELECT current_setting('datestyle') AS datestyle, $1::timestamptz::text AS text`, [T.march.sql]);
      assert.equal(row!.datestyle, c.datestyle);
      assert.doesNotMatch(row!.text, /^2024-03-17/, `not ISO: ${row!.text}`);
    });

    it('queuebox status exits 0 and shows each dead row’s last change and the last finished pass as stored', async () => {
      const deadOut = await insert(`INSERT INTO ${outbox} (topic, payload, state, attempt, last_error, updated_at) VALUES ('ds.status', '{}', 'dead', 5, 'boom', '${T.march.sql}')`);
      const deadIn = await insert(`INSERT INTO ${inbox} (source, idempotency_key, payload, state, last_error, updated_at) VALUES ('hooks', 'k-status', '{}', 'dead', 'bad', '${T.november.sql}')`);
      await db.query(`INSERT INTO "${db.schema}".queuebox_maintenance (name, last_run_at) VALUES ($1, $2)`, [passRowName('outboxPoller', db.config.tables.outbox), T.far.sql]);

      const text = await cli('status');
      assert.equal(text.code, 0, text.stderr);
      assert.match(text.stdout, new RegExp(`^\\s+${deadOut}\\s+ds\\.status\\s+${T.march.iso.replace(/\./g, '\\.')}\\s+boom$`, 'm'));
      assert.match(text.stdout, new RegExp(`^\\s+${deadIn}\\s+hooks\\s+${T.november.iso.replace(/\./g, '\\.')}\\s+bad$`, 'm'));
      assert.match(text.stdout, new RegExp(`^outboxPoller\\s+${T.far.iso.replace(/\./g, '\\.')}\\s`, 'm'));

      const json = await cli('status', '--json');
      assert.equal(json.code, 0, json.stderr);
      const report = JSON.parse(json.stdout) as { outbox: { dead: Array<{ updatedAt: string }> }; inbox: { dead: Array<{ updatedAt: string }> }; passes: { outboxPoller: { finishedAt: string } } };
      assert.deepEqual([report.outbox.dead[0]!.updatedAt, report.inbox.dead[0]!.updatedAt, report.passes.outboxPoller.finishedAt], [T.march.iso, T.november.iso, T.far.iso]);
    });

    it('queuebox replay --dry-run exits 0 and lists the rows with their created time, outbox and inbox', async () => {
      const out = await insert(`INSERT INTO ${outbox} (topic, payload, state, last_error, created_at) VALUES ('ds.replay', '{}', 'dead', 'boom', '${T.march.sql}')`);
      const into = await insert(`INSERT INTO ${inbox} (source, idempotency_key, payload, state, last_error, created_at) VALUES ('hooks', 'k-replay', '{}', 'dead', 'bad', '${T.november.sql}')`);

      // The filter's times are sent as ISO text, which every DateStyle reads year first.
      const outboxPreview = await cli('replay', '--topic', 'ds.replay', '--created-from', '2024-03-17T12:00:00Z', '--created-to', '2024-03-18T00:00:00Z', '--dry-run');
      assert.equal(outboxPreview.code, 0, outboxPreview.stderr);
      assert.ok(outboxPreview.stdout.includes(`\n  ${T.march.iso}  dead  attempt 0  ${out}  ds.replay  boom\n`), outboxPreview.stdout);

      const inboxPreview = await cli('replay', '--table', 'inbox', '--source', 'hooks', '--dry-run');
      assert.equal(inboxPreview.code, 0, inboxPreview.stderr);
      assert.ok(inboxPreview.stdout.includes(`\n  ${T.november.iso}  dead  attempt 0  ${into}  hooks (push)  bad\n`), inboxPreview.stdout);

      const json = await cli('replay', '--topic', 'ds.replay', '--dry-run', '--json');
      assert.equal(json.code, 0, json.stderr);
      assert.ok(json.stdout.includes(`"createdAt":"${T.march.iso}"`), json.stdout);
      assert.ok(json.stdout.includes(`"updatedAt":"`), json.stdout);
    });

    /** Runs one pull worker pass over the source `orders`; returns what its handler saw, with the row's stored lease. */
    async function pullOnce(options: Pick<PullWorkerOptions, 'driver' | 'pool'>) {
      const seen: Array<{ id: string; createdAt: unknown; leaseExpiresAt: unknown; storedLeaseMs: number }> = [];
      const worker = createPullWorker({
        ...options,
        config: db.config,
        source: 'orders',
        metrics: false,
        handler: async (message) => {
          seen.push({ id: message.id, createdAt: message.createdAt, leaseExpiresAt: message.leaseExpiresAt, storedLeaseMs: await storedMs(inbox, 'lease_expires_at', message.id) });
        },
      });
      const summary = await worker.runOnce();
      return { summary, seen };
    }

    it('a pull handler gets createdAt and leaseExpiresAt as the row holds them, on QueueBox’s pool and on the application’s', async () => {
      await db.query(`INSERT INTO ${inbox} (source, idempotency_key, payload, consumption, created_at) VALUES ('orders', 'k-pull-1', '{}', 'pull', '${T.march.sql}')`);
      const own = await pullOnce({ driver: db.driver });
      assert.equal(own.summary.completed, 1);
      assert.equal(own.seen.length, 1);
      assert.ok(own.seen[0]!.createdAt instanceof Date && own.seen[0]!.leaseExpiresAt instanceof Date, 'Dates, as typed');
      assert.equal((own.seen[0]!.createdAt as Date).toISOString(), T.march.iso);
      assert.equal((own.seen[0]!.leaseExpiresAt as Date).getTime(), own.seen[0]!.storedLeaseMs);

      await db.query(`INSERT INTO ${inbox} (source, idempotency_key, payload, consumption, created_at) VALUES ('orders', 'k-pull-2', '{}', 'pull', '${T.november.sql}')`);
      const appPool = new pg.Pool({ connectionString: db.url, max: 2 });
      try {
        const app = await pullOnce({ pool: appPool });
        assert.equal(app.summary.completed, 1);
        assert.equal((app.seen[0]!.createdAt as Date).toISOString(), T.november.iso);
        assert.equal((app.seen[0]!.leaseExpiresAt as Date).getTime(), app.seen[0]!.storedLeaseMs);
      } finally {
        await appPool.end();
      }
      const states = await db.query<{ state: string }>(`SELECT state FROM ${inbox} ORDER BY idempotency_key`);
      assert.deepEqual(states.map((r) => r.state), ['processed', 'processed']);
    });

    describe('the console', () => {
      let server: ConsoleServer;
      let cookie = '';
      const ids: Record<string, string> = {};
      before(async () => {
        server = await startConsoleServer({ driver: db.driver, config: db.config, port: 0 });
      });
      after(async () => server?.close());
      beforeEach(async () => {
        ids.dead = await insert(`INSERT INTO ${outbox} (topic, payload, state, attempt, last_error, created_at, updated_at) VALUES ('ds.console', '{}', 'dead', 5, 'console boom', '${T.november.sql}', '${T.march.sql}')`);
        ids.deadIn = await insert(`INSERT INTO ${inbox} (source, idempotency_key, payload, state, last_error, created_at, updated_at) VALUES ('hooks', 'k-console', '{}', 'dead', 'inbox boom', '${T.march.sql}', '${T.november.sql}')`);
        // A key head whose lease ran out, with a row waiting behind it.
        ids.stuck = await insert(`INSERT INTO ${outbox} (topic, key, payload, state, claim_token, claimed_at, lease_expires_at, scheduled_at)
          VALUES ('ds.console', 'k-ds', '{}', 'processing', gen_random_uuid(), '${T.claimed.sql}', '${T.march.sql}', '${T.claimed.sql}')`);
        ids.behind = await insert(`INSERT INTO ${outbox} (topic, key, payload) VALUES ('ds.console', 'k-ds', '{}')`);
      });
      const get = async (path: string) => {
        const res = await consoleCall(server.url, { path, headers: cookie ? { cookie } : {} });
        cookie ||= res.cookie;
        assert.equal(res.status, 200, `${path}: ${res.body.slice(0, 400)}`);
        return res.body;
      };

      it('the dead page shows when each row was received and died, and each group’s latest', async () => {
        const body = await get('/dead');
        assert.ok(body.includes(`received ${shown(T.november.iso)} · died ${shown(T.march.iso)}`), 'the outbox row');
        assert.match(body, new RegExp(`console boom[\\s\\S]*?<td>${shown(T.march.iso).replace(/\./g, '\\.')}</td>`), 'its group’s latest');
        const inboxBody = await get('/dead?table=inbox');
        assert.ok(inboxBody.includes(`received ${shown(T.march.iso)}`), 'the inbox row, by when it was received');
        assert.match(inboxBody, new RegExp(`inbox boom[\\s\\S]*?<td>${shown(T.march.iso).replace(/\./g, '\\.')}</td>`), 'its group’s latest (inbox: by received)');
      });

      it('the row page, the blocked page and the overview show the stored times', async () => {
        const row = await get(`/row/outbox/${ids.stuck}`);
        assert.ok(row.includes(`${shown(T.claimed.iso)} — last claimed; lease until ${shown(T.march.iso)}`), 'claim and lease');
        const dead = await get(`/row/inbox/${ids.deadIn}`);
        assert.ok(dead.includes(`${shown(T.march.iso)} — created`) && dead.includes(`${shown(T.november.iso)} — last change, now`), 'received and last change');

        const blocked = await get('/blocked');
        const head = [...blocked.matchAll(/<tr ([^>]*)>([\s\S]*?)<\/tr>/g)].find((m) => /data-key="k-ds"/.test(m[1]!));
        assert.ok(head, 'the stuck head is listed');
        assert.ok(head[2]!.includes(shown(T.claimed.iso)) && head[2]!.includes(shown(T.march.iso)), head[2]);

        const [before] = await db.query<{ ms: string }>(`SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::text AS ms`);
        const overview = await get('/');
        const [afterIt] = await db.query<{ ms: string }>(`SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::text AS ms`);
        const clock = /Database clock (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}Z)\./.exec(overview);
        assert.ok(clock, 'the database clock is shown');
        const clockMs = Date.parse(clock[1]!.replace(' ', 'T'));
        assert.ok(clockMs >= Number(before!.ms) && clockMs <= Number(afterIt!.ms), `${clock[1]} read between the two clock reads around it`);
        assert.match(overview, new RegExp(`${ids.stuck}[\\s\\S]*?<td>${shown(T.claimed.iso).replace(/\./g, '\\.')}</td>`), 'the claim in flight, with when it was claimed');
      });
    });

    it('an outbox pass claims and sends; the claimed rows carry their created time and lease as stored', async () => {
      const march = await insert(`INSERT INTO ${outbox} (topic, payload, created_at) VALUES ('ds.pass', '{"n":1}', '${T.march.sql}')`);
      const far = await insert(`INSERT INTO ${outbox} (topic, payload, created_at) VALUES ('ds.pass', '{"n":2}', '${T.far.sql}')`);
      const claimed: Array<{ row: OutboxRow; storedLeaseMs: number }> = [];
      const driver = delegatingPassDriver(db.driver, {
        outboxClaimMany: async (p) => {
          const rows = await db.driver.outboxClaimMany(p);
          for (const row of rows) claimed.push({ row, storedLeaseMs: await storedMs(outbox, 'lease_expires_at', row.id) });
          return rows;
        },
      });
      const destination = new RecordingDestination({ name: 'main' });
      const summary = await runOutboxPass(passFixture(db, { destinations: [destination], driver }));
      assert.deepEqual({ claimed: summary.claimed, sent: summary.sent, claimsLost: summary.claimsLost }, { claimed: 2, sent: 2, claimsLost: 0 });
      assert.deepEqual(destination.deliveries.map((d) => d.id).sort(), [march, far].sort());
      const byId = new Map(claimed.map((c) => [c.row.id, c]));
      assert.equal(byId.get(march)!.row.createdAt.toISOString(), T.march.iso);
      assert.equal(byId.get(far)!.row.createdAt.toISOString(), T.far.iso, 'the float8 epoch read to the millisecond it stands for');
      for (const c of claimed) assert.equal(c.row.leaseExpiresAt.getTime(), c.storedLeaseMs, 'the lease as stored');
      const states = await db.query<{ state: string }>(`SELECT state FROM ${outbox} WHERE id = ANY($1::uuid[])`, [[march, far]]);
      assert.deepEqual(states.map((r) => r.state), ['sent', 'sent']);
    });

    it('a relay pass claims, forwards and marks processed; the claimed rows carry their created time and lease as stored', async () => {
      const id = await insert(`INSERT INTO ${inbox} (source, idempotency_key, event_type, payload, created_at) VALUES ('hooks', 'k-relay', 'created', '{"n":1}', '${T.november.sql}')`);
      const claimed: Array<{ row: InboxRow; storedLeaseMs: number }> = [];
      const target = db.driver as Driver;
      const driver = new Proxy(target, {
        get(object, property) {
          if (property === 'inboxClaimPushMany') {
            return async (p: Parameters<Driver['inboxClaimPushMany']>[0]) => {
              const rows = await target.inboxClaimPushMany(p);
              for (const row of rows) claimed.push({ row, storedLeaseMs: await storedMs(inbox, 'lease_expires_at', row.id) });
              return rows;
            };
          }
          const value = Reflect.get(object, property, object) as unknown;
          return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(object) : value;
        },
      });
      const metrics = new QueueBoxMetrics({ namespace: 'QueueBox', serviceName: 'test', write: () => {} });
      const summary = await runRelayPass({ config: db.config, driver, logger, metrics, deadline: createDeadline(fakeLambdaContext({ timeoutMs: 20_000 }), 0), mode: 'drain' });
      assert.equal(summary.forwarded, 1, JSON.stringify(summary));
      assert.equal(claimed.length, 1);
      assert.equal(claimed[0]!.row.createdAt.toISOString(), T.november.iso);
      assert.equal(claimed[0]!.row.leaseExpiresAt.getTime(), claimed[0]!.storedLeaseMs);
      const [row] = await db.query<{ state: string }>(`SELECT state FROM ${inbox} WHERE id = $1`, [id]);
      assert.equal(row!.state, 'processed');
      const [relayed] = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${outbox} WHERE headers->>'x-inbox-id' = $1`, [id]);
      assert.equal(relayed!.n, 1);
    });
  });
}

describe('behind PgBouncer in transaction mode, a database whose DateStyle is SQL, DMY', { skip: pgBouncerMissing(), timeout: 120_000 }, () => {
  let styled: StyledDatabase | undefined;
  let bouncer: PgBouncer | undefined;
  let db: TestDatabase;
  before(async () => {
    styled = await styledDatabase(CASES[0], { inbox: { sources: { orders: { type: 'sqs', consumption: 'pull' } } }, observability: { logLevel: 'SILENT' } });
    db = styled.db;
    // As docs/operations.md configures it: the two startup parameters QueueBox's pool sends are ignored.
    bouncer = await startPgBouncer(db.url, { poolSize: 2, ignoreStartupParameters: ['statement_timeout', 'idle_in_transaction_session_timeout'] });
  });
  after(async () => {
    await bouncer?.close();
    await styled?.drop();
  });

  it('queuebox status and a pull handler read the stored times', async () => {
    const dead = (await db.query<{ id: string }>(`INSERT INTO "${db.schema}".outbox (topic, payload, state, last_error, updated_at) VALUES ('ds.bouncer', '{}', 'dead', 'boom', '${T.march.sql}') RETURNING id`))[0]!.id;
    let stdout = '';
    let stderr = '';
    const code = await runCli(['status'], { stdout: (t) => (stdout += t), stderr: (t) => (stderr += t), env: { QUEUEBOX_DATABASE_URL: bouncer!.url, QUEUEBOX_DATABASE__SCHEMA: db.schema } });
    assert.equal(code, 0, stderr);
    assert.match(stdout, new RegExp(`^\\s+${dead}\\s+ds\\.bouncer\\s+${T.march.iso.replace(/\./g, '\\.')}\\s+boom$`, 'm'));

    await db.query(`INSERT INTO "${db.schema}".inbox (source, idempotency_key, payload, consumption, created_at) VALUES ('orders', 'k-bouncer', '{}', 'pull', '${T.november.sql}')`);
    const driver = new PostgresDriver({ config: db.config, url: bouncer!.url });
    try {
      const seen: Date[] = [];
      const worker = createPullWorker({ driver, config: db.config, source: 'orders', metrics: false, handler: async (message) => void seen.push(message.createdAt) });
      const summary = await worker.runOnce();
      assert.equal(summary.completed, 1);
      assert.deepEqual(seen.map((d) => d.toISOString()), [T.november.iso]);
    } finally {
      await driver.close();
    }
  });
});
