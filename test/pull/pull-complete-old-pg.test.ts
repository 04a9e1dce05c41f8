/**
 * Pull `complete(tx, claim)` given a handle that cannot report its transaction: a client of the
 * application's own `pg` older than 8.21 (the `pg-8-20` devDependency, an alias of `pg@8.20.0`:
 * no `getTransactionStatus()`), and an object whose `query` forwards to a client or a pool. The
 * transaction check (a savepoint set and released, refused outside a transaction block) goes in
 * the same round trip as the completion, so a `ROLLBACK` sent before the completion was awaited
 * cannot come between them: the row stays claimed, never `processed` outside the transaction.
 */
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { after, before, describe, it } from 'node:test';
import type pgTypes from 'pg';
import { UsageError } from '../../lib/errors.ts';
import { createPullClient, type PullClient, type PullMessage } from '../../lib/pull/pull-client.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { insertPullRows } from './pull-fixtures.ts';

const oldPg = createRequire(import.meta.url)('pg-8-20') as typeof pgTypes;

type Query = (text: string, values?: unknown[]) => Promise<unknown>;

describe('pull complete on a handle that cannot report its transaction', () => {
  let db: TestDatabase;
  let oldPool: pgTypes.Pool;
  let pull: PullClient;
  let n = 0;

  before(async () => {
    db = await createTestDatabase({ database: { poolMax: 4 } });
    oldPool = new oldPg.Pool({ connectionString: db.url, max: 2 });
    pull = createPullClient(db.driver);
  });
  after(async () => {
    await oldPool.end();
    await db.drop();
  });

  /** Stores one pull row of a new source and claims it. */
  async function claimOne(): Promise<PullMessage> {
    const source = `old-pg-${++n}`;
    await insertPullRows(db, source, [{ key: 'a' }]);
    const [message] = await pull.claim(source, { batch: 1, leaseMs: 60_000 });
    assert.ok(message !== undefined);
    return message;
  }
  const state = async (id: string) => (await db.query<{ state: string }>(`SELECT state FROM "${db.schema}".inbox WHERE id = $1`, [id]))[0]!.state;
  const outside = (error: unknown) => {
    assert.ok(error instanceof UsageError, `UsageError, got ${String(error)}`);
    assert.match(error.message, /complete ran outside a transaction/);
    assert.match(error.message, /nothing was written/);
    return true;
  };

  /** `run(handle, client)` with a client of pg 8.20, a wrapper of one, and a wrapper of a client of the current pg. */
  const handles: Array<[string, (run: (handle: pgTypes.ClientBase, client: pgTypes.PoolClient) => Promise<void>) => Promise<void>]> = [
    [
      'a client of pg 8.20',
      async (run) => {
        const client = await oldPool.connect();
        try {
          assert.equal(typeof (client as { getTransactionStatus?: unknown }).getTransactionStatus, 'undefined');
          await run(client, client);
        } finally {
          client.release();
        }
      },
    ],
    [
      'an object whose query forwards to a client of pg 8.20',
      async (run) => {
        const client = await oldPool.connect();
        try {
          const query = client.query.bind(client) as Query;
          await run({ query: (text: string, values?: unknown[]) => query(text, values) } as unknown as pgTypes.ClientBase, client);
        } finally {
          client.release();
        }
      },
    ],
    [
      'an object whose query forwards to a client of the current pg',
      async (run) => {
        const client = await db.pool.connect();
        try {
          const query = client.query.bind(client) as Query;
          await run({ query: (text: string, values?: unknown[]) => query(text, values) } as unknown as pgTypes.ClientBase, client);
        } finally {
          client.release();
        }
      },
    ],
  ];

  for (const [what, withHandle] of handles) {
    describe(what, () => {
      it('leaves the row claimed when the completion was not awaited before ROLLBACK', async () => {
        const message = await claimOne();
        await withHandle(async (handle, client) => {
          await client.query('BEGIN');
          const pending = pull.complete(handle, message.claim);
          await client.query('ROLLBACK');
          assert.deepEqual(await pending, { ok: true }, 'written inside the transaction');
        });
        assert.equal(await state(message.id), 'processing', 'rolled back with the transaction, not committed on its own');
      });

      it('completes inside BEGIN with COMMIT, and refuses without BEGIN, writing nothing', async () => {
        const refused = await claimOne();
        const kept = await claimOne();
        await withHandle(async (handle, client) => {
          await assert.rejects(pull.complete(handle, refused.claim), outside);
          assert.deepEqual((await client.query('SELECT 1 AS one')).rows, [{ one: 1 }], 'the client is usable');
          await client.query('BEGIN');
          await client.query(`SET LOCAL lock_timeout = '7s'`);
          assert.deepEqual(await pull.complete(handle, kept.claim), { ok: true });
          assert.equal((await client.query<{ lock_timeout: string }>('SHOW lock_timeout')).rows[0]!.lock_timeout, '7s', "the caller's lock_timeout is put back");
          await client.query('COMMIT');
        });
        assert.equal(await state(refused.id), 'processing');
        assert.equal(await state(kept.id), 'processed');
      });

      it('answers ownership-lost for another token, writing nothing, and leaves the transaction usable', async () => {
        const message = await claimOne();
        await withHandle(async (handle, client) => {
          await client.query('BEGIN');
          assert.deepEqual(await pull.complete(handle, { id: message.id, token: '00000000-0000-4000-8000-000000000000' }), { ok: false, reason: 'ownership-lost' });
          assert.deepEqual((await client.query('SELECT 1 AS one')).rows, [{ one: 1 }]);
          await client.query('COMMIT');
        });
        assert.equal(await state(message.id), 'processing');
      });
    });
  }

  it('sends the check and the completion as one query through an object whose query forwards to a client', async () => {
    const message = await claimOne();
    const client = await oldPool.connect();
    const sent: Array<{ text: string; values: unknown[] | undefined }> = [];
    const query = client.query.bind(client) as Query;
    const wrapper = { query: (text: string, values?: unknown[]) => (sent.push({ text, values }), query(text, values)) } as unknown as pgTypes.ClientBase;
    try {
      await client.query('BEGIN');
      assert.deepEqual(await pull.complete(wrapper, message.claim), { ok: true });
      await client.query('COMMIT');
    } finally {
      client.release();
    }
    assert.equal(sent.length, 1, `one round trip, not ${sent.length}`);
    assert.equal(sent[0]!.values, undefined, 'a simple query: no bind values');
    assert.match(sent[0]!.text, /^SAVEPOINT (\w+); RELEASE SAVEPOINT \1; WITH written AS \(UPDATE /);
    assert.ok(sent[0]!.text.includes(`$q$${message.claim.token}$q$`), 'the token written in as a literal');
    assert.equal(await state(message.id), 'processed');
  });

  it('refuses a token that is not a UUID through an object whose query forwards to a client, writing nothing', async () => {
    const message = await claimOne();
    const client = await oldPool.connect();
    const query = client.query.bind(client) as Query;
    const wrapper = { query: (text: string, values?: unknown[]) => query(text, values) } as unknown as pgTypes.ClientBase;
    try {
      await client.query('BEGIN');
      const sent: string[] = [];
      const watched = { query: (text: string, values?: unknown[]) => (sent.push(text), wrapper.query(text, values as never)) } as unknown as pgTypes.ClientBase;
      await assert.rejects(pull.complete(watched, { id: message.id, token: `x' OR true --` }), (error: unknown) => error instanceof UsageError && /pull complete: claim must be the \{ id, token \} of a claimed message/.test(String(error)));
      assert.deepEqual(sent, [], 'refused before anything is sent');
      await client.query('ROLLBACK');
    } finally {
      client.release();
    }
    assert.equal(await state(message.id), 'processing');
  });

  it('refuses an object whose query forwards to a pool (the server is asked), writing nothing', async () => {
    const message = await claimOne();
    for (const pool of [oldPool, db.pool] as pgTypes.Pool[]) {
      const query = pool.query.bind(pool) as Query;
      const wrapper = { query: (text: string, values?: unknown[]) => query(text, values) } as unknown as pgTypes.ClientBase;
      await assert.rejects(pull.complete(wrapper, message.claim), outside);
    }
    assert.equal(await state(message.id), 'processing');
  });
});
