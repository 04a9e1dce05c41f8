import { Kysely, PostgresDialect, type ControlledTransaction } from 'kysely';
import pg from 'pg';
import { enqueue, queueboxTransaction } from '../../lib/data-layers/kysely.ts';
import { adapterCases } from './adapter-cases.ts';

let db: Kysely<Record<string, never>>;

adapterCases<ControlledTransaction<Record<string, never>, string[]>>('kysely', {
  async open(test) {
    db = new Kysely({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: test.url, max: 4 }) }) });
  },
  close: () => db.destroy(),
  // A controlled transaction, so that the nested case can use Kysely's savepoint API.
  async transaction(work) {
    const trx = await db.startTransaction().execute();
    try {
      const result = await work(trx);
      await trx.commit().execute();
      return result;
    } catch (error) {
      await trx.rollback().execute();
      throw error;
    }
  },
  async nested(tx, work) {
    const name = `qb_nested_${Math.random().toString(36).slice(2, 8)}`;
    const trx = await tx.savepoint(name).execute();
    try {
      const result = await work(trx);
      await trx.releaseSavepoint(name).execute();
      return result;
    } catch (error) {
      await trx.rollbackToSavepoint(name).execute();
      throw error;
    }
  },
  async ended() {
    const trx = await db.startTransaction().execute();
    await trx.commit().execute();
    return trx;
  },
  outside: () => ({ handle: db, what: 'a Kysely instance' }),
  enqueue,
  queueboxTransaction,
});
