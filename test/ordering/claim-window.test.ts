import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import pg from 'pg';
import { OLDEST_WINDOW } from '../../lib/db/postgres/claim-text.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';

const LIMIT = 4;
const LEASE = 60_000;

/**
 * A claim reads the oldest `LIMIT × OLDEST_WINDOW` due rows first. It looks past them (a loose
 * scan over every open key or aggregate, then rows without one) only when they filled less than
 * half its batch: a window a few rows short costs a smaller batch, not a scan of every key.
 *
 * Each case: key `a` has its head in flight and `blocked` more rows waiting behind it, then the
 * heads of keys b, c, d, e, f, one row each, in that order. The window holds the `blocked` rows
 * of `a` and the first `window − blocked` of b…f.
 */
describe('claims look past the oldest window only when it filled less than half the batch (PostgreSQL)', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({ outbox: { rowsPerKey: 1 } });
  });
  after(async () => db.drop());
  beforeEach(async () => {
    await db.query(`TRUNCATE "${db.schema}".outbox, "${db.schema}".inbox`);
  });
  const window = LIMIT * OLDEST_WINDOW;

  const expectations = [
    // blocked rows of a in the window → the heads the claim returns
    { blocked: window - 3, heads: ['b', 'c', 'd'], why: 'three of four from the window: the batch is one short, no scan' },
    { blocked: window - 2, heads: ['b', 'c'], why: 'half the batch from the window: still no scan' },
    { blocked: window - 1, heads: ['b', 'c', 'd', 'e'], why: 'less than half from the window: the scan fills the batch with the heads past it' },
  ];
  // The outbox sends its window claim first (a new driver starts with it): a window that gave less
  // than half is that claim's batch, and the next claim is the full one.
  const outboxClaims: Record<number, string[][]> = { [window - 3]: [['b', 'c', 'd']], [window - 2]: [['b', 'c']], [window - 1]: [['b'], ['c', 'd', 'e', 'f']] };

  for (const { blocked, heads, why } of expectations) {
    it(`outbox: ${blocked} of ${window} window rows held behind a key in flight → ${outboxClaims[blocked]!.map((c) => c.join(', ')).join(' | ')} (${why})`, async () => {
      const driver = db.newDriver();
      const client = await db.pool.connect();
      try {
        const insert = (key: string, n: number) => db.driver.outboxInsert(client, { topic: 't', key, payload: { key, n } }, { maxAttempts: 5 });
        for (let n = 0; n <= blocked; n++) await insert('a', n);
        for (const key of ['b', 'c', 'd', 'e', 'f']) await insert(key, 0);
      } finally {
        client.release();
      }
      const [head] = await driver.outboxClaimMany({ limit: 1, leaseMs: LEASE });
      assert.deepEqual([head?.key, (head?.payload as { n: number }).n], ['a', 0]);
      const claims: string[][] = [];
      for (const _ of outboxClaims[blocked]!) claims.push((await driver.outboxClaimMany({ limit: LIMIT, leaseMs: LEASE })).map((r) => r.key!));
      assert.deepEqual(claims, outboxClaims[blocked]);
    });

    it(`relay: ${blocked} of ${window} window rows held behind an aggregate in flight → ${heads.join(', ')}`, async () => {
      const receive = (aggregateId: string, n: number) =>
        db.driver.inboxInsert({ source: 'shop', idempotencyKey: `${aggregateId}-${n}`, aggregateId, payload: { n }, consumption: 'push' });
      for (let n = 0; n <= blocked; n++) await receive('a', n);
      for (const aggregate of ['b', 'c', 'd', 'e', 'f']) await receive(aggregate, 0);
      const [head] = await db.driver.inboxClaimPushMany({ limit: 1, leaseMs: LEASE });
      assert.equal(head?.idempotencyKey, 'a-0');
      const rows = await db.driver.inboxClaimPushMany({ limit: LIMIT, leaseMs: LEASE });
      assert.deepEqual(rows.map((r) => r.aggregateId), heads);
    });

    it(`pull: ${blocked} of ${window} window rows held by an aggregate in flight → ${heads.join(', ')}`, async () => {
      const receive = (aggregateId: string, n: number) =>
        db.driver.inboxInsert({ source: 'shop', idempotencyKey: `${aggregateId}-${n}`, aggregateId, payload: { n }, consumption: 'pull' });
      // The pull window reads processing rows too (an expired lease is claimed directly), so
      // the head in flight is one of the window's blocked rows.
      for (let n = 0; n < blocked; n++) await receive('a', n);
      for (const aggregate of ['b', 'c', 'd', 'e', 'f']) await receive(aggregate, 0);
      const [head] = await db.driver.pullClaimMany({ source: 'shop', limit: 1, leaseMs: LEASE });
      assert.equal(head?.idempotencyKey, 'a-0');
      const rows = await db.driver.pullClaimMany({ source: 'shop', limit: LIMIT, leaseMs: LEASE });
      assert.deepEqual(rows.map((r) => r.aggregateId), heads);
    });
  }

  it('a table drained down to a few rows past a short window still hands them all out, in order, batch after batch', async () => {
    const client = await db.pool.connect();
    try {
      for (let n = 0; n < 12; n++) await db.driver.outboxInsert(client, { topic: 't', key: `k${n}`, payload: { n } }, { maxAttempts: 5 });
    } finally {
      client.release();
    }
    const claimed: string[] = [];
    for (let i = 0; i < 10; i++) {
      const rows = await db.driver.outboxClaimMany({ limit: LIMIT, leaseMs: LEASE });
      if (rows.length === 0) break;
      claimed.push(...rows.map((r) => r.key!));
    }
    assert.deepEqual(claimed, Array.from({ length: 12 }, (_, n) => `k${n}`));
  });
});

