/**
 * Counts the transactions a piece of work commits or rolls back, as PostgreSQL itself counts them:
 * `pg_stat_database.xact_commit + xact_rollback` of a database of its own, which nothing else on
 * the server uses (the test server is shared with other test files and other runs).
 *
 * A backend reports its counts when it exits, so `transactionsOf` closes the work's connections
 * (the driver's pool), waits until the server has no backend left on the database, and reads the
 * counters from a connection to another database (whose own transactions are not counted).
 * `npm run bench:latency` counts the idle poller's transactions with it too.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { parseConfig } from '../../lib/config/load-config.ts';
import type { ConfigInput, QueueBoxConfig } from '../../lib/config/schema.ts';
import { PostgresDriver } from '../../lib/db/postgres/postgres-driver.ts';
import { testDatabaseUrl } from './database.ts';
import { createdDatabase } from './drop-on-signal.ts';

export interface CountedDatabase {
  config: QueueBoxConfig;
  /** A driver on a new pool (closed by `transactionsOf`). */
  newDriver(): PostgresDriver;
  /** Runs `work` with a new driver, closes it, and returns what `work` returned and the transactions counted meanwhile. */
  transactionsOf<T>(work: (driver: PostgresDriver) => Promise<T>): Promise<{ result: T; transactions: number }>;
  /**
   * `transactionsOf`, run again while the count is above `budget`, at most `runs` times in all;
   * returns the last run's result and count, and every run's count. The server counts every
   * transaction in the database, not only the work's: in full test runs on a busy server an idle
   * poller's count was seen 4–5 above what it is alone (20 and 21 against 16), though the
   * statements it sends do not vary. A count above the budget in every run is the work's own.
   */
  transactionsWithin<T>(budget: number, work: (driver: PostgresDriver) => Promise<T>, runs?: number): Promise<{ result: T; transactions: number; counts: number[] }>;
  drop(): Promise<void>;
}

/**
 * A new database with QueueBox's tables migrated in it; `overrides` are merged into the config.
 * `serverUrl` (default the tests' server) must be allowed to create databases.
 */
export async function createCountedDatabase(overrides: ConfigInput = {}, serverUrl = testDatabaseUrl()): Promise<CountedDatabase> {
  const name = `qb_count_${randomBytes(5).toString('hex')}`;
  // A runner that drops what it created on Ctrl-C (npm run bench:latency) drops this database too.
  const forget = createdDatabase(serverUrl, name);
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  const admin = new pg.Pool({ connectionString: serverUrl, max: 1 });
  admin.on('error', () => {});
  await admin.query(`CREATE DATABASE "${name}"`);
  const config = parseConfig({ ...overrides, database: { ...(overrides.database ?? {}), url: url.href } });
  const newDriver = () => new PostgresDriver({ config, url: url.href });

  const settled = async (): Promise<number> => {
    for (let i = 0; ; i++) {
      const { rows } = await admin.query<{ n: number }>(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = $1`, [name]);
      if (rows[0]!.n === 0) break;
      if (i >= 100) throw new Error(`connections to ${name} still open after 10 s`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    const { rows } = await admin.query<{ n: string }>(`SELECT (xact_commit + xact_rollback)::text AS n FROM pg_stat_database WHERE datname = $1`, [name]);
    return Number(rows[0]!.n);
  };

  const migrator = newDriver();
  await migrator.migrate();
  await migrator.close();

  const transactionsOf: CountedDatabase['transactionsOf'] = async (work) => {
    const before = await settled();
    const driver = newDriver();
    let result;
    try {
      result = await work(driver);
    } finally {
      await driver.close();
    }
    return { result, transactions: (await settled()) - before };
  };

  return {
    config,
    newDriver,
    transactionsOf,
    async transactionsWithin(budget, work, runs = 3) {
      const counts: number[] = [];
      for (;;) {
        const counted = await transactionsOf(work);
        counts.push(counted.transactions);
        if (counted.transactions <= budget || counts.length >= runs) return { ...counted, counts };
      }
    },
    async drop() {
      await admin.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
      forget();
      await admin.end();
    },
  };
}
