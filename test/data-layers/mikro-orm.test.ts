import { MikroORM, type EntityManager } from '@mikro-orm/postgresql';
import { enqueue, queueboxTransaction } from '../../lib/data-layers/mikro-orm.ts';
import { adapterCases } from './adapter-cases.ts';

let orm: MikroORM;

adapterCases<EntityManager>('mikro-orm', {
  async open(test) {
    orm = await MikroORM.init({ clientUrl: test.url, entities: [], discovery: { warnWhenNoEntities: false }, pool: { max: 4 }, debug: false });
  },
  close: () => orm.close(true),
  transaction: (work) => orm.em.fork().transactional(work),
  // A transactional block inside a transaction is a savepoint in MikroORM.
  nested: (tx, work) => tx.transactional(work),
  outside: () => ({ handle: orm.em.fork(), what: 'an entity manager outside a transaction' }),
  enqueue,
  queueboxTransaction,
});
