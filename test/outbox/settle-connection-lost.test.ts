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
import type pg from 'pg';
import { createPgPool } from '../../lib/db/postgres/pg-pool.ts';
import { PostgresDriver } from '../../lib/db/postgres/postgres-driver.ts';
import { runOutboxPass } from '../../lib/outbox/outbox-pass.ts';
import type { TestDatabase } from '../helpers/database.ts';
import { insertOutboxRows, inspectRows, passFixture, withOutboxDatabase } from '../helpers/outbox-pass-fixture.ts';
import { RecordingDestination } from '../helpers/recording-destination.ts';

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
    }
  });

  it('the connection ends after the sent mark committed, before its answer: the second run counts the rows as sent, not as lost claims', async () => {
    const ids = await insertOutboxRows(db, [
      { topic: 'orders', key: 'K', payload: { n: 1 } },
      { topic: 'orders', payload: { n: 2 } },
    ]);
    const pool = createPgPool(db.config.database, db.url);
    let cut = 0;
    // The first sent mark runs and commits; its connection then fails as a reset socket does.
    pool.on('connect', (client: pg.PoolClient) => {
      const query = client.query.bind(client) as (...args: unknown[]) => Promise<unknown>;
      (client as unknown as { query: (...args: unknown[]) => Promise<unknown> }).query = (...args: unknown[]) => {
        const text = typeof args[0] === 'string' ? args[0] : (args[0] as { text?: string } | undefined)?.text;
        if (cut === 0 && isSentMark(text)) {
          cut++;
          return query(...args).then(() => {
            throw Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' });
          });
        }
        return query(...args);
      };
    });
    const driver = new PostgresDriver({ config: db.config, url: db.url, pool });
    try {
      const destination = new RecordingDestination();
      const summary = await runOutboxPass(passFixture(db, { destinations: [destination], driver, timeoutMs: 20_000 }));
      assert.equal(cut, 1, 'the first sent mark committed and its answer was lost');
      assert.equal(summary.sent, 2);
      assert.equal(summary.claimsLost, 0, 'rows sent under their own tokens are not lost claims');
      assert.equal(destination.deliveries.length, 2);
      assert.deepEqual(
        (await inspectRows(db, ids)).map((r) => r.state),
        ['sent', 'sent'],
      );
    } finally {
      await driver.close();
    }
  });
});