describe('the outbox claim sends its window claim first while the window fills batches (PostgreSQL)', () => {
  let db: TestDatabase;
  const sent: string[] = [];
  const query = pg.Client.prototype.query;
  before(async () => {
    db = await createTestDatabase({ outbox: { rowsPerKey: 1 } });
    // Records which outbox claim statement each claim sends (the window claim has no loose scan).
    pg.Client.prototype.query = function (this: pg.Client, ...args: unknown[]) {
      const first = args[0] as string | { text?: string };
      const text = typeof first === 'string' ? first : (first?.text ?? '');
      if (text.includes('claim_token = pg_catalog.gen_random_uuid()') && text.includes(`"${db.schema}"."outbox"`)) sent.push(text.includes('sweep_next') ? 'full' : 'window');
      return (query as (...a: unknown[]) => unknown).apply(this, args);
    } as typeof query;
  });
  after(async () => {
    pg.Client.prototype.query = query;
    await db.drop();
  });
  let driver: TestDatabase['driver'];
  beforeEach(() => {
    driver = db.newDriver(); // a new container: it starts with the window claim
  });
  const claim = async (limit: number) => {
    sent.length = 0;
    const rows = await driver.outboxClaimMany({ limit, leaseMs: LEASE });
    return { keys: rows.map((r) => r.key ?? '-'), statements: [...sent] };
  };
  const insert = async (rows: Array<string | null>) => {
    const client = await db.pool.connect();
    try {
      for (const key of rows) await db.driver.outboxInsert(client, { topic: 't', key, payload: {} }, { maxAttempts: 5 });
    } finally {
      client.release();
    }
  };

  beforeEach(async () => {
    await db.query(`DELETE FROM "${db.schema}".outbox`);
  });

  it('the full claim, too, leaves the heads past its window alone when the window fills half the batch', async () => {
    // a's head in flight; the window: a's rows behind it, then b and c; d and e past it.
    await insert([...Array.from({ length: LIMIT * OLDEST_WINDOW - 1 }, () => 'a'), 'b', 'c', 'd', 'e']);
    assert.deepEqual(await claim(1), { keys: ['a'], statements: ['window'] });
    // Send the driver to the full claim: a window claim with nothing to take past key a's rows.
    await db.query(`UPDATE "${db.schema}".outbox SET state = 'dead' WHERE key IN ('b', 'c', 'd', 'e')`);
    assert.deepEqual(await claim(LIMIT), { keys: [], statements: ['window', 'full'] });
    await db.query(`UPDATE "${db.schema}".outbox SET state = 'pending' WHERE key IN ('b', 'c', 'd', 'e')`);
    assert.deepEqual(await claim(LIMIT), { keys: ['b', 'c'], statements: ['full'] });
  });

  it('one window claim per batch on a keyless table; the full claim once the window gives less than half; back to the window once it fills batches again', async () => {
    await insert(Array.from({ length: 8 }, () => null));
    assert.deepEqual(await claim(4), { keys: ['-', '-', '-', '-'], statements: ['window'] });
    assert.deepEqual(await claim(4), { keys: ['-', '-', '-', '-'], statements: ['window'] });

    // Key a: its head goes in flight, the window's worth of rows but one waits behind it, then keys b…h.
    await insert([...Array.from({ length: LIMIT * OLDEST_WINDOW }, () => 'a'), 'b', 'c', 'd', 'e', 'f', 'g', 'h']);
    assert.deepEqual(await claim(1), { keys: ['a'], statements: ['window'] });
    // The window (a's waiting rows, then b) gives one row: this claim is b, the next ones are full claims.
    assert.deepEqual(await claim(4), { keys: ['b'], statements: ['window'] });
    assert.deepEqual(await claim(4), { keys: ['c', 'd', 'e', 'f'], statements: ['full'] });
    assert.deepEqual(await claim(4), { keys: ['g', 'h'], statements: ['full'] });
    assert.deepEqual(await claim(4), { keys: [], statements: ['full'] });

    // Rows that can move fill the full claim's window: the next claim starts with the window claim.
    await insert(Array.from({ length: 8 }, () => null));
    await db.query(`UPDATE "${db.schema}".outbox SET state = 'dead' WHERE key = 'a' AND state = 'pending'`);
    assert.deepEqual(await claim(4), { keys: ['-', '-', '-', '-'], statements: ['full'] });
    assert.deepEqual(await claim(4), { keys: ['-', '-', '-', '-'], statements: ['window'] });
  });

  it('due retries do not keep the claim on the window: the head of a healthy key past it is claimed next (a destination down for other keys)', async () => {
    // Three keyless rows whose destination is down (retried at once, again and again), key x's
    // head in flight with the window's worth of rows behind it, then key h, which can move.
    await insert([null, null, null, ...Array.from({ length: LIMIT * OLDEST_WINDOW }, () => 'x'), 'h']);
    await db.query(`UPDATE "${db.schema}".outbox SET attempt = 1 WHERE key IS NULL`);
    await db.query(
      `UPDATE "${db.schema}".outbox SET state = 'processing', claim_token = gen_random_uuid(), lease_expires_at = clock_timestamp() + interval '1 minute'
        WHERE id = (SELECT id FROM "${db.schema}".outbox WHERE key = 'x' ORDER BY sequence LIMIT 1)`,
    );
    const failAgain = () =>
      db.query(
        `UPDATE "${db.schema}".outbox SET state = 'pending', attempt = attempt + 1, claim_token = NULL, lease_expires_at = NULL,
                scheduled_at = clock_timestamp() - interval '1 second'
          WHERE key IS NULL AND state = 'processing'`,
      );
    const claimedKeys: string[][] = [];
    for (let i = 0; i < 4 && !claimedKeys.flat().includes('h'); i++) {
      claimedKeys.push((await claim(LIMIT)).keys);
      await failAgain();
    }
    assert.deepEqual(claimedKeys, [['-', '-', '-'], ['-', '-', '-', 'h']], 'the retries first, then h with the next retries');
  });
});
