import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { UsageError } from '../../lib/errors.ts';
import { createPullClient } from '../../lib/pull/pull-client.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { expireLease, insertPullRows, readPullRows } from './pull-fixtures.ts';

describe('pull claim and fenced writes (PostgreSQL)', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase();
  });
  after(async () => db.drop());

  it('claims only the head of each aggregate and rows without aggregate freely, in receive order', async () => {
    const ids = await insertPullRows(db, 'heads', [
      { key: 'a1', aggregateId: 'A' },
      { key: 'n1' },
      { key: 'a2', aggregateId: 'A' },
      { key: 'b1', aggregateId: 'B' },
      { key: 'n2' },
    ]);
    const client = createPullClient(db.driver);
    const claimed = await client.claim('heads', { batch: 10, leaseMs: 30000 });
    assert.deepEqual(claimed.map((m) => m.idempotencyKey), ['a1', 'n1', 'b1', 'n2']);
    assert.ok(claimed.every((m) => m.claim.id === m.id && m.claim.token === m.claimToken));
    // A is under a live lease: its next row waits; nothing else is claimable.
    assert.deepEqual(await client.claim('heads', { batch: 10, leaseMs: 30000 }), []);
    const rows = await readPullRows(db, 'heads');
    assert.deepEqual(rows.map((r) => r.state), ['processing', 'processing', 'pending', 'processing', 'processing']);
    assert.equal(rows[2]!.id, ids[2]);
  });

  it('never takes push rows, other sources or rows not yet due', async () => {
    await insertPullRows(db, 'due', [{ key: 'later', delayMs: 60_000 }]);
    await insertPullRows(db, 'other', [{ key: 'x' }]);
    await db.query(`INSERT INTO "${db.schema}".inbox (source, idempotency_key, payload, consumption) VALUES ('due', 'push-1', '{}', 'push')`);
    const client = createPullClient(db.driver);
    assert.deepEqual(await client.claim('due', { batch: 10, leaseMs: 30000 }), []);
  });

  it('keeps a later row of an aggregate unclaimed while the earlier row waits for its retry', async () => {
    await insertPullRows(db, 'order', [{ key: 'first', aggregateId: 'X' }, { key: 'second', aggregateId: 'X' }]);
    const client = createPullClient(db.driver);
    const [first] = await client.claim('order', { batch: 10, leaseMs: 30000 });
    assert.equal(first!.idempotencyKey, 'first');
    assert.deepEqual(await client.retry(first!.claim, 60_000, new Error('boom')), { ok: true });
    assert.deepEqual(await client.claim('order', { batch: 10, leaseMs: 30000 }), [], 'second must wait behind first');
    const rows = await readPullRows(db, 'order');
    assert.equal(rows[0]!.state, 'pending');
    assert.equal(rows[0]!.attempt, 1);
    assert.equal(rows[0]!.last_error, 'Error: boom');
    assert.equal(rows[0]!.claim_token, first!.claim.token, 'the retry keeps its token: sent again after a lost answer, it recognises the row');
    assert.ok(rows[0]!.due_in_ms > 55_000 && rows[0]!.due_in_ms <= 60_000, `due in ~60 s, got ${rows[0]!.due_in_ms}`);
    assert.equal(rows[1]!.state, 'pending');
  });

  it('releases a dead row’s aggregate and takes expired processing rows again with a new token', async () => {
    await insertPullRows(db, 'reclaim', [{ key: 'r1', aggregateId: 'R' }, { key: 'r2', aggregateId: 'R' }]);
    const client = createPullClient(db.driver);
    const [old] = await client.claim('reclaim', { batch: 10, leaseMs: 30000 });
    await expireLease(db, old!.id);
    const [again] = await client.claim('reclaim', { batch: 10, leaseMs: 30000 });
    assert.equal(again!.id, old!.id);
    assert.notEqual(again!.claimToken, old!.claimToken);
    assert.equal(again!.attempt, 1, 'the expired lease was an attempt');
    assert.equal((await readPullRows(db, 'reclaim'))[0]!.last_error, 'lease expired during attempt 1 (the handler did not finish within its lease)');
    assert.deepEqual(await client.dead(again!.claim, 'permanent'), { ok: true });
    const [next] = await client.claim('reclaim', { batch: 10, leaseMs: 30000 });
    assert.equal(next!.idempotencyKey, 'r2');
  });

  it('reports ownership lost on renew, complete, retry, dead and release of a re-claimed row, and counts it', async () => {
    await insertPullRows(db, 'fence', [{ key: 'f1', aggregateId: 'F' }]);
    const metrics = new QueueBoxMetrics({ namespace: 'test', serviceName: 'test', write: () => {} });
    const a = createPullClient(db.driver, { metrics });
    const b = createPullClient(db.newDriver());
    const [mine] = await a.claim('fence', { batch: 1, leaseMs: 30000 });
    await expireLease(db, mine!.id);
    const [theirs] = await b.claim('fence', { batch: 1, leaseMs: 30000 });
    const lost = { ok: false, reason: 'ownership-lost' };
    assert.deepEqual(await a.renew(mine!.claim, 30000), lost);
    assert.deepEqual(await a.retry(mine!.claim, 1000, 'x'), lost);
    assert.deepEqual(await a.dead(mine!.claim, 'x'), lost);
    assert.deepEqual(await a.release(mine!.claim), lost);
    const tx = await db.pool.connect();
    try {
      await tx.query('BEGIN');
      assert.deepEqual(await a.complete(tx, mine!.claim), lost);
      await tx.query('ROLLBACK');
    } finally {
      tx.release();
    }
    assert.equal(metrics.value('claimsLost', { component: 'pull' }), 5);
    assert.deepEqual(await b.renew(theirs!.claim, 30000), { ok: true });
    const tx2 = await db.pool.connect();
    try {
      await tx2.query('BEGIN');
      assert.deepEqual(await b.complete(tx2, theirs!.claim), { ok: true });
      await tx2.query('COMMIT');
    } finally {
      tx2.release();
    }
    const [row] = await readPullRows(db, 'fence');
    assert.equal(row!.state, 'processed');
    assert.equal(row!.claim_token, theirs!.claimToken);
    assert.ok(row!.processed_at instanceof Date);
  });

  it('refuses to complete outside the handler transaction (no BEGIN): UsageError, the claim kept, nothing marked', async () => {
    await insertPullRows(db, 'no-begin', [{ key: 'nb1' }]);
    const client = createPullClient(db.driver);
    const [message] = await client.claim('no-begin', { batch: 1, leaseMs: 30000 });
    const tx = await db.pool.connect();
    try {
      await assert.rejects(client.complete(tx, message!.claim), (error: unknown) => error instanceof UsageError && /complete ran outside a transaction/.test(error.message));
      await tx.query('BEGIN');
      assert.deepEqual(await client.complete(tx, message!.claim), { ok: true }, 'the claim still holds: completed inside the transaction');
      await tx.query('COMMIT');
    } finally {
      tx.release();
    }
    const [row] = await readPullRows(db, 'no-begin');
    assert.equal(row!.state, 'processed');
  });

  it('refuses a write whose lease ran out even when nobody re-claimed the row', async () => {
    await insertPullRows(db, 'expired', [{ key: 'e1' }]);
    const client = createPullClient(db.driver);
    const [m] = await client.claim('expired', { batch: 1, leaseMs: 30000 });
    await expireLease(db, m!.id);
    assert.deepEqual(await client.renew(m!.claim, 30000), { ok: false, reason: 'ownership-lost' });
  });

  it('releases a claimed row back to pending without spending an attempt', async () => {
    await insertPullRows(db, 'release', [{ key: 'l1', aggregateId: 'L' }]);
    const client = createPullClient(db.driver);
    const [m] = await client.claim('release', { batch: 1, leaseMs: 30000 });
    assert.deepEqual(await client.release(m!.claim), { ok: true });
    const [row] = await readPullRows(db, 'release');
    assert.deepEqual([row!.state, row!.attempt, row!.claim_token], ['pending', 0, m!.claim.token]);
    const [again] = await client.claim('release', { batch: 1, leaseMs: 30000 });
    assert.equal(again!.id, m!.id);
  });

  it('refuses malformed arguments with a UsageError naming them, before anything is sent; the claim stays its own', async () => {
    await insertPullRows(db, 'args', [{ key: 'a1', aggregateId: 'A' }]);
    const client = createPullClient(db.driver);
    const refused = (pattern: RegExp) => (error: unknown) => error instanceof UsageError && pattern.test(error.message);
    const call = client as unknown as { claim(source: unknown, options?: unknown): Promise<unknown> };
    for (const source of [undefined, 42, '', '  ']) await assert.rejects(call.claim(source, { batch: 1, leaseMs: 30000 }), refused(/^pull claim source must be the name of an inbox source/), String(source));
    await assert.rejects(call.claim('args'), refused(/^pull claim needs its options \{ batch, leaseMs \}, got undefined/));
    await assert.rejects(call.claim('args', { batch: 2 ** 31, leaseMs: 30000 }), refused(/^pull batch must be a whole number from 1 to 1000 .*got 2147483648/));
    await assert.rejects(call.claim('args', { batch: '5', leaseMs: 30000 }), refused(/^pull batch .*got "5"/));
    await assert.rejects(call.claim('args', { batch: 1, leaseMs: '5000' }), refused(/^pull leaseMs must be a number of ms, at least 1000, got "5000"/));
    const [m] = await client.claim('args', { batch: 1, leaseMs: 30000 });
    for (const claim of [{ id: m!.id, token: 'not-a-uuid' }, { id: 'x', token: m!.claim.token }, null, 'id']) {
      for (const [name, write] of [
        ['renew', () => client.renew(claim as never, 30000)],
        ['retry', () => client.retry(claim as never, 0, new Error('e'))],
        ['dead', () => client.dead(claim as never, new Error('e'))],
        ['release', () => client.release(claim as never)],
      ] as const) {
        await assert.rejects(write(), refused(new RegExp(`^pull ${name}: claim must be the \\{ id, token \\} of a claimed message`)), `${name} ${JSON.stringify(claim)}`);
      }
    }
    // Upper-case hex (SQL Server writes its uniqueidentifiers so) is a UUID too.
    assert.deepEqual(await client.renew({ id: m!.id.toUpperCase(), token: m!.claim.token.toUpperCase() }, 30000), { ok: true });
    assert.deepEqual(await client.release(m!.claim), { ok: true });
  });

  it('stores retry and dead errors redacted', async () => {
    await insertPullRows(db, 'redact', [{ key: 'd1' }]);
    const client = createPullClient(db.driver);
    const [m] = await client.claim('redact', { batch: 1, leaseMs: 30000 });
    await client.dead(m!.claim, new Error('connect postgres://app:hunter2@db/x failed, password=hunter2'));
    const [row] = await readPullRows(db, 'redact');
    assert.equal(row!.state, 'dead');
    assert.ok(!row!.last_error!.includes('hunter2'), row!.last_error!);
  });

  it('gives each aggregate to exactly one of many concurrent claimers (the head, one row)', async () => {
    const specs = [];
    for (let r = 0; r < 6; r++) for (let a = 0; a < 40; a++) specs.push({ key: `c-${a}-${r}`, aggregateId: `agg-${a}` });
    for (let n = 0; n < 20; n++) specs.push({ key: `free-${n}` });
    await insertPullRows(db, 'race', specs);
    const drivers = Array.from({ length: 8 }, () => db.newDriver());
    // Each claimer claims repeatedly without finishing anything, all at the same time.
    const claims = await Promise.all(
      drivers.map(async (driver) => {
        const client = createPullClient(driver);
        const got = [];
        for (let i = 0; i < 4; i++) got.push(...(await client.claim('race', { batch: 7, leaseMs: 30000 })));
        return got;
      }),
    );
    const all = claims.flat();
    const ids = all.map((m) => m.id);
    assert.equal(new Set(ids).size, ids.length, 'no row is claimed twice');
    const perAggregate = new Map<string, string[]>();
    for (const m of all) if (m.aggregateId) perAggregate.set(m.aggregateId, [...(perAggregate.get(m.aggregateId) ?? []), m.idempotencyKey]);
    assert.equal(perAggregate.size, 40, 'every aggregate got its head');
    for (const [aggregate, keys] of perAggregate) assert.deepEqual(keys, [`c-${aggregate.slice(4)}-0`], `one row, the head, of ${aggregate}`);
    assert.equal(all.filter((m) => m.aggregateId === null).length, 20);
    const processing = await db.query<{ aggregate_id: string; n: string }>(
      `SELECT aggregate_id, count(*) AS n FROM "${db.schema}".inbox WHERE source = 'race' AND state = 'processing' AND aggregate_id IS NOT NULL GROUP BY aggregate_id HAVING count(*) > 1`,
    );
    assert.deepEqual(processing, []);
  });
});
