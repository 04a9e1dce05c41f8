import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { inboxClaimPushMany } from '../../lib/db/postgres/inbox-queries.ts';
import type { InboxRow } from '../../lib/db/driver.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';

const CLAIMERS = 3;

/**
 * The relay claim lock (`pg_advisory_xact_lock` on the inbox table) makes relay claims run one
 * after the other, each statement with a snapshot taken after every earlier claim committed.
 * The race it closes: claim A takes row 6 of an aggregate as its head and has not committed;
 * row 5 of the aggregate (lower sequence, its insert committed late) commits; several relays
 * then claim at once. Each must see row 6 in flight on its first statement — never take row 5
 * beside it, and never run into A at the unique index of rows in flight (which would refuse
 * row 5 only once A commits, and make that claim run its statement again).
 *
 * A's transaction is held open by the test, and A commits only once every other claim is either
 * done or waiting for a lock, so the interleaving is exact, not left to timing.
 */
describe('several relay claims beside an uncommitted claim (PostgreSQL)', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase();
  });
  after(async () => db.drop());

  /** A pool of one client whose COMMIT waits until `commit()` is called; `atCommit` settles when the COMMIT is sent. */
  async function heldPool(): Promise<{ pool: pg.Pool; atCommit: Promise<void>; commit: () => void; release: () => void }> {
    const client = await db.pool.connect();
    let commit!: () => void;
    let reached!: () => void;
    const gate = new Promise<void>((resolve) => (commit = resolve));
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
    return { pool: { connect: async () => held, options: {} } as unknown as pg.Pool, atCommit, commit, release: () => client.release() };
  }

  /** A pool of one client that counts the claim statements sent through it; `pid` is its backend. */
  async function countingPool(): Promise<{ pool: pg.Pool; pid: number; statements: () => number; release: () => Promise<void> }> {
    // a connection of its own (the test pool has four)
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    const [{ pid }] = (await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows as [{ pid: number }];
    let statements = 0;
    const counted = {
      query: async (text: string, values?: unknown[]) => {
        if (text.includes('open_aggregates')) statements++;
        return client.query(text, values);
      },
      release: () => {},
    };
    return { pool: { connect: async () => counted, options: {} } as unknown as pg.Pool, pid, statements: () => statements, release: () => client.end() };
  }

  it(`${CLAIMERS} claims at once: each sees the uncommitted claim's row in flight on its first statement, none takes the late row beside it`, async () => {
    const ctx = db.driver.ctx;
    const message = (key: string, aggregateId: string | null) => ({ source: 'shop', idempotencyKey: key, aggregateId, eventType: 'e', payload: {}, consumption: 'push' as const });
    const early = await db.pool.connect();
    const held = await heldPool();
    const claimers = await Promise.all(Array.from({ length: CLAIMERS }, () => countingPool()));
    try {
      await early.query('BEGIN');
      const row5 = await db.driver.inboxInsert(message('r5', 'order-9'), early);
      const row6 = await db.driver.inboxInsert(message('r6', 'order-9'));
      const claimA = inboxClaimPushMany({ ...ctx, pool: held.pool }, { limit: 1, leaseMs: 60_000 });
      // A's claim statement has run (row 6 is locked by it) and waits at COMMIT
      await held.atCommit;
      await early.query('COMMIT');
      for (let n = 0; n < 2 * CLAIMERS; n++) await db.driver.inboxInsert(message(`other-${n}`, n % 2 === 0 ? `other-${n}` : null));

      const settled = new Set<number>();
      const claims = claimers.map((c, i) =>
        inboxClaimPushMany({ ...ctx, pool: c.pool }, { limit: 10, leaseMs: 60_000 }).finally(() => settled.add(i)),
      );
      // every other claim is done or waits for a lock (the claim lock, or A at the index)
      for (;;) {
        const waiting = await db.query<{ pid: number }>(`SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND pid = ANY($1::int[])`, [claimers.map((c) => c.pid)]);
        if (settled.size + waiting.length === CLAIMERS) break;
        await sleep(10);
      }
      held.commit();
      assert.deepEqual((await claimA).map((r) => r.id), [row6.id]);
      const rows: InboxRow[][] = await Promise.all(claims);

      assert.ok(!rows.flat().some((r) => r.id === row5.id), 'row 5 waits behind row 6 in flight');
      assert.deepEqual(
        claimers.map((c) => c.statements()),
        Array.from({ length: CLAIMERS }, () => 1),
        'each claim ran its statement once: none met row 6 at the index of rows in flight',
      );
      const inFlight = await db.query<{ id: string }>(`SELECT id FROM "${db.schema}".inbox WHERE aggregate_id = 'order-9' AND state = 'processing'`);
      assert.deepEqual(inFlight.map((r) => r.id), [row6.id]);
      assert.equal(rows.flat().length, 2 * CLAIMERS, 'the other rows are claimed, each once');
    } finally {
      early.release();
      held.release();
      await Promise.all(claimers.map((c) => c.release()));
    }
  });
});
