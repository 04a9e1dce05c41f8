/**
 * The PostgreSQL conformance target: the driver on a fresh test schema plus inspection in PostgreSQL SQL.
 */
import { PostgresDriver } from '../../lib/db/postgres/postgres-driver.ts';
import { createTestDatabase } from '../helpers/database.ts';
import type { ConformanceTarget, InspectedRow } from './driver-conformance.ts';

/**
 * `preparedStatements`: the driver runs its claims as named prepared statements
 * (`database.preparedStatements`); `outboxBatchSize`: the batch size `migrate` makes the outbox
 * claim functions for (`outbox.batchSize`).
 */
export async function createPostgresTarget(options: { preparedStatements?: boolean; outboxBatchSize?: number } = {}): Promise<ConformanceTarget> {
  const db = await createTestDatabase({
    ...(options.preparedStatements ? { database: { preparedStatements: true } } : {}),
    ...(options.outboxBatchSize !== undefined ? { outbox: { batchSize: options.outboxBatchSize } } : {}),
  });
  const extra: PostgresDriver[] = [];
  const table = (name: 'outbox' | 'inbox') => `"${db.schema}"."${db.config.tables[name]}"`;
  return {
    driver: db.driver,
    newDriver(tables) {
      if (!tables) return db.newDriver();
      const driver = new PostgresDriver({ config: { ...db.config, tables: { ...db.config.tables, ...tables } }, url: db.url });
      extra.push(driver);
      return driver;
    },
    async row(name, id) {
      const rows = await db.query<InspectedRow>(`SELECT * FROM ${table(name)} WHERE id = $1`, [id]);
      return rows[0];
    },
    async count(name, state) {
      const rows = await db.query<{ n: string }>(`SELECT count(*) AS n FROM ${table(name)} WHERE $1::text IS NULL OR state = $1`, [state ?? null]);
      return Number(rows[0]!.n);
    },
    async setTime(name, id, column, msFromNow) {
      await db.query(`UPDATE ${table(name)} SET ${column} = clock_timestamp() + ($2::double precision * interval '1 millisecond') WHERE id = $1`, [id, msFromNow]);
    },
    async inTransaction(work, end) {
      const client = await db.pool.connect();
      try {
        await client.query('BEGIN');
        const result = await work(client);
        await client.query(end === 'commit' ? 'COMMIT' : 'ROLLBACK');
        return result;
      } catch (error) {
        await client.query('ROLLBACK').catch(() => {});
        throw error;
      } finally {
        client.release();
      }
    },
    async reset() {
      await db.query(`DELETE FROM ${table('outbox')}; DELETE FROM ${table('inbox')}; DELETE FROM "${db.schema}"."${db.config.tables.maintenance}"`);
    },
    async close() {
      await Promise.all(extra.map((d) => d.close().catch(() => {})));
      await db.drop();
    },
  };
}
