/**
 * `queuebox/postgres-js` against postgres.js 3 (the `postgres-3` devDependency, an alias of
 * `postgres@3.4.9`): the peer range takes ^3.4.9 and ^4.1.1, and both majors run the same cases.
 */
import postgres from 'postgres-3';
import { enqueue, queueboxTransaction, type PostgresJsTransaction } from '../../lib/data-layers/postgres-js.ts';
import { adapterCases } from './adapter-cases.ts';

let sql: postgres.Sql;

adapterCases<PostgresJsTransaction>('postgres-js (postgres.js 3.4.9)', {
  async open(test) {
    sql = postgres(test.url, { max: 4, onnotice: () => {} });
  },
  close: () => sql.end(),
  transaction: async (work) => (await sql.begin((tx) => work(tx as never))) as never,
  nested: async (tx, work) => (await (tx as unknown as postgres.TransactionSql).savepoint((inner) => work(inner as never))) as never,
  outside: () => ({ handle: sql, what: 'the top-level sql (a pool)' }),
  enqueue,
  queueboxTransaction,
});
