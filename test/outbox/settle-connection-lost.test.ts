/**
 * A fenced settle whose connection is lost (the server terminated it, a failover, a proxy restart,
 * a network reset) is sent again on another connection of the pool, and the fence decides again.
 * Before, the pass failed on it and left rows the destination had accepted to the reclaim:
 * charged an attempt and delivered again, or dead with a reason saying the call never finished.
 *
 * Two cases: the connection ends while the sent mark waits (it never committed), and it ends
 * after the sent mark committed, before its answer reached the pass — the second run then finds
 * the rows sent under its own tokens, and counts them as sent, not as lost claims.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import pg from 'pg';
import { createPgPool } from '../../lib/db/postgres/pg-pool.ts';
import { PostgresDriver } from '../../lib/db/postgres/postgres-driver.ts';
import { runOutboxPass } from '../../lib/outbox/outbox-pass.ts';
import type { TestDatabase } from '../helpers/database.ts';
import { insertOutboxRows, inspectRows, passFixture, withOutboxDatabase } from '../helpers/outbox-pass-fixture.ts';
import { RecordingDestination } from '../helpers/recording-destination.ts';
import { poolLosingFirstAnswer } from '../helpers/lost-answer.ts';
import { startStallProxy } from '../helpers/stall-proxy.ts';

const isSentMark = (text: unknown) => typeof text === 'string' && text.includes("SET state = 'sent'");

describe('outbox: a settle whose connection is lost is sent again', () => {
  let db: TestDatabase;
  withOutboxDatabase((d) => (db = d));

  it('the connection ends while the sent mark waits on a lock: the mark is sent again, the rows end sent with no attempt spent', async () => {
    const ids = await insertOutboxRows(db, [
      { topic: 'orders', key: 'K', payload: { n: 1 } },
      { topic: 'orders', payload: { n: 2 } },
    ]);
    const pool = createPgPool(db.config.database, db.url);
    const driver = new PostgresDriver({ config: db.config, url: db.url, pool });
    const locker = await db.pool.connect();
    try {
      let gate!: () => void;
      const opened = new Promise<void>((resolve) => (gate = resolve));
      let called!: () => void;
      const publishing = new Promise<void>((resolve) => (called = resolve));
      const destination = new RecordingDestination({
        waitFor: async () => {
          called();
          await opened;
        },
      });
      const pass = runOutboxPass(passFixture(db, { destinations: [destination], driver, outbox: { maxAttempts: 1 }, timeoutMs: 20_000 }));
      await publishing;
      await locker.query('BEGIN');
      await locker.query(`SELECT 1 FROM "${db.schema}".outbox WHERE id = $1 FOR UPDATE`, [ids[0]]);
      gate();
      let pid: number | undefined;
      for (let i = 0; i < 250 && pid === undefined; i++) {
        const rows = await db.query<{ pid: number }>(
          `SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1 AND query LIKE '%SET state = ''sent''%'`,
          [`%${db.schema}%`],
        );
        pid = rows[0]?.pid;
        if (pid === undefined) await new Promise((resolve) => setTimeout(resolve, 20));
      }
      assert.ok(pid !== undefined, 'the sent mark waited on the locked row');
      await db.query('SELECT pg_terminate_backend($1)', [pid]);
      await locker.query('ROLLBACK');
      const summary = await pass;
      assert.equal(summary.sent, 2);
      assert.equal(summary.claimsLost, 0);
      assert.equal(destination.deliveries.length, 2);
      const rows = await inspectRows(db, ids);
      assert.deepEqual(
        rows.map((r) => [r.state, r.attempt]),
        [
          ['sent', 0],
          ['sent', 0],
        ],
      );
    } finally {
      locker.release();
      await driver.close();
      await pool.end();
    }
  });

  it('the connection ends after the sent mark committed, before its answer: the second run counts the rows as sent, not as lost claims', async () => {
    const ids = await insertOutboxRows(db, [
      { topic: 'orders', key: 'K', payload: { n: 1 } },
      { topic: 'orders', payload: { n: 2 } },
    ]);
    // The first sent mark runs and commits; its connection then fails as a reset socket does.
    const { pool, cuts } = poolLosingFirstAnswer(db.config.database, db.url, isSentMark);
    const driver = new PostgresDriver({ config: db.config, url: db.url, pool });
    try {
      const destination = new RecordingDestination();
      const summary = await runOutboxPass(passFixture(db, { destinations: [destination], driver, timeoutMs: 20_000 }));
      assert.equal(cuts(), 1, 'the first sent mark committed and its answer was lost');
      assert.equal(summary.sent, 2);
      assert.equal(summary.claimsLost, 0, 'rows sent under their own tokens are not lost claims');
      assert.equal(destination.deliveries.length, 2);
      assert.deepEqual(
        (await inspectRows(db, ids)).map((r) => r.state),
        ['sent', 'sent'],
      );
    } finally {
      await driver.close();
      await pool.end();
    }
  });
  it('the connection is cut while the sent mark waits on the server, whose first run then commits: the run sent again waits behind it and counts the row as sent', async () => {
    // A TCP proxy between the pool and the server, so the connection can be cut as a proxy
    // restart or a network reset cuts it: the first run goes on waiting on the server.
    const proxy = await startStallProxy(db.url);
    const proxied = proxy.through(db.url);
    const pool = createPgPool(db.config.database, proxied);
    pool.on('error', () => {});
    const driver = new PostgresDriver({ config: db.config, url: proxied, pool });
    const app = new pg.Client({ connectionString: db.url });
    try {
      const [id] = await insertOutboxRows(db, [{ topic: 'orders', payload: { n: 1 } }]);
      const [row] = await db.driver.outboxClaimMany({ limit: 10, leaseMs: 60_000 });
      const claim = { id: row!.id, token: row!.claimToken };
      assert.equal(claim.id, id);
      await app.connect();
      await app.query('BEGIN');
      await app.query(`SELECT 1 FROM "${db.schema}".outbox WHERE id = $1 FOR UPDATE`, [id]);
      const marking = driver.outboxMarkSentMany({ claims: [claim] });
      const waiting = async () =>
        (await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%SET state = ''sent''%' AND query LIKE $1`, [`%${db.schema}%`]))[0]!.n;
      for (let i = 0; i < 250 && (await waiting()) < 1; i++) await new Promise((resolve) => setTimeout(resolve, 20));
      proxy.endAll();
      // The run sent again waits behind the first, which still waits on the server.
      for (let i = 0; i < 250 && (await waiting()) < 2; i++) await new Promise((resolve) => setTimeout(resolve, 20));
      assert.equal(await waiting(), 2, 'both runs wait for the row');
      await app.query('COMMIT');
      const marked = await marking;
      assert.deepEqual(marked, [id], 'the row sent under its own token by the first run counts as sent');
      assert.equal((await inspectRows(db, [id!]))[0]!.state, 'sent');
    } finally {
      await app.end().catch(() => {});
      await driver.close();
      await pool.end().catch(() => {});
      await proxy.close();
    }
  });
});
