/**
 * The cases every `queuebox/<library>` adapter must pass against real PostgreSQL, through the
 * library's own transaction API (each library test file supplies a `Harness`): commit → one
 * pending row with topic, key, payload and sequence; rollback → no row; the library's nested
 * transaction or savepoint; concurrent transactions on one key in sequence order; the refusal
 * outside a transaction; validation; a duplicate `message.id`; pull `complete` in the same transaction.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import type { CallerExecutor } from '../../lib/db/caller-transaction.ts';
import type { EnqueueMessage } from '../../lib/db/driver.ts';
import { UniqueViolationError, UsageError, ValidationError } from '../../lib/errors.ts';
import type { EnqueueOptions } from '../../lib/outbox/enqueue.ts';
import { createPullClient } from '../../lib/pull/pull-client.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';

/** What a library test provides: its transaction API, and the adapter's two exports. */
export interface Harness<Tx> {
  /** Opens the library (connection, pool, ORM) on the test database. */
  open(db: TestDatabase): Promise<void>;
  close(): Promise<void>;
  /** Runs `work` in a library transaction: commits when it resolves, rolls back when it throws. */
  transaction<T>(work: (tx: Tx) => Promise<T>): Promise<T>;
  /** The library's nested transaction or savepoint inside `tx`, rolled back alone when `work` throws; `undefined` when the library offers none. */
  nested?: <T>(tx: Tx, work: (inner: Tx) => Promise<T>) => Promise<T>;
  /** A transaction the library reports ended (committed), for libraries that keep track; the adapter must refuse it. */
  ended?: () => Promise<Tx>;
  /** The library's non-transaction object (pool, client, database) the adapter must refuse, and what it is. */
  outside(): { handle: unknown; what: string };
  enqueue(tx: Tx, message: EnqueueMessage, options?: EnqueueOptions): Promise<string>;
  queueboxTransaction(tx: Tx): CallerExecutor;
}

class Rollback extends Error {}

