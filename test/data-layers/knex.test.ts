import knex, { type Knex } from 'knex';
import { enqueue, queueboxTransaction } from '../../lib/data-layers/knex.ts';
import { adapterCases } from './adapter-cases.ts';

let db: Knex;

adapterCases<Knex.Transaction>('knex', {
  async open(test) {
    db = knex({ client: 'pg', connection: test.url, pool: { min: 0, max: 4 } });
  },
  close: () => db.destroy(),
  transaction: (work) => db.transaction(work),
  // A transaction started from a transaction is a savepoint in Knex.
  nested: (tx, work) => tx.transaction(work),
  async ended() {
    const trx = await db.transaction();
    await trx.commit();
    return trx;
  },
  outside: () => ({ handle: db, what: 'the knex instance' }),
  enqueue,
  queueboxTransaction,
});
