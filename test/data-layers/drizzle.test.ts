import { drizzle as drizzlePg } from 'drizzle-orm/node-postgres';
import { drizzle as drizzlePostgresJs } from 'drizzle-orm/postgres-js';
import pg from 'pg';
import postgres from 'postgres';
import { enqueue, queueboxTransaction, type DrizzleTransaction } from '../../lib/data-layers/drizzle.ts';
import { adapterCases } from './adapter-cases.ts';

/** Both drivers Drizzle offers for PostgreSQL, through the same adapter. */
for (const driver of ['node-postgres', 'postgres-js'] as const) {
  let close: () => Promise<void>;
  let db: ReturnType<typeof drizzlePg> | ReturnType<typeof drizzlePostgresJs>;
  adapterCases<DrizzleTransaction>(`drizzle (${driver})`, {
    async open(test) {
      if (driver === 'node-postgres') {
        const pool = new pg.Pool({ connectionString: test.url, max: 4 });
        db = drizzlePg(pool);
        close = () => pool.end();
      } else {
        const client = postgres(test.url, { max: 4, onnotice: () => {} });
        db = drizzlePostgresJs(client);
        close = () => client.end();
      }
    },
    close: () => close(),
    transaction: (work) => db.transaction((tx) => work(tx as DrizzleTransaction)),
    // A transaction inside a transaction is a savepoint in Drizzle.
    nested: (tx, work) => tx.transaction((inner) => work(inner)),
    outside: () => ({ handle: db, what: 'the Drizzle database object' }),
    // On node-postgres the connection under a transaction that has ended reports it (postgres.js reports nothing).
    ...(driver === 'node-postgres'
      ? {
          async ended() {
            let kept: DrizzleTransaction | undefined;
            await db.transaction(async (tx) => {
              kept = tx as DrizzleTransaction;
            });
            return kept!;
          },
        }
      : {}),
    enqueue,
    queueboxTransaction,
  });
}
