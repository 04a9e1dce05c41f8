import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import type pg from 'pg';
import { enqueue } from '../../lib/index.ts';
import { outboxClaimMany } from '../../lib/db/postgres/outbox-queries.ts';
import { inboxClaimPushMany } from '../../lib/db/postgres/inbox-queries.ts';
import { pullClaimMany } from '../../lib/db/postgres/pull-queries.ts';
import { outboxClaimPaths } from '../helpers/claim-paths.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';

/**
 * The race: claim A takes key K's row 6 as its head and has not committed; row 5 of K (lower
 * sequence, written by another transaction) commits; claim B then sees row 5 pending and row 6 still
 * pending. B must not put row 5 in flight beside row 6. A's transaction is held open by the test, so
 * the interleaving is exact, not left to timing.
 */
const CLAIM_PATHS = outboxClaimPaths(10);

for (const { path, overrides, functions } of CLAIM_PATHS) describe(`a claim beside an uncommitted claim of a later row of the same key (${path})`, () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase(overrides);
  });
  after(async () => db.drop());

  /** A pool of one client whose COMMIT waits until `commit()` is called. */
  async function heldPool(): Promise<{ pool: pg.Pool; commit: () => void; atCommit: Promise<void>; release: () => void }> {
    const client = await db.pool.connect();
    let commit!: () => void;
    let reached!: () => void;
    const gate = new Promise<void>((resolve) => (commit = resolve));
    /** Settles when the claim has run its statements and asks to commit: its rows are chosen. */
    const atCommit = new Promise<void>((resolve) => (reached = resolve));
    const held = {
      query: async (text: string, values?: unknown[]) => {
        if (text === 'COMMIT') {
          reached();
          await gate;
        }
        return client.query(text, values);
      },
      release: () => {},
    };
    return { pool: { connect: async () => held, options: {} } as unknown as pg.Pool, commit, atCommit, release: () => client.release() };
  }

  /** True when `promise` has not settled after `ms`. */
  /** Enqueues in a transaction of its own (committed on return). */
  async function enqueueNow(message: Parameters<typeof enqueue>[1], options: Parameters<typeof enqueue>[2]): Promise<string> {
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      const id = await enqueue(client, message, options);
      await client.query('COMMIT');
      return id;
    } catch (error) {
      await client.query('ROLLBACK');
      throw error;
    } finally {
      client.release();
    }
  }

  async function stillWaiting(promise: Promise<unknown>, ms: number): Promise<boolean> {
    return Promise.race([promise.then(() => false), sleep(ms).then(() => true)]);
  }

  it('outbox: the second claim leaves the key alone and still claims the rest of its batch', async () => {
    const ctx = db.driver.ctx;
    const early = await db.pool.connect();
    const a = await db.pool.connect();
    try {
      await early.query('BEGIN');
      const row5 = await enqueue(early, { topic: 't', key: 'K', payload: { n: 5 } }, { schema: db.schema });
      const row6 = await enqueueNow({ topic: 't', key: 'K', payload: { n: 6 } }, { schema: db.schema });
      await a.query('BEGIN');
      const claimA = await outboxClaimMany({ ...ctx, pool: a as unknown as pg.Pool }, { limit: 10, leaseMs: 60_000 });
      assert.deepEqual(claimA.map((r) => r.id), [row6], 'A takes row 6: row 5 is not committed yet');
      await early.query('COMMIT');
      const other = await enqueueNow({ topic: 't', key: 'J', payload: {} }, { schema: db.schema });
      // an adopter's plain-SQL insert with an empty key: keyless
      const [{ id: keyless }] = (await db.pool.query<{ id: string }>(`INSERT INTO "${db.schema}".outbox (topic, key, payload) VALUES ('t', '', '{}') RETURNING id`)).rows as [{ id: string }];

      const claimB = db.driver.outboxClaimMany({ limit: 10, leaseMs: 60_000 });
      assert.equal(await stillWaiting(claimB, 300), true, 'B saw row 5 as the head of K and waits for A at the in-flight index');
      await a.query('COMMIT');
      const rowsB = await claimB;
      assert.deepEqual(rowsB.map((r) => r.id).sort(), [other, keyless].sort(), 'B claims its other rows, not row 5');
      const inFlight = await db.query<{ id: string }>(`SELECT id FROM "${db.schema}".outbox WHERE key = 'K' AND state = 'processing'`);
      assert.deepEqual(inFlight.map((r) => r.id), [row6]);

      assert.deepEqual(await db.driver.outboxMarkSentMany({ claims: [{ id: row6, token: claimA[0]!.claimToken }] }), [row6]);
      assert.deepEqual((await db.driver.outboxClaimMany({ limit: 10, leaseMs: 60_000 })).map((r) => r.id), [row5]);
      assert.equal(db.driver.ctx.claimFunctions?.missing.size, functions ? 0 : undefined, `the claims went through ${path}`);
    } finally {
      early.release();
      a.release();
    }
  });

  it('inbox relay: the second claim waits for the first and leaves the aggregate alone', async () => {
    const ctx = db.driver.ctx;
    const message = (key: string, source = 'shop') => ({ source, idempotencyKey: key, aggregateId: 'order-9', eventType: 'e', payload: {}, consumption: 'push' as const });
    const early = await db.pool.connect();
    const held = await heldPool();
    try {
      await early.query('BEGIN');
      const row5 = await db.driver.inboxInsert(message('r5'), early);
      const row6 = await db.driver.inboxInsert(message('r6'));
      const claimA = inboxClaimPushMany({ ...ctx, pool: held.pool }, { limit: 10, leaseMs: 60_000 });
      await held.atCommit;
      await early.query('COMMIT');
      const other = await db.driver.inboxInsert(message('r1', 'crm'));
      const claimB = db.driver.inboxClaimPushMany({ limit: 10, leaseMs: 60_000 });
      assert.equal(await stillWaiting(claimB, 300), true, 'B waits for A');
      held.commit();
      assert.deepEqual((await claimA).map((r) => r.id), [row6.id]);
      assert.deepEqual((await claimB).map((r) => r.id), [other.id], 'the same aggregate id of another source moves; row 5 waits');
      const inFlight = await db.query<{ id: string }>(`SELECT id FROM "${db.schema}".inbox WHERE source = 'shop' AND aggregate_id = 'order-9' AND state = 'processing'`);
      assert.deepEqual(inFlight.map((r) => r.id), [row6.id]);
      assert.ok(row5.id);
    } finally {
      early.release();
      held.release();
    }
  });

  it('pull: the second claim of the source waits for the first and leaves the aggregate alone', async () => {
    const ctx = db.driver.ctx;
    const message = (key: string) => ({ source: 'jobs', idempotencyKey: key, aggregateId: 'acct-1', eventType: 'e', payload: {}, consumption: 'pull' as const });
    const early = await db.pool.connect();
    const held = await heldPool();
    try {
      await early.query('BEGIN');
      const row5 = await db.driver.inboxInsert(message('p5'), early);
      const row6 = await db.driver.inboxInsert(message('p6'));
      const claimA = pullClaimMany({ ...ctx, pool: held.pool }, { source: 'jobs', limit: 10, leaseMs: 60_000 });
      await held.atCommit;
      await early.query('COMMIT');
      const claimB = db.driver.pullClaimMany({ source: 'jobs', limit: 10, leaseMs: 60_000 });
      assert.equal(await stillWaiting(claimB, 300), true, 'B waits for A');
      held.commit();
      assert.deepEqual((await claimA).map((r) => r.id), [row6.id]);
      assert.deepEqual(await claimB, [], 'row 5 waits behind row 6 in flight');
      const inFlight = await db.query<{ id: string }>(`SELECT id FROM "${db.schema}".inbox WHERE aggregate_id = 'acct-1' AND state = 'processing'`);
      assert.deepEqual(inFlight.map((r) => r.id), [row6.id]);
      assert.ok(row5.id);
    } finally {
      early.release();
      held.release();
    }
  });
});