/** Registers the shared cases for one adapter. */
export function adapterCases<Tx>(library: string, harness: Harness<Tx>): void {
  describe(`queuebox/${library} against PostgreSQL`, () => {
    let db: TestDatabase;
    let schema: { schema: string };
    const rowsOf = (ids: string[]) =>
      db.query<{ id: string; topic: string; key: string | null; payload: unknown; state: string; sequence: string }>(
        `SELECT id, topic, key, payload, state, sequence FROM "${db.schema}".outbox WHERE id = ANY($1::uuid[]) ORDER BY sequence`,
        [ids],
      );
    const rollingBack = async (work: (tx: Tx) => Promise<void>) => {
      await assert.rejects(harness.transaction(async (tx) => {
        await work(tx);
        throw new Rollback('roll back');
      }), Rollback);
    };

    before(async () => {
      db = await createTestDatabase();
      schema = { schema: db.schema };
      await harness.open(db);
    });
    after(async () => {
      await harness.close();
      await db.drop();
    });

    it('commits one pending row with its topic, key, payload and a sequence after the earlier ones', async () => {
      const first = await harness.transaction((tx) => harness.enqueue(tx, { topic: 'order.paid', key: 'o-1', payload: { orderId: 'o-1', total: 12.5 } }, schema));
      const second = await harness.transaction((tx) => harness.enqueue(tx, { topic: 'order.shipped', key: 'o-1', payload: { orderId: 'o-1' }, headers: { h: 'v' } }, schema));
      const rows = await rowsOf([first, second]);
      assert.deepEqual(rows.map(({ sequence: _, ...r }) => r), [
        { id: first, topic: 'order.paid', key: 'o-1', payload: { orderId: 'o-1', total: 12.5 }, state: 'pending' },
        { id: second, topic: 'order.shipped', key: 'o-1', payload: { orderId: 'o-1' }, state: 'pending' },
      ]);
      assert.ok(BigInt(rows[0]!.sequence) < BigInt(rows[1]!.sequence), 'the later enqueue has the higher sequence');
    });

    it('leaves no row when the transaction rolls back', async () => {
      let id = '';
      await rollingBack(async (tx) => {
        id = await harness.enqueue(tx, { topic: 'order.cancelled', key: 'o-2', payload: { orderId: 'o-2' } }, schema);
      });
      assert.match(id, /^[0-9a-f-]{36}$/);
      assert.deepEqual(await rowsOf([id]), []);
    });

    it('keeps a row only when its nested transaction or savepoint commits, as the library documents', async (t) => {
      const nested = harness.nested;
      if (nested === undefined) return t.skip(`${library} offers no nested transaction`);
      const ids: Record<string, string> = {};
      await harness.transaction(async (tx) => {
        ids.outer = await harness.enqueue(tx, { topic: 'nested.outer', payload: {} }, schema);
        await assert.rejects(nested(tx, async (inner) => {
          ids.undone = await harness.enqueue(inner, { topic: 'nested.undone', payload: {} }, schema);
          throw new Rollback('roll the savepoint back');
        }), Rollback);
        await nested(tx, async (inner) => {
          ids.kept = await harness.enqueue(inner, { topic: 'nested.kept', payload: {} }, schema);
        });
      });
      assert.deepEqual((await rowsOf(Object.values(ids))).map((r) => r.topic), ['nested.outer', 'nested.kept']);
    });

    it('numbers concurrent transactions on one key in enqueue order, whatever order they commit in', async () => {
      let releaseFirst!: () => void;
      const firstMayCommit = new Promise<void>((resolve) => (releaseFirst = resolve));
      let firstEnqueued!: () => void;
      const firstHasEnqueued = new Promise<void>((resolve) => (firstEnqueued = resolve));
      const first = harness.transaction(async (tx) => {
        const id = await harness.enqueue(tx, { topic: 'race', key: 'hot', payload: { n: 1 } }, schema);
        firstEnqueued();
        await firstMayCommit;
        return id;
      });
      await firstHasEnqueued;
      const second = await harness.transaction((tx) => harness.enqueue(tx, { topic: 'race', key: 'hot', payload: { n: 2 } }, schema));
      releaseFirst();
      const rows = await rowsOf([await first, second]);
      assert.deepEqual(rows.map((r) => r.payload), [{ n: 1 }, { n: 2 }], 'the first enqueue has the lower sequence though it committed last');
    });

    it('refuses the library object that is not a transaction with a UsageError, writing nothing', async () => {
      const { handle, what } = harness.outside();
      const before = await db.query<{ n: string }>(`SELECT count(*) AS n FROM "${db.schema}".outbox`);
      await assert.rejects(harness.enqueue(handle as Tx, { topic: 'outside', payload: {} }, schema), (error: unknown) => {
        assert.ok(error instanceof UsageError, `${what}: UsageError, got ${String(error)}`);
        assert.match(error.message, /transaction/);
        return true;
      });
      assert.deepEqual(await db.query(`SELECT count(*) AS n FROM "${db.schema}".outbox`), before);
    });

    it('leaves no row when an enqueue that was not awaited is followed by a rollback', async () => {
      let pending: Promise<string> | undefined;
      await rollingBack(async (tx) => {
        pending = harness.enqueue(tx, { topic: 'not.awaited', payload: {} }, schema);
        // Not awaited: the transaction ends while the enqueue is on its way.
        pending.catch(() => {});
      });
      const outcome = await pending!.then(
        (id) => ({ id }),
        (error: unknown) => ({ error }),
      );
      assert.deepEqual(await db.query(`SELECT id FROM "${db.schema}".outbox WHERE topic = 'not.awaited'`), [], 'no row outlived the rolled-back transaction');
      // A library that reports its transaction ended may refuse it; the error never claims the row committed.
      if ('error' in outcome && outcome.error instanceof UsageError) assert.doesNotMatch(outcome.error.message, /so it committed on its own/);
    });

    it('refuses a transaction the library reports ended, writing nothing', async (t) => {
      const ended = harness.ended;
      if (ended === undefined) return t.skip(`${library} does not report an ended transaction`);
      const before = await db.query<{ n: string }>(`SELECT count(*) AS n FROM "${db.schema}".outbox`);
      await assert.rejects(harness.enqueue(await ended(), { topic: 'ended', payload: {} }, schema), (e: unknown) => e instanceof UsageError && /outside a transaction/.test(e.message));
      assert.deepEqual(await db.query(`SELECT count(*) AS n FROM "${db.schema}".outbox`), before);
    });

    it('validates like enqueue: the error names the field and nothing is written', async () => {
      await rollingBack(async (tx) => {
        await assert.rejects(harness.enqueue(tx, { topic: '', payload: {} }, schema), (e: unknown) => e instanceof ValidationError && e.field === 'message.topic');
        await assert.rejects(harness.enqueue(tx, { topic: 't', payload: {} }, { schema: 'Bad Schema' }), (e: unknown) => e instanceof ValidationError && e.field === 'options.schema');
      });
    });

    it('refuses a message.id already in the table with a UniqueViolationError naming message.id, the library error its cause', async () => {
      const id = randomUUID();
      await harness.transaction((tx) => harness.enqueue(tx, { topic: 'dup.first', payload: {}, id }, schema));
      let error: unknown;
      await harness
        .transaction(async (tx) => {
          error = await harness.enqueue(tx, { topic: 'dup.second', payload: {}, id }, schema).catch((e: unknown) => e);
        })
        .catch(() => {}); // the failed INSERT aborted the transaction: the library's COMMIT may fail
      assert.ok(error instanceof UniqueViolationError, `UniqueViolationError, got ${String(error)}`);
      assert.match(error.message, new RegExp(`^message\\.id ${id} is already the id of an outbox row`));
      assert.ok(error.cause !== undefined, 'the original error is its cause');
      assert.deepEqual(await db.query(`SELECT topic FROM "${db.schema}".outbox WHERE id = $1`, [id]), [{ topic: 'dup.first' }]);
    });

    it('completes a pull row in the library transaction: committed → processed, rolled back → still claimed', async () => {
      const pull = createPullClient(db.driver);
      for (const key of ['commit', 'rollback']) {
        await db.driver.inboxInsert({ source: 'partner', idempotencyKey: `${library}-${key}`, aggregateId: key, payload: { key }, consumption: 'pull' });
      }
      const claimed = await pull.claim('partner', { batch: 10, leaseMs: 60_000 });
      const claimOf = (key: string) => claimed.find((m) => m.idempotencyKey === `${library}-${key}`)!.claim;
      assert.deepEqual(await harness.transaction((tx) => pull.complete(harness.queueboxTransaction(tx), claimOf('commit'))), { ok: true });
      await rollingBack(async (tx) => {
        assert.deepEqual(await pull.complete(harness.queueboxTransaction(tx), claimOf('rollback')), { ok: true });
      });
      const states = await db.query<{ idempotency_key: string; state: string }>(`SELECT idempotency_key, state FROM "${db.schema}".inbox ORDER BY idempotency_key`);
      assert.deepEqual(states, [
        { idempotency_key: `${library}-commit`, state: 'processed' },
        { idempotency_key: `${library}-rollback`, state: 'processing' },
      ]);
      const lost = await harness.transaction((tx) => pull.complete(harness.queueboxTransaction(tx), { ...claimOf('rollback'), token: '00000000-0000-4000-8000-000000000000' }));
      assert.deepEqual(lost, { ok: false, reason: 'ownership-lost' });
    });

    it('resolves ownership-lost, never throws, when another transaction holds the row until the lease ends (the library wraps the lock timeout)', async () => {
      const pull = createPullClient(db.driver);
      await db.driver.inboxInsert({ source: 'held', idempotencyKey: `${library}-held`, aggregateId: 'held', payload: {}, consumption: 'pull' });
      const [message] = await pull.claim('held', { batch: 1, leaseMs: 1500 });
      const holder = await db.pool.connect();
      try {
        await holder.query('BEGIN');
        await holder.query(`SELECT 1 FROM "${db.schema}".inbox WHERE id = $1 FOR UPDATE`, [message!.id]);
        // The failed statement aborts the library's transaction (PostgreSQL's rule), which the
        // library may then report at its end; what `complete` itself answers is the point here.
        let outcome: unknown;
        await harness
          .transaction(async (tx) => {
            outcome = await pull.complete(harness.queueboxTransaction(tx), message!.claim).catch((error: unknown) => error);
          })
          .catch(() => {});
        assert.deepEqual(outcome, { ok: false, reason: 'ownership-lost' });
      } finally {
        await holder.query('ROLLBACK');
        holder.release();
      }
    });
  });
}
