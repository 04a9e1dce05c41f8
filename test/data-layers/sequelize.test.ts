import { Sequelize, type Transaction } from 'sequelize';
import { enqueue, queueboxTransaction } from '../../lib/data-layers/sequelize.ts';
import { adapterCases } from './adapter-cases.ts';

let sequelize: Sequelize;

adapterCases<Transaction>('sequelize', {
  async open(test) {
    sequelize = new Sequelize(test.url, { dialect: 'postgres', logging: false, pool: { max: 4 } });
  },
  close: () => sequelize.close(),
  transaction: (work) => sequelize.transaction(work),
  // A transaction given its parent is a savepoint in Sequelize.
  nested: (tx, work) => sequelize.transaction({ transaction: tx }, work),
  async ended() {
    const t = await sequelize.transaction();
    await t.commit();
    return t;
  },
  outside: () => ({ handle: sequelize, what: 'the Sequelize instance' }),
  enqueue,
  queueboxTransaction,
});
