/**
 * `queuebox/drizzle` on node-postgres over an application's `pg` older than 8.21 (the `pg-8-20`
 * devDependency, an alias of `pg@8.20.0`), whose clients have no `getTransactionStatus()`: the
 * adapter cannot ask the connection what the server last reported, so the transaction check goes
 * to the server in the same round trip as the INSERT. The shared cases (a transaction used after
 * its callback returned is refused; an enqueue not awaited before a rollback leaves no row), and,
 * first, a stale `tx` and enqueues not awaited before `tx.rollback()` on each of the pool's
 * connections, from the first Drizzle statement of the process on (once loading drizzle-orm's
 * `sql` builder delayed it past the rollback); a pull `complete` not awaited before `tx.rollback()`
 * likewise.
 */
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { after, before, describe, it } from 'node:test';
import { drizzle } from 'drizzle-orm/node-postgres';
import type pgTypes from 'pg';
import { enqueue, queueboxTransaction, type DrizzleTransaction } from '../../lib/data-layers/drizzle.ts';
import { UsageError } from '../../lib/errors.ts';
import { createPullClient } from '../../lib/pull/pull-client.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { adapterCases } from './adapter-cases.ts';
import { drizzleHarness, nodePostgres } from './drizzle-harness.ts';

const oldPg = createRequire(import.meta.url)('pg-8-20') as typeof pgTypes;

describe('the pg-8-20 devDependency', () => {
  it('is pg 8.20, whose clients report no transaction status', () => {
    assert.equal((createRequire(import.meta.url)('pg-8-20/package.json') as { version: string }).version, '8.20.0');
    assert.equal(typeof (new oldPg.Client() as { getTransactionStatus?: unknown }).getTransactionStatus, 'undefined');
  });
});

// First in the file: its first enqueue is the first Drizzle statement of the process.
describe('queuebox/drizzle on node-postgres over pg 8.20, on every connection of the pool', () => {
  let test: TestDatabase;
  let pool2: pgTypes.Pool;
  let db2: ReturnType<typeof drizzle>;
  const schema = () => ({ schema: test.schema });
  const rows = async (topic: string) => Number((await test.query<{ n: string }>(`SELECT count(*) AS n FROM "${test.schema}".outbox WHERE topic = $1`, [topic]))[0]!.n);

  before(async () => {
    test = await createTestDatabase();
    pool2 = new oldPg.Pool({ connectionString: test.url, max: 2 });
    db2 = drizzle({ client: pool2 });
  });
  after(async () => {
    await pool2.end();
    await test.drop();
  });

  it('leaves no row of an enqueue not awaited before tx.rollback(), the first statement of the process included', async () => {
    for (let i = 0; i < 4; i++) {
      const topic = `not-awaited.${i}`;
      let pending: Promise<string> | undefined;
      await assert.rejects(
        db2.transaction(async (tx) => {
          pending = enqueue(tx as DrizzleTransaction, { topic, payload: {} }, schema());
          pending.catch(() => {});
          tx.rollback();
        }),
      );
      await pending!.catch(() => {});
      assert.equal(await rows(topic), 0, `call ${i + 1}: nothing outlived the rollback`);
    }
  });

  it('leaves a pull row claimed when its complete was not awaited before tx.rollback()', async () => {
    const pull = createPullClient(test.driver);
    for (let i = 0; i < 4; i++) {
      await test.driver.inboxInsert({ source: 'not-awaited', idempotencyKey: `not-awaited-${i}`, aggregateId: `a${i}`, payload: {}, consumption: 'pull' });
    }
    const claimed = await pull.claim('not-awaited', { batch: 4, leaseMs: 60_000 });
    assert.equal(claimed.length, 4);
    for (const message of claimed) {
      let pending: Promise<unknown> | undefined;
      await assert.rejects(
        db2.transaction(async (tx) => {
          pending = pull.complete(queueboxTransaction(tx as DrizzleTransaction), message.claim);
          pending.catch(() => {});
          tx.rollback();
        }),
      );
      await pending!.catch(() => {});
      const [row] = await test.query<{ state: string }>(`SELECT state FROM "${test.schema}".inbox WHERE id = $1`, [message.id]);
      assert.equal(row!.state, 'processing', `${message.idempotencyKey}: rolled back with the transaction, not committed on its own`);
    }
  });

  it('refuses a tx used after its callback returned, writing nothing', async () => {
    let kept: DrizzleTransaction | undefined;
    await db2.transaction(async (tx) => {
      kept = tx as DrizzleTransaction;
    });
    await assert.rejects(enqueue(kept!, { topic: 'stale', payload: {} }, schema()), (error: unknown) => error instanceof UsageError && /outside a transaction/.test(error.message));
    assert.equal(await rows('stale'), 0);
  });
});

adapterCases('drizzle (node-postgres, pg 8.20)', drizzleHarness(nodePostgres(oldPg), { reportsEnded: true }));
