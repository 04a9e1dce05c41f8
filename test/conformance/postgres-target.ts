/**
 * The PostgreSQL conformance target: the driver on a fresh test schema plus inspection in PostgreSQL SQL.
 */
import { PostgresDriver } from '../../lib/db/postgres/postgres-driver.ts';
import { createTestDatabase } from '../helpers/database.ts';
import type { ConformanceTarget, InspectedRow } from './driver-conformance.ts';

/**
 * `preparedStatements`: the driver runs its claims as named prepared statements
 * (`database.preparedStatements`); `outboxBatchSize`: the batch size `migrate` makes the outbox
 * claim functions for (`outbox.batchSize`). The outbox claims one row of a key
 * (`outbox.rowsPerKey: 1`): the contract both dialects share, SQL Server's only setting. Several
 * rows of a key per claim, PostgreSQL's default, have their own tests (test/ordering/key-holders.test.ts,
 * test/ordering/four-claimers.test.ts and the fault suite).
 */
export async function createPostgresTarget(options: { preparedStatements?: boolean; outboxBatchSize?: number } = {}): Promise<ConformanceTarget> {
  const db = await createTestDatabase({
    ...(options.preparedStatements ? { database: { preparedStatements: true } } : {}),
    outbox: { rowsPerKey: 1, ...(options.outboxBatchSize !== undefined ? { batchSize: options.outboxBatchSize } : {}) },
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
    async lockTable(name) {
      const client = await db.pool.connect();
      await client.query('BEGIN');
      await client.query(`LOCK TABLE ${table(name)} IN ACCESS EXCLUSIVE MODE`);
      return async () => {
        await client.query('ROLLBACK');
        client.release();
      };
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
