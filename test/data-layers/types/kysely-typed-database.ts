/**
 * Type-checked only (test/data-layers/strict-types.test.ts), never run: `queuebox/kysely` takes
 * every documented transaction form of a Kysely with a typed database — `db.transaction()`'s, a
 * controlled transaction from `db.startTransaction()` and a savepoint of one — and refuses the
 * `Kysely` instance itself.
 */
import type { Generated, Kysely } from 'kysely';
import { enqueue, queueboxTransaction } from '../../../lib/data-layers/kysely.ts';

interface Database {
  orders: { id: Generated<number>; name: string };
}

const message = { topic: 'order.paid', payload: { id: 1 } };

export async function typedDatabase(db: Kysely<Database>): Promise<void> {
  await db.transaction().execute(async (trx) => {
    await enqueue(trx, message);
    queueboxTransaction(trx);
  });
  const controlled = await db.startTransaction().execute();
  await enqueue(controlled, message);
  await enqueue<Database>(controlled, message);
  queueboxTransaction(controlled);
  const savepoint = await controlled.savepoint('before_outbox').execute();
  await enqueue(savepoint, message);
  // @ts-expect-error the Kysely instance is not a transaction
  await enqueue(db, message);
}
