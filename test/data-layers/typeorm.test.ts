import { DataSource, type EntityManager } from 'typeorm';
import { enqueue, queueboxTransaction } from '../../lib/data-layers/typeorm.ts';
import { adapterCases } from './adapter-cases.ts';

let dataSource: DataSource;

adapterCases<EntityManager>('typeorm', {
  async open(test) {
    dataSource = new DataSource({ type: 'postgres', url: test.url, entities: [], poolSize: 4 });
    await dataSource.initialize();
  },
  close: () => dataSource.destroy(),
  transaction: (work) => dataSource.transaction(work),
  // A transaction started on the transaction's manager is a savepoint in TypeORM.
  nested: (tx, work) => tx.transaction(work),
  async ended() {
    const runner = dataSource.createQueryRunner();
    await runner.startTransaction();
    await runner.commitTransaction();
    await runner.release();
    return runner.manager;
  },
  outside: () => ({ handle: dataSource.manager, what: 'dataSource.manager' }),
  enqueue,
  queueboxTransaction,
});
