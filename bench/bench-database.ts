/**
 * The PostgreSQL a stand-alone benchmark script runs against: DATABASE_URL, or an embedded
 * PostgreSQL started for the run.
 */
import pg from 'pg';
import { startEmbeddedDatabase } from '../lib/local/embedded-database.ts';

/**
 * Runs `body` with the database's URL and a connected admin client (for seeding and dropping the
 * run's schemas); afterwards closes the client and stops the embedded PostgreSQL, if one was started.
 */
export async function withBenchDatabase<T>(body: (url: string, admin: pg.Client) => Promise<T>): Promise<T> {
  const embedded = process.env.DATABASE_URL ? undefined : await startEmbeddedDatabase();
  const url = process.env.DATABASE_URL ?? embedded!.url;
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  try {
    return await body(url, admin);
  } finally {
    await admin.end();
    await embedded?.stop();
  }
}
