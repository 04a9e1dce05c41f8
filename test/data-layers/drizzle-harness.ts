/**
 * The shared-cases harness of `queuebox/drizzle` (`adapter-cases.ts`), for each database Drizzle
 * is opened on: node-postgres over the `pg` in use (the current one, or the `pg-8-20`
 * devDependency) and postgres.js. Not a test file itself (`test/run.ts` runs `*.test.ts` only).
 */
import { drizzle as drizzlePg } from 'drizzle-orm/node-postgres';
import type { drizzle as drizzlePostgresJs } from 'drizzle-orm/postgres-js';
import type pgTypes from 'pg';
import { enqueue, queueboxTransaction, type DrizzleTransaction } from '../../lib/data-layers/drizzle.ts';
import type { Harness } from './adapter-cases.ts';

type DrizzleDatabase = ReturnType<typeof drizzlePg> | ReturnType<typeof drizzlePostgresJs>;

/** A Drizzle database on the test database's URL, and how to close what it runs on. */
export interface DrizzleConnection {
  db: DrizzleDatabase;
  close(): Promise<void>;
}

/** Drizzle on node-postgres over a pool of `pg` (any version: the module is passed in). */
export function nodePostgres(pg: typeof pgTypes): (url: string) => DrizzleConnection {
  return (url) => {
    const pool = new pg.Pool({ connectionString: url, max: 4 });
    return { db: drizzlePg({ client: pool }), close: () => pool.end() };
  };
}

/**
 * The harness over `connect`. `reportsEnded`: the library tells a transaction that has ended
 * (node-postgres does, postgres.js reports nothing), so the `ended` case runs.
 */
export function drizzleHarness(connect: (url: string) => DrizzleConnection, options: { reportsEnded: boolean }): Harness<DrizzleTransaction> {
  let connection: DrizzleConnection;
  return {
    async open(test) {
      connection = connect(test.url);
    },
    close: () => connection.close(),
    transaction: (work) => connection.db.transaction((tx) => work(tx as DrizzleTransaction)),
    // A transaction inside a transaction is a savepoint in Drizzle.
    nested: (tx, work) => tx.transaction((inner) => work(inner)),
    outside: () => ({ handle: connection.db, what: 'the Drizzle database object' }),
    ...(options.reportsEnded
      ? {
          async ended() {
            let kept: DrizzleTransaction | undefined;
            await connection.db.transaction(async (tx) => {
              kept = tx as DrizzleTransaction;
            });
            return kept!;
          },
        }
      : {}),
    enqueue,
    queueboxTransaction,
  };
}
