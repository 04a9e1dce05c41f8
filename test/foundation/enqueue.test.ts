import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { enqueue } from '../../lib/index.ts';
import { UsageError, ValidationError } from '../../lib/errors.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';

describe('enqueue', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase();
  });
  after(async () => db.drop());

  it('writes the row inside the caller transaction and returns its id', async () => {
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      const id = await enqueue(client, { topic: 'order.paid', key: 'o-1', payload: { orderId: 'o-1' }, headers: { 'X-Correlation-Id': 'c-1' } }, { schema: db.schema });
      await client.query('COMMIT');
      const rows = await db.query(`SELECT topic, key, payload, headers, state FROM "${db.schema}".outbox WHERE id = $1`, [id]);
      assert.deepEqual(rows, [{ topic: 'order.paid', key: 'o-1', payload: { orderId: 'o-1' }, headers: { 'X-Correlation-Id': 'c-1' }, state: 'pending' }]);
    } finally {
      client.release();
    }
  });

  it('leaves no row when the caller rolls back', async () => {
    const client = await db.pool.connect();
    let id: string;
    try {
      await client.query('BEGIN');
      id = await enqueue(client, { topic: 'order.cancelled', payload: { orderId: 'o-2' } }, { schema: db.schema });
      await client.query('ROLLBACK');
    } finally {
      client.release();
    }
    const rows = await db.query(`SELECT 1 FROM "${db.schema}".outbox WHERE id = $1`, [id]);
    assert.equal(rows.length, 0);
  });

  it('honours delayMs on the database clock and maxAttempts', async () => {
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      const id = await enqueue(client, { topic: 'later', payload: {}, delayMs: 60_000, maxAttempts: 9 }, { schema: db.schema });
      await client.query('COMMIT');
      const [row] = await db.query<{ due_in: number; max_attempts: number }>(
        `SELECT EXTRACT(EPOCH FROM scheduled_at - clock_timestamp())::float8 AS due_in, max_attempts FROM "${db.schema}".outbox WHERE id = $1`,
        [id],
      );
      assert.ok(row!.due_in > 55 && row!.due_in <= 60, `due in ~60 s, got ${row!.due_in}`);
      assert.equal(row!.max_attempts, 9);
    } finally {
      client.release();
    }
  });

  const invalid: Array<[string, unknown, string]> = [
    ['a missing topic', { payload: {} }, 'message.topic'],
    ['an empty topic', { topic: ' ', payload: {} }, 'message.topic'],
    ['a topic over 255 characters', { topic: 'x'.repeat(256), payload: {} }, 'message.topic'],
    ['a payload that is an array', { topic: 't', payload: [1] }, 'message.payload'],
    ['a payload that is a string', { topic: 't', payload: 'x' }, 'message.payload'],
    ['a payload with a BigInt', { topic: 't', payload: { n: 1n } }, 'message.payload'],
    ['headers with a number value', { topic: 't', payload: {}, headers: { a: 1 } }, 'message.headers.a'],
    ['a key over 255 characters', { topic: 't', payload: {}, key: 'k'.repeat(256) }, 'message.key'],
    ['an unknown field', { topic: 't', payload: {}, priority: 1 }, 'message.priority'],
    ['an id that is not a UUID', { topic: 't', payload: {}, id: 'abc' }, 'message.id'],
    ['maxAttempts of zero', { topic: 't', payload: {}, maxAttempts: 0 }, 'message.maxAttempts'],
  ];
  for (const [what, message, field] of invalid) {
    it(`rejects ${what} with an error naming ${field}, writing nothing`, async () => {
      const before = await db.query<{ n: string }>(`SELECT count(*) AS n FROM "${db.schema}".outbox`);
      const client = await db.pool.connect();
      try {
        await assert.rejects(enqueue(client, message as never, { schema: db.schema }), (error: unknown) => {
          assert.ok(error instanceof ValidationError, `ValidationError, got ${String(error)}`);
          assert.equal(error.field, field);
          return true;
        });
      } finally {
        client.release();
      }
      const afterRows = await db.query<{ n: string }>(`SELECT count(*) AS n FROM "${db.schema}".outbox`);
      assert.equal(afterRows[0]!.n, before[0]!.n);
    });
  }

  it('refuses a pg.Pool (its queries would run outside the caller transaction) with a UsageError saying what to pass, writing nothing', async () => {
    const before = await db.query<{ n: string }>(`SELECT count(*) AS n FROM "${db.schema}".outbox`);
    // @ts-expect-error a Pool is not a transaction client: the type refuses it too
    await assert.rejects(enqueue(db.pool, { topic: 't', payload: {} }, { schema: db.schema }), (error: unknown) => {
      assert.ok(error instanceof UsageError, `UsageError, got ${String(error)}`);
      assert.match(error.message, /not a pg\.Pool/);
      assert.match(error.message, /pool\.connect\(\)/);
      return true;
    });
    const afterRows = await db.query<{ n: string }>(`SELECT count(*) AS n FROM "${db.schema}".outbox`);
    assert.equal(afterRows[0]!.n, before[0]!.n);
  });

  it('refuses a client outside a transaction block (no BEGIN: the row would commit on its own) with a UsageError, writing nothing', async () => {
    const before = await db.query<{ n: string }>(`SELECT count(*) AS n FROM "${db.schema}".outbox`);
    const client = await db.pool.connect();
    try {
      await client.query('SELECT 1');
      await assert.rejects(enqueue(client, { topic: 't', payload: {} }, { schema: db.schema }), (error: unknown) => {
        assert.ok(error instanceof UsageError, `UsageError, got ${String(error)}`);
        assert.match(error.message, /enqueue ran outside a transaction/);
        assert.match(error.message, /BEGIN/);
        return true;
      });
      assert.equal(client.getTransactionStatus(), 'I', 'the client is left as it was');
    } finally {
      client.release();
    }
    const afterRows = await db.query<{ n: string }>(`SELECT count(*) AS n FROM "${db.schema}".outbox`);
    assert.equal(afterRows[0]!.n, before[0]!.n);
  });

  it('inside BEGIN sends the insert alone; a BEGIN sent without waiting is still honoured (the row rolls back with it)', async () => {
    const client = await db.pool.connect();
    const sent: string[] = [];
    const query = client.query.bind(client) as (text: string, values?: unknown[]) => Promise<unknown>;
    const spy = Object.assign(Object.create(client) as pg.PoolClient, {
      query: (text: string, values?: unknown[]) => (sent.push(text.trim().split(/\s+/)[0]!), query(text, values)),
    });
    try {
      await client.query('BEGIN');
      await enqueue(spy, { topic: 't', payload: { n: 1 } }, { schema: db.schema });
      assert.deepEqual(sent, ['INSERT'], 'one statement in an open transaction');
      await client.query('COMMIT');

      sent.length = 0;
      const begin = client.query('BEGIN');
      const id = await enqueue(spy, { topic: 't', payload: { n: 2 } }, { schema: db.schema });
      await begin;
      assert.deepEqual(sent, ['SAVEPOINT', 'INSERT'], 'the savepoint, set and released in one query, proves the queued BEGIN');
      await client.query('ROLLBACK');
      assert.deepEqual(await db.query(`SELECT id FROM "${db.schema}".outbox WHERE id = $1`, [id]), [], 'rolled back with the transaction');
    } finally {
      client.release();
    }
  });

  it('refuses a client whose connection is not ready yet (no transaction can be open), writing nothing', async () => {
    const before = await db.query<{ n: string }>(`SELECT count(*) AS n FROM "${db.schema}".outbox`);
    const client = new pg.Client({ connectionString: db.url });
    const connecting = client.connect();
    try {
      await assert.rejects(enqueue(client, { topic: 't', payload: {} }, { schema: db.schema }), (error: unknown) => error instanceof UsageError && /ran outside a transaction/.test(error.message));
    } finally {
      await connecting;
      await client.end();
    }
    const afterRows = await db.query<{ n: string }>(`SELECT count(*) AS n FROM "${db.schema}".outbox`);
    assert.equal(afterRows[0]!.n, before[0]!.n);
  });

  it('says so, naming the row, when the caller ends the transaction before enqueue has written (the row then committed on its own)', async () => {
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      const committing = client.query('COMMIT'); // sent, not awaited: the client still reports the transaction
      let id = '';
      await assert.rejects(enqueue(client, { topic: 'ended.first', payload: {} }, { schema: db.schema }), (error: unknown) => {
        assert.ok(error instanceof UsageError, `UsageError, got ${String(error)}`);
        assert.match(error.message, /after its transaction had ended/);
        id = /outbox row ([0-9a-f-]{36})/.exec(error.message)?.[1] ?? '';
        return true;
      });
      await committing;
      assert.deepEqual(await db.query(`SELECT topic FROM "${db.schema}".outbox WHERE id = $1`, [id]), [{ topic: 'ended.first' }], 'the named row is the one written');
    } finally {
      client.release();
    }
  });

  it('writes in the order the caller called: an enqueue not awaited before COMMIT commits with the transaction, and a BEGIN not awaited keeps the caller savepoints', async () => {
    const client = await db.pool.connect();
    try {
      // Awaited BEGIN; enqueue, COMMIT and a new BEGIN sent without waiting: the row is in the first transaction.
      await client.query('BEGIN');
      const first = enqueue(client, { topic: 'order.kept', payload: {} }, { schema: db.schema });
      const commit = client.query('COMMIT');
      const next = client.query('BEGIN');
      const id = await first;
      await Promise.all([commit, next]);
      await client.query('ROLLBACK');
      assert.deepEqual(await db.query(`SELECT topic FROM "${db.schema}".outbox WHERE id = $1`, [id]), [{ topic: 'order.kept' }]);

      // BEGIN not awaited, then enqueue, then the caller's own savepoint and statements.
      const begin = client.query('BEGIN');
      const second = enqueue(client, { topic: 'order.savepoint', payload: {} }, { schema: db.schema });
      const mine = client.query('SAVEPOINT mine');
      const secondId = await second;
      await Promise.all([begin, mine]);
      await client.query('RELEASE SAVEPOINT mine'); // refused if enqueue's check had released it
      await client.query('COMMIT');
      assert.deepEqual(await db.query(`SELECT topic FROM "${db.schema}".outbox WHERE id = $1`, [secondId]), [{ topic: 'order.savepoint' }], 'the savepoint stood and the row committed');
    } finally {
      client.release();
    }
  });
});
