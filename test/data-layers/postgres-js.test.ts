import postgres from 'postgres';
import { enqueue, queueboxTransaction, type PostgresJsTransaction } from '../../lib/data-layers/postgres-js.ts';
import { adapterCases } from './adapter-cases.ts';

let sql: postgres.Sql;

adapterCases<PostgresJsTransaction>('postgres-js', {
  async open(test) {
    sql = postgres(test.url, { max: 4, onnotice: () => {} });
  },
  close: () => sql.end(),
  transaction: async (work) => (await sql.begin((tx) => work(tx))) as never,
  nested: async (tx, work) => (await (tx as postgres.TransactionSql).savepoint((inner) => work(inner))) as never,
  outside: () => ({ handle: sql, what: 'the top-level sql (a pool)' }),
  enqueue,
  queueboxTransaction,
});
