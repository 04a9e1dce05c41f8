/**
 * A relay forward whose connection ends after the server committed it (its answer never
 * arrives) recognises its own earlier run: the rows it finds `processed` under its own tokens,
 * with the outbox rows that run wrote, count as forwarded — not as lost claims. Before, the
 * batched forward sent again (`fencedQuery`) found them no longer under its claim, and a
 * row-by-row forward whose COMMIT answer was lost went on to a retry write that found the same:
 * both counted `queuebox_claims_lost_total{component="inbox"}` although the outbox held exactly
 * one row per inbox row. A row another claim finished, or one processed under the token without
 * the outbox row this forward wrote, is still not taken for this forward's, and no second outbox
 * row is ever written.
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import type net from 'node:net';
import pg from 'pg';
import type { Driver, InboxForwardItem, InboxRow } from '../../lib/db/driver.ts';
import { createPgPool } from '../../lib/db/postgres/pg-pool.ts';
import { PostgresDriver } from '../../lib/db/postgres/postgres-driver.ts';
import { forwardItemOf, relayMessage, runRelayPass, type RelaySummary } from '../../lib/inbox/relay-pass.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import { createDeadline } from '../../lib/runtime/deadline.ts';
import { poolLosingFirstAnswer, runAndLoseAnswer, textOf, wrapQuery } from '../helpers/lost-answer.ts';
import { startStallProxy } from '../helpers/stall-proxy.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { fakeLambdaContext } from '../helpers/lambda-context.ts';

const isBatchedForward = (text: string | undefined) => text !== undefined && text.includes('marked AS (') && text.includes("SET state = 'processed'");

describe('inbox relay: a forward whose answer was lost after it committed', () => {
  let db: TestDatabase;
  let inbox: string;
  let outbox: string;
  const logger = createLogger({ serviceName: 'test', logLevel: 'SILENT' });
  before(async () => {
    db = await createTestDatabase({
      inbox: {
        relay: { batchSize: 10, concurrency: 2, claimTimeoutMs: 60_000, maxAttempts: 5 },
        sources: { shop: { type: 'http', path: '/shop', auth: { type: 'none' } } },
      },
    });
    inbox = `"${db.schema}".inbox`;
    outbox = `"${db.schema}".outbox`;
  });
  after(async () => db.drop());
  beforeEach(async () => {
    await db.query(`TRUNCATE ${inbox}, ${outbox}, "${db.schema}".queuebox_maintenance`);
  });

  const store = async (keys: string[]): Promise<string[]> => {
    const ids: string[] = [];
    for (const key of keys) ids.push((await db.driver.inboxInsert({ source: 'shop', idempotencyKey: key, aggregateId: key, eventType: 'created', payload: { key }, consumption: 'push' })).id);
    return ids;
  };
  const pass = (driver: Driver, metrics: QueueBoxMetrics): Promise<RelaySummary> =>
    runRelayPass({ config: db.config, driver, logger, metrics, deadline: createDeadline(fakeLambdaContext({ timeoutMs: 20_000 }), 0), mode: 'drain' });
  const newMetrics = () => new QueueBoxMetrics({ namespace: 'QueueBox', serviceName: 'test', write: () => {} });
  /** The inbox rows' states, and how many outbox rows name each inbox row (`x-inbox-id`), in `ids` order. */
  const outcome = async (ids: string[]) => {
    const rows = await db.query<{ id: string; state: string; copies: number }>(
      `SELECT i.id, i.state, (SELECT count(*)::int FROM ${outbox} o WHERE o.headers ->> 'x-inbox-id' = i.id::text) AS copies FROM ${inbox} i`,
    );
    const byId = new Map(rows.map((r) => [r.id, r]));
    return ids.map((id) => [byId.get(id)!.state, byId.get(id)!.copies]);
  };
  const forwardItem = (row: InboxRow): InboxForwardItem => {
    const built = relayMessage(row, db.config.inbox.topicTemplate);
    assert.ok('message' in built);
    return forwardItemOf(row, built.message, 'source-and-aggregate');
  };

  it('batched: the forward sent again counts the rows its first run forwarded as forwarded, not as lost claims', async () => {
    const ids = await store(['A', 'B', 'C']);
    // The first batched forward runs and commits; its connection then fails as a reset socket does.
    const { pool, cuts } = poolLosingFirstAnswer(db.config.database, db.url, isBatchedForward);
    const driver = new PostgresDriver({ config: db.config, url: db.url, pool });
    try {
      const metrics = newMetrics();
      const summary = await pass(driver, metrics);
      assert.equal(cuts(), 1, 'the first forward committed and its answer was lost');
      assert.deepEqual([summary.claimed, summary.forwarded, summary.retried, summary.claimsLost], [3, 3, 0, 0]);
      assert.equal(metrics.value('claimsLost', { component: 'inbox' }), 0);
      assert.deepEqual(await outcome(ids), [
        ['processed', 1],
        ['processed', 1],
        ['processed', 1],
      ]);
    } finally {
      await driver.close();
      await pool.end();
    }
  });

  it('batched: the connection is cut while the forward waits on the server, whose first run then commits; the run sent again waits behind it and counts the row as forwarded', async () => {
    // A TCP proxy between the pool and the server, so the connection can be cut as a proxy
    // restart or a network reset cuts it: the first run goes on waiting on the server.
    const proxy = await startStallProxy(db.url);
    const proxied = proxy.through(db.url);
    const pool = createPgPool(db.config.database, proxied);
    pool.on('error', () => {});
    const driver = new PostgresDriver({ config: db.config, url: proxied, pool });
    const app = new pg.Client({ connectionString: db.url });
    try {
      const ids = await store(['A', 'B']);
      const rows = await db.driver.inboxClaimPushMany({ limit: 10, leaseMs: 60_000 });
      assert.equal(rows.length, 2);
      await app.connect();
      await app.query('BEGIN');
      await app.query(`SELECT 1 FROM ${inbox} WHERE id = $1 FOR UPDATE`, [ids[0]]);
      const forwarding = driver.inboxForwardMany!(rows.map(forwardItem), { maxAttempts: 5 });
      const waiting = async () =>
        (await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%marked AS (%' AND query LIKE $1`, [`%${db.schema}%`]))[0]!.n;
      for (let i = 0; i < 250 && (await waiting()) < 1; i++) await new Promise((resolve) => setTimeout(resolve, 20));
      proxy.endAll();
      // The run sent again waits behind the first, which still waits on the server.
      for (let i = 0; i < 250 && (await waiting()) < 2; i++) await new Promise((resolve) => setTimeout(resolve, 20));
      assert.equal(await waiting(), 2, 'both runs wait for the row');
      await app.query('COMMIT');
      const forwarded = await forwarding;
      assert.deepEqual([...forwarded].sort(), [...ids].sort(), 'the rows forwarded under their own tokens by the first run count as forwarded');
      assert.deepEqual(await outcome(ids), [
        ['processed', 1],
        ['processed', 1],
      ]);
    } finally {
      await app.end().catch(() => {});
      await driver.close();
      await pool.end().catch(() => {});
      await proxy.close();
    }
  });

  it('batched, sent again: a row another claim forwarded, or one processed under the token without this forward\'s outbox row, is still a lost claim, and gets no second outbox row', async () => {
    const [other, oneByOne, own] = await store(['A', 'B', 'C']);
    const claimed = await db.driver.inboxClaimPushMany({ limit: 10, leaseMs: 60_000 });
    const byId = new Map(claimed.map((r) => [r.id, r]));
    // `other`: its lease ends, the reclaim returns it, another claim takes and forwards it.
    await db.query(`UPDATE ${inbox} SET lease_expires_at = clock_timestamp() - interval '1 second' WHERE id = $1`, [other]);
    await db.driver.inboxReclaimExpired({ maxAttempts: 5 });
    const [again] = await db.driver.inboxClaimPushMany({ limit: 10, leaseMs: 60_000 });
    assert.equal(again!.id, other);
    assert.equal(await db.driver.inboxForward(forwardItem(again!), { maxAttempts: 5 }), true);
    // `oneByOne`: forwarded under this claim's token by another forward (its own outbox row).
    assert.equal(await db.driver.inboxForward(forwardItem(byId.get(oneByOne!)!), { maxAttempts: 5 }), true);
    const { pool, cuts } = poolLosingFirstAnswer(db.config.database, db.url, isBatchedForward);
    const driver = new PostgresDriver({ config: db.config, url: db.url, pool });
    try {
      const forwarded = await driver.inboxForwardMany!([other!, oneByOne!, own!].map((id) => forwardItem(byId.get(id)!)), { maxAttempts: 5 });
      assert.equal(cuts(), 1);
      assert.deepEqual(forwarded, [own], 'only the row this forward wrote counts as forwarded');
      assert.deepEqual(await outcome([other!, oneByOne!, own!]), [
        ['processed', 1],
        ['processed', 1],
        ['processed', 1],
      ]);
    } finally {
      await driver.close();
      await pool.end();
    }
  });

  it('row by row: a forward whose COMMIT answer was lost counts as forwarded, not as a lost claim (no retry write)', async () => {
    const ids = await store(['A', 'B', 'C']);
    const pool = createPgPool(db.config.database, db.url);
    let cut = 0;
    // On each connection: once the forward's mark was sent, its COMMIT runs and its answer is lost.
    pool.on('connect', (client: pg.PoolClient) => {
      let marked = false;
      wrapQuery(client, (query) => (...args) => {
        const text = textOf(args);
        if (text?.includes("SET state = 'processed'") === true) marked = true;
        else if (text === 'COMMIT' && marked) {
          marked = false;
          cut++;
          return runAndLoseAnswer(query, args);
        } else if (text === 'ROLLBACK') marked = false;
        return query(...args);
      });
    });
    const base = new PostgresDriver({ config: db.config, url: db.url, pool });
    // Row by row, as on SQL Server or after a batched forward failed.
    const driver = Object.create(base, { inboxForwardMany: { value: undefined } }) as Driver;
    try {
      const metrics = newMetrics();
      const summary = await pass(driver, metrics);
      assert.equal(cut, 3, 'every forward committed and its answer was lost');
      assert.deepEqual([summary.claimed, summary.forwarded, summary.retried, summary.claimsLost], [3, 3, 0, 0]);
      assert.equal(metrics.value('claimsLost', { component: 'inbox' }), 0);
      assert.deepEqual(await outcome(ids), [
        ['processed', 1],
        ['processed', 1],
        ['processed', 1],
      ]);
    } finally {
      await base.close();
      await pool.end();
    }
  });

  it('row by row: the connection ends while the server still finishes the COMMIT; the forward waits for it and counts the row as forwarded', async () => {
    const [id] = await store(['A']);
    const [row] = await db.driver.inboxClaimPushMany({ limit: 10, leaseMs: 60_000 });
    // The COMMIT waits for an advisory lock the test holds (a deferred trigger on the outbox):
    // the server is still finishing it when the connection ends.
    await db.query(`CREATE FUNCTION "${db.schema}".hold_commit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_advisory_xact_lock(727272); RETURN NULL; END $$`);
    await db.query(`CREATE CONSTRAINT TRIGGER hold_commit AFTER INSERT ON ${outbox} DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION "${db.schema}".hold_commit()`);
    const holder = new pg.Client({ connectionString: db.url });
    const pool = createPgPool(db.config.database, db.url);
    pool.on('error', () => {});
    const committing = async () =>
      (await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND wait_event = 'advisory' AND query = 'COMMIT'`))[0]!.n;
    let cut = 0;
    pool.on('connect', (client: pg.PoolClient) => {
      let marked = false;
      wrapQuery(client, (query) => (...args) => {
        const text = textOf(args);
        if (text?.includes("SET state = 'processed'") === true) marked = true;
        else if (text === 'COMMIT' && marked) {
          marked = false;
          cut++;
          const answer = query(...args);
          void (async () => {
            for (let i = 0; i < 250 && (await committing()) < 1; i++) await new Promise((resolve) => setTimeout(resolve, 20));
            (client as unknown as { connection: { stream: net.Socket } }).connection.stream.destroy();
          })();
          return answer;
        }
        return query(...args);
      });
    });
    const driver = new PostgresDriver({ config: db.config, url: db.url, pool });
    try {
      await holder.connect();
      await holder.query('SELECT pg_advisory_lock(727272)');
      // Settled either way here, so a failed forward fails the assertion below, not the process.
      const forwarding = driver.inboxForward(forwardItem(row!), { maxAttempts: 5 }).catch((error: unknown) => error);
      // The forward, its connection gone, waits for the row the COMMIT still holds.
      const waiting = async () =>
        (await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND wait_event <> 'advisory' AND query LIKE '%FOR SHARE%' AND query LIKE $1`, [`%${db.schema}%`]))[0]!.n;
      for (let i = 0; i < 250 && (await waiting()) < 1; i++) await new Promise((resolve) => setTimeout(resolve, 20));
      await holder.query('SELECT pg_advisory_unlock(727272)');
      assert.equal(await forwarding, true, 'the row forwarded by the COMMIT that landed counts as forwarded');
      assert.equal(cut, 1);
      assert.deepEqual(await outcome([id!]), [['processed', 1]]);
    } finally {
      await holder.end().catch(() => {});
      await driver.close();
      await pool.end().catch(() => {});
      await db.query(`DROP TRIGGER hold_commit ON ${outbox}`);
      await db.query(`DROP FUNCTION "${db.schema}".hold_commit()`);
    }
  });
});
