/**
 * QueueBox stores JSON message bodies and names of any Unicode text, so it needs a UTF8 database.
 * On a LATIN1 database `migrate` used to fail half-way with a raw conversion error (a character of
 * its SQL that LATIN1 has not), and on SQL_ASCII it succeeded and stored bytes unchecked. Against
 * a LATIN1 and a SQL_ASCII database of the test server: `migrate`, the `migrate --sql` script, the
 * start-up check (`schemaVerify`, and a pull worker's first claim) refuse with a `QueueBoxError`
 * naming the encoding and the fix, `migrate --check` names it, and nothing was created.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { parseConfig } from '../../lib/config/load-config.ts';
import { migrationScript } from '../../lib/db/migration-script.ts';
import { PostgresDriver } from '../../lib/db/postgres/postgres-driver.ts';
import { QueueBoxError } from '../../lib/errors.ts';
import { createPullWorker } from '../../lib/pull/pull-worker.ts';
import { testDatabaseUrl } from '../helpers/database.ts';

const SCHEMA = 'queuebox_enc';

for (const encoding of ['LATIN1', 'SQL_ASCII']) {
  describe(`a ${encoding} database is refused (PostgreSQL)`, () => {
    const database = `qb_enc_${encoding.toLowerCase()}_${randomBytes(4).toString('hex')}`;
    const admin = new pg.Pool({ connectionString: testDatabaseUrl(), max: 1 });
    const url = (() => {
      const u = new URL(testDatabaseUrl());
      u.pathname = `/${database}`;
      return u.toString();
    })();
    const config = parseConfig({ database: { url, schema: SCHEMA }, observability: { logLevel: 'SILENT' } });
    const pool = new pg.Pool({ connectionString: url, max: 3 });
    const drivers: PostgresDriver[] = [];
    const driver = () => {
      const d = new PostgresDriver({ config, url });
      drivers.push(d);
      return d;
    };
    const refused = (prefix: string) => (error: unknown) => {
      assert.ok(error instanceof QueueBoxError, `QueueBoxError, got ${String(error)}`);
      assert.ok(error.message.startsWith(`${prefix}: the database's encoding is ${encoding} (server_encoding), and QueueBox needs UTF8`), error.message);
      assert.match(error.message, /create the database with ENCODING 'UTF8'/);
      return true;
    };
    /** QueueBox's schema and any relation of its names, anywhere in the database. */
    const created = async () =>
      (
        await pool.query<{ name: string }>(
          `SELECT nspname AS name FROM pg_namespace WHERE nspname = $1
           UNION ALL SELECT relname FROM pg_class WHERE relname IN ('outbox', 'inbox', 'queuebox_maintenance', 'queuebox_migrations')
           UNION ALL SELECT proname FROM pg_proc WHERE proname LIKE 'outbox_claim_%'`,
          [SCHEMA],
        )
      ).rows.map((r) => r.name);

    before(async () => {
      await admin.query(`CREATE DATABASE "${database}" ENCODING '${encoding}' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0`);
    });
    after(async () => {
      await Promise.all(drivers.map((d) => d.close().catch(() => {})));
      await pool.end();
      // A pool's sockets may close a moment after its end() resolved: a connection still open at
      // the DROP would be terminated, and its client's error would outlive the test.
      for (const until = Date.now() + 5000; Date.now() < until; ) {
        const { rows } = await admin.query<{ n: number }>(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = $1`, [database]);
        if (rows[0]!.n === 0) break;
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      await admin.query(`DROP DATABASE IF EXISTS "${database}" WITH (FORCE)`);
      await admin.end();
    });

    it('migrate refuses it naming the encoding and the fix, and creates nothing', async () => {
      await assert.rejects(driver().migrate(), refused('migrate refused, nothing changed'));
      assert.deepEqual(await created(), []);
    });

    it('the migrate --sql script refuses it before its first change', async () => {
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        await assert.rejects(client.query(migrationScript(config)), (error: Error) => {
          assert.match(error.message, new RegExp(`^migrate refused, nothing changed: the database's encoding is ${encoding} \\(server_encoding\\), and QueueBox needs UTF8`));
          assert.match(error.message, /ENCODING 'UTF8'/);
          return true;
        });
      } finally {
        await client.query('ROLLBACK');
        client.release();
      }
      assert.deepEqual(await created(), []);
    });

    it('migrate --check names it; the start-up check and a pull worker refuse it', async () => {
      const [line, ...rest] = await driver().migrateCheck();
      assert.match(line ?? '', new RegExp(`^the database's encoding is ${encoding} \\(server_encoding\\), and QueueBox needs UTF8`));
      assert.ok(rest.every((p) => !/encoding/.test(p)), rest.join('\n'));
      await assert.rejects(driver().schemaVerify(), refused('QueueBox refuses this database'));
      const worker = createPullWorker({ pool, config, source: 'orders', handler: async () => {}, metrics: false, logger: { warn: () => {}, error: () => {} } });
      await assert.rejects(worker.runOnce(), refused('QueueBox refuses this database'));
      assert.deepEqual(await created(), []);
    });
  });
}
