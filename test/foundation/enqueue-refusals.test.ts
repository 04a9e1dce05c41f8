/**
 * What `enqueue` refuses besides an invalid field, each with an error that says what to do and
 * nothing written: a TypeORM object given to the core `enqueue` (its `query` is not a `pg`
 * client's: `queuebox/typeorm` takes it), an array of messages (one message per call), an option
 * `enqueue` does not have (a misspelt `schema` would write to the default one), a payload that is
 * an instance of a class (JSON.stringify would keep its own fields alone) — one with a `toJSON`
 * that returns an object is stored as that object, as the README says — a number JSON cannot
 * hold (NaN, ±Infinity: JSON.stringify would store null), and a `message.id` already in the table.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { DataSource } from 'typeorm';
import { enqueue } from '../../lib/index.ts';
import { UniqueViolationError, UsageError, ValidationError } from '../../lib/errors.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';

class OrderPaid {
  constructor(
    readonly orderId: string,
    readonly amount: number,
  ) {}
}

class WithToJSON {
  toJSON() {
    return { orderId: 'o-json' };
  }
}

describe('enqueue refusals', () => {
  let db: TestDatabase;
  const count = async () => Number((await db.query<{ n: string }>(`SELECT count(*) AS n FROM "${db.schema}".outbox`))[0]!.n);

  /** Runs `enqueue` inside BEGIN, rolled back; returns its error (or its id). */
  async function attempt(message: unknown, options: unknown = { schema: db.schema }): Promise<unknown> {
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      return await enqueue(client, message as never, options as never).catch((error: unknown) => error);
    } finally {
      await client.query('ROLLBACK');
      client.release();
    }
  }

  before(async () => {
    db = await createTestDatabase();
  });
  after(async () => db.drop());

  it("refuses TypeORM's DataSource, its manager and a transaction's manager, naming queuebox/typeorm, writing nothing", async () => {
    const dataSource = await new DataSource({ type: 'postgres', url: db.url, entities: [], poolSize: 2 }).initialize();
    try {
      const before = await count();
      const refused = (error: unknown) => {
        assert.ok(error instanceof UsageError, `UsageError, got ${String(error)}`);
        assert.match(error.message, /TypeORM/);
        assert.match(error.message, /queuebox\/typeorm/);
        return true;
      };
      const options = { schema: db.schema };
      await assert.rejects(enqueue(dataSource as never, { topic: 'typeorm', payload: {} }, options), refused);
      await assert.rejects(enqueue(dataSource.manager as never, { topic: 'typeorm', payload: {} }, options), refused);
      await dataSource.transaction(async (manager) => {
        await assert.rejects(enqueue(manager as never, { topic: 'typeorm', payload: {} }, options), refused);
      });
      assert.equal(await count(), before);
    } finally {
      await dataSource.destroy();
    }
  });

  it('refuses an array of messages: one message per call', async () => {
    const error = await attempt([{ topic: 't', payload: {} }]);
    assert.ok(error instanceof ValidationError, String(error));
    assert.equal(error.field, 'message');
    assert.match(error.message, /one message per call/);
  });

  it('refuses an option it does not have, naming it', async () => {
    for (const key of ['schmea', 'maxAtempts']) {
      const error = await attempt({ topic: 't', payload: {} }, { schema: db.schema, [key]: 1 });
      assert.ok(error instanceof UsageError, String(error));
      assert.match(error.message, new RegExp(`options\\.${key} is not an option of enqueue`));
    }
    assert.ok((await attempt({ topic: 't', payload: {} }, null)) instanceof UsageError);
  });

  it('refuses a payload that is a class instance without toJSON, saying it must be a plain JSON object', async () => {
    for (const payload of [new OrderPaid('o-1', 4200), new Map([['a', 1]])]) {
      const error = await attempt({ topic: 't', payload });
      assert.ok(error instanceof ValidationError, String(error));
      assert.equal(error.field, 'message.payload');
      assert.match(error.message, /must be a plain JSON object, or an object whose toJSON returns one/);
      assert.match(error.message, new RegExp(`an instance of ${payload.constructor.name}`));
    }
  });

  it('stores a class instance with a toJSON that returns an object as that object', async () => {
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      const id = await enqueue(client, { topic: 'to-json', payload: new WithToJSON() as never }, { schema: db.schema });
      assert.deepEqual(await client.query(`SELECT payload FROM "${db.schema}".outbox WHERE id = $1`, [id]).then((r) => r.rows), [{ payload: { orderId: 'o-json' } }]);
    } finally {
      await client.query('ROLLBACK');
      client.release();
    }
  });

  it('refuses NaN and ±Infinity in the payload, naming where (JSON.stringify would store null)', async () => {
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ n: Number.NaN }, 'message.payload.n'],
      [{ order: { total: Number.POSITIVE_INFINITY } }, 'message.payload.order.total'],
      [{ items: [1, 2, Number.NEGATIVE_INFINITY] }, 'message.payload.items[2]'],
      [{ 'a key': { toJSON: () => ({ x: Number.NaN }) } }, 'message.payload["a key"].x'],
    ];
    for (const [payload, field] of cases) {
      const error = await attempt({ topic: 't', payload });
      assert.ok(error instanceof ValidationError, String(error));
      assert.equal(error.field, field);
      assert.match(error.message, /finite number/);
    }
    // Nulls of its own are fine.
    assert.match(String(await attempt({ topic: 't', payload: { none: null, list: [null] } })), /^[0-9a-f-]{36}$/);
  });

  it('refuses a message.id already in the table with a UniqueViolationError naming message.id, the driver error its cause', async () => {
    const id = '6f1c7e52-3a4b-4c5d-8e9f-0a1b2c3d4e5f';
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      await enqueue(client, { topic: 'dup', payload: {}, id }, { schema: db.schema });
      await client.query('COMMIT');
    } finally {
      client.release();
    }
    const error = await attempt({ topic: 'dup', payload: {}, id });
    assert.ok(error instanceof UniqueViolationError, String(error));
    assert.match(error.message, new RegExp(`^message\\.id ${id} is already the id of an outbox row`));
    assert.equal(error.constraint, 'outbox_pkey');
    assert.equal((error.cause as { code?: unknown }).code, '23505');
  });
});
