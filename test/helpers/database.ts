/**
 * Per-test-file database isolation: each file gets its own schema on the run's server
 * (`DATABASE_URL`, provided by `test/run.ts`), migrated, and dropped at the end.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { parseConfig } from '../../lib/config/load-config.ts';
import type { ConfigInput, QueueBoxConfig } from '../../lib/config/schema.ts';
import { PostgresDriver } from '../../lib/db/postgres/postgres-driver.ts';
import { createdSchema } from './drop-on-signal.ts';

export interface TestDatabase {
  url: string;
  schema: string;
  config: QueueBoxConfig;
  driver: PostgresDriver;
  /** A separate pool for the test's own queries (inspection, adopter SQL). */
  pool: pg.Pool;
  /** A new driver on its own pool against the same schema (another "replica"). */
  newDriver(): PostgresDriver;
  /** `SELECT` helper on the test pool. */
  query<R extends pg.QueryResultRow = pg.QueryResultRow>(text: string, values?: unknown[]): Promise<R[]>;
  drop(): Promise<void>;
}

export function testDatabaseUrl(): string {
  const url = process.env.DATABASE_URL;
  if (!url) throw new Error('DATABASE_URL is not set: run tests with `npm test` (it starts an embedded PostgreSQL)');
  return url;
}

/** Creates a fresh migrated schema; `overrides` are merged into the config (schema is set here). */
export async function createTestDatabase(overrides: ConfigInput = {}): Promise<TestDatabase> {
  const url = testDatabaseUrl();
  const schema = `qb_test_${randomBytes(5).toString('hex')}`;
  // A runner that drops its schemas on Ctrl-C (npm run test:faults) drops this one too.
  const forget = createdSchema(url, schema);
  const config = parseConfig({ ...overrides, database: { ...(overrides.database ?? {}), url, schema } });
  const drivers: PostgresDriver[] = [];
  const newDriver = () => {
    const d = new PostgresDriver({ config, url });
    drivers.push(d);
    return d;
  };
  const driver = newDriver();
  await driver.migrate();
  const pool = new pg.Pool({ connectionString: url, max: 4 });
  pool.on('error', () => {});
  return {
    url,
    schema,
    config,
    driver,
    pool,
    newDriver,
    async query(text, values) {
      return (await pool.query(text, values)).rows;
    },
    async drop() {
      await Promise.all(drivers.map((d) => d.close().catch(() => {})));
      await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      forget();
      await pool.end();
    },
  };
}

/** A database of its own on the test server, migrated with QueueBox's tables in its default schema (as an application has them). */
export interface ScratchDatabase {
  url: string;
  /**
   * Waits up to `waitMs` for every other connection to it to close (a library's or an example's
   * pool may close its sockets after `end()` resolved, or on its idle timeout), then drops it.
   */
  drop(waitMs?: number): Promise<void>;
}

/** Creates a fresh database named `<prefix><random>` and migrates it. */
export async function createScratchDatabase(prefix: string): Promise<ScratchDatabase> {
  const database = `${prefix}${randomBytes(5).toString('hex')}`;
  const serverUrl = testDatabaseUrl();
  const url = new URL(serverUrl);
  url.pathname = `/${database}`;
  const admin = new pg.Pool({ connectionString: serverUrl, max: 1 });
  await admin.query(`CREATE DATABASE "${database}"`);
  const driver = new PostgresDriver({ config: parseConfig({ database: { url: url.href } }), url: url.href });
  await driver.migrate();
  await driver.close();
  return {
    url: url.href,
    async drop(waitMs = 5000) {
      for (const until = Date.now() + waitMs; Date.now() < until; ) {
        const { rows } = await admin.query<{ n: number }>(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = $1`, [database]);
        if (rows[0]!.n === 0) break;
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      await admin.query(`DROP DATABASE IF EXISTS "${database}" WITH (FORCE)`);
      await admin.end();
    },
  };
}
