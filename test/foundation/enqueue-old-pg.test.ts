/**
 * `enqueue` (and pull `complete`, which shares its transaction check) given what cannot report its
 * transaction: a client of the application's own `pg` older than 8.21 (the `pg-8-20`
 * devDependency, an alias of `pg@8.20.0`: no `getTransactionStatus()`), and an object whose
 * `query` forwards to a pool. Each is refused outside `BEGIN` with a `UsageError`, writing nothing;
 * inside `BEGIN` the row commits or rolls back with the transaction — an enqueue not awaited before
 * a `ROLLBACK` included, since on such a client the check and the INSERT are one round trip.
 */
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { after, before, describe, it } from 'node:test';
import type pgTypes from 'pg';
import { enqueue } from '../../lib/index.ts';
import { UsageError } from '../../lib/errors.ts';
import { createPullClient } from '../../lib/pull/pull-client.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';

const oldPg = createRequire(import.meta.url)('pg-8-20') as typeof pgTypes;

describe('enqueue on a client of pg 8.20 (no getTransactionStatus)', () => {
  let db: TestDatabase;
  let pool: pgTypes.Pool;
  const options = () => ({ schema: db.schema });
  const rows = async (topic: string) => Number((await db.query<{ n: string }>(`SELECT count(*) AS n FROM "${db.schema}".outbox WHERE topic = $1`, [topic]))[0]!.n);
  const outside = (error: unknown) => {
    assert.ok(error instanceof UsageError, `UsageError, got ${String(error)}`);
    assert.match(error.message, /ran outside a transaction/);
    assert.match(error.message, /nothing was written/);
    return true;
  };

  before(async () => {
    db = await createTestDatabase();
    pool = new oldPg.Pool({ connectionString: db.url, max: 2 });
  });
  after(async () => {
    await pool.end();
    await db.drop();
  });

  it('is a client that cannot report its transaction', async () => {
    const client = await pool.connect();
    try {
      assert.equal(typeof (client as { getTransactionStatus?: unknown }).getTransactionStatus, 'undefined');
    } finally {
      client.release();
    }
  });

  it('refuses it without BEGIN and after COMMIT, writing nothing and leaving it usable', async () => {
    const client = await pool.connect();
    try {
      await assert.rejects(enqueue(client, { topic: 'old.no-begin', payload: {} }, options()), outside);
      await client.query('BEGIN');
      await client.query('COMMIT');
      await assert.rejects(enqueue(client, { topic: 'old.after-commit', payload: {} }, options()), outside);
      assert.deepEqual((await client.query('SELECT 1 AS one')).rows, [{ one: 1 }]);
    } finally {
      client.release();
    }
    assert.equal(await rows('old.no-begin'), 0);
    assert.equal(await rows('old.after-commit'), 0);
  });

  it('inside BEGIN: commits with the transaction, or rolls back with it', async () => {
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      const kept = await enqueue(client, { topic: 'old.kept', key: 'k', payload: { n: 1 } }, options());
      await client.query('COMMIT');
      await client.query('BEGIN');
      await enqueue(client, { topic: 'old.undone', payload: {} }, options());
      await client.query('ROLLBACK');
      assert.deepEqual(await db.query(`SELECT topic, key, payload FROM "${db.schema}".outbox WHERE id = $1`, [kept]), [{ topic: 'old.kept', key: 'k', payload: { n: 1 } }]);
      assert.equal(await rows('old.undone'), 0);
    } finally {
      client.release();
    }
  });

  it('leaves no row of an enqueue not awaited before ROLLBACK', async () => {
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      const pending = enqueue(client, { topic: 'old.not-awaited', payload: {} }, options());
      await client.query('ROLLBACK');
      await pending;
    } finally {
      client.release();
    }
    assert.equal(await rows('old.not-awaited'), 0);
  });

  it("keeps the caller's own savepoint when its BEGIN was not awaited", async () => {
    const client = await pool.connect();
    try {
      const begin = client.query('BEGIN');
      const enqueued = enqueue(client, { topic: 'old.savepoint', payload: {} }, options());
      const mine = client.query('SAVEPOINT mine');
      await Promise.all([begin, enqueued, mine]);
      await client.query('RELEASE SAVEPOINT mine');
      await client.query('COMMIT');
    } finally {
      client.release();
    }
    assert.equal(await rows('old.savepoint'), 1);
  });

  it('completes a pull row only inside BEGIN', async () => {
    const pull = createPullClient(db.driver);
    await db.driver.inboxInsert({ source: 'old-pg', idempotencyKey: 'old-pg-1', aggregateId: 'a', payload: {}, consumption: 'pull' });
    const [message] = await pull.claim('old-pg', { batch: 1, leaseMs: 60_000 });
    const client = await pool.connect();
    try {
      await assert.rejects(pull.complete(client, message!.claim), (error: unknown) => error instanceof UsageError && /complete ran outside a transaction/.test(error.message));
      assert.deepEqual(await db.query(`SELECT state FROM "${db.schema}".inbox WHERE id = $1`, [message!.id]), [{ state: 'processing' }]);
      await client.query('BEGIN');
      assert.deepEqual(await pull.complete(client, message!.claim), { ok: true });
      await client.query('COMMIT');
    } finally {
      client.release();
    }
    assert.deepEqual(await db.query(`SELECT state FROM "${db.schema}".inbox WHERE id = $1`, [message!.id]), [{ state: 'processed' }]);
  });

  describe('through an object whose query forwards to a client', () => {
    /** A wrapper of a client of pg 8.20, and of one of the current pg: what it was sent, in order. */
    for (const which of ['pg 8.20', 'current pg'] as const) {
      const open = async () => {
        const client = which === 'pg 8.20' ? await pool.connect() : await db.pool.connect();
        const sent: { text: string; values: unknown[] | undefined }[] = [];
        const query = client.query.bind(client) as (text: string, values?: unknown[]) => Promise<unknown>;
        const wrapper = { query: (text: string, values?: unknown[]) => (sent.push({ text, values }), query(text, values)) };
        return { client, wrapper, sent };
      };

      it(`${which}: leaves no row of an enqueue not awaited before ROLLBACK`, async () => {
        const { client, wrapper } = await open();
        try {
          await client.query('BEGIN');
          const pending = enqueue(wrapper, { topic: 'wrap.not-awaited', key: 'k', payload: {} }, options());
          await client.query('ROLLBACK');
          await pending;
        } finally {
          client.release();
        }
        assert.equal(await rows('wrap.not-awaited'), 0, 'the INSERT ended with the transaction it was sent in');
      });

      it(`${which}: sends the check and the INSERT as one query, every value stored exactly as given`, async () => {
        const { client, wrapper, sent } = await open();
        const key = `it's \\ $1 $2 -- /* é 東 */ ''`;
        const payload = { text: "quote ' backslash \\ \\' dollar $9 E'x'", n: 12.5, list: ['--', '/*', '$$'] };
        const headers = { 'x-note': "a'b\\c", 'x-dollar': '$1' };
        try {
          await client.query('BEGIN');
          // Backslashes are written in E'' strings, read the same under either setting.
          await client.query('SET LOCAL standard_conforming_strings = off');
          const id = await enqueue(wrapper, { topic: 'wrap.exact', key, payload, headers, delayMs: 1500 }, { ...options(), maxAttempts: 7 });
          await client.query('COMMIT');
          assert.equal(sent.length, 1, `one query: ${JSON.stringify(sent.map((q) => q.text.slice(0, 60)))}`);
          assert.equal(sent[0]!.values, undefined, 'a simple query: no bind values');
          assert.match(sent[0]!.text, /^SAVEPOINT (\w+); RELEASE SAVEPOINT \1; INSERT /);
          const [row] = await db.query<{ key: string; payload: unknown; headers: unknown; max_attempts: number; late: boolean }>(
            `SELECT key, payload, headers, max_attempts, scheduled_at > created_at + interval '1 second' AS late FROM "${db.schema}".outbox WHERE id = $1`,
            [id],
          );
          assert.deepEqual(row, { key, payload, headers, max_attempts: 7, late: true });
        } finally {
          client.release();
        }
      });

      it(`${which}: a value holding the literal's own quotes, or a backslash a multibyte client encoding reads into a character, is stored as a plain client stores it, never run`, async () => {
        // In GBK and BIG5 the UTF-8 bytes of 中 (E4 B8 AD) read as [E4 B8] [AD 5C]: the byte after
        // them, a backslash, becomes part of a character. Escaped with backslashes, the quote after
        // it would end the literal and the rest run as SQL.
        const injected = "中\\'::text, (SELECT jsonb_build_object($$injected$$, current_user)), $${}$$::jsonb, 5, --";
        const keys = [injected, 'ends in $q', '$q$ inside $qq$ and $qqq', "$$'\\"];
        const store = async (handle: 'wrapper' | 'client', encoding: string, backslashQuote: string, key: string) => {
          const { client, wrapper } = await open();
          try {
            await client.query('BEGIN');
            await client.query(`SET LOCAL backslash_quote = ${backslashQuote}`);
            await client.query(`SET LOCAL client_encoding = '${encoding}'`);
            const outcome = await enqueue(handle === 'wrapper' ? wrapper : client, { topic: 'wrap.encoding', key, payload: { real: 'payload' } }, options()).then(
              async (id) => {
                await client.query('RESET client_encoding');
                const [row] = (await client.query(`SELECT encode(convert_to(key, 'UTF8'), 'hex') AS key, payload FROM "${db.schema}".outbox WHERE id = $1`, [id])).rows;
                return { row };
              },
              (error: unknown) => ({ error: (error as { code?: string }).code ?? String(error) }),
            );
            await client.query('ROLLBACK');
            return outcome;
          } finally {
            client.release(true);
          }
        };
        for (const encoding of ['UTF8', 'GBK', 'BIG5', 'SJIS']) {
          for (const backslashQuote of ['on', 'safe_encoding']) {
            for (const key of keys) {
              const plain = await store('client', encoding, backslashQuote, key);
              const wrapped = await store('wrapper', encoding, backslashQuote, key);
              assert.deepEqual(wrapped, plain, `${encoding}, backslash_quote ${backslashQuote}, key ${JSON.stringify(key)}`);
              if ('row' in wrapped) assert.deepEqual(wrapped.row.payload, { real: 'payload' });
            }
          }
        }
      });

      it(`${which}: a forwarding object that answers with the rows of one statement only: enqueue stores its row and returns its id; complete refuses, naming what the object must return`, async () => {
        const { client } = await open();
        const query = client.query.bind(client) as (text: string, values?: unknown[]) => Promise<{ rows: unknown[]; rowCount: number | null }>;
        // Reads `rows` of what pg answered: for a query of several statements, an array, so undefined.
        const rowsOnly = { query: async (text: string, values?: unknown[]) => { const r = await query(text, values); return { rows: r.rows, rowCount: r.rowCount }; } };
        try {
          await client.query('BEGIN');
          const id = await enqueue(rowsOnly, { topic: 'wrap.rows-only', payload: { n: 1 } }, options());
          await client.query('COMMIT');
          assert.deepEqual(await db.query(`SELECT topic, payload FROM "${db.schema}".outbox WHERE id = $1`, [id]), [{ topic: 'wrap.rows-only', payload: { n: 1 } }]);
          const pull = createPullClient(db.driver);
          await db.driver.inboxInsert({ source: 'rows-only', idempotencyKey: `rows-only-${which}`, aggregateId: which, payload: {}, consumption: 'pull' });
          const [message] = await pull.claim('rows-only', { batch: 1, leaseMs: 60_000 });
          await client.query('BEGIN');
          await assert.rejects(pull.complete(rowsOnly as unknown as pgTypes.ClientBase, message!.claim), (error: unknown) => error instanceof UsageError && /array of results/.test(error.message) && /roll it back/.test(error.message));
          await client.query('ROLLBACK');
          assert.deepEqual(await db.query(`SELECT state FROM "${db.schema}".inbox WHERE id = $1`, [message!.id]), [{ state: 'processing' }]);
        } finally {
          client.release(true);
        }
      });

      it(`${which}: refuses it without BEGIN, writing nothing`, async () => {
        const { client, wrapper } = await open();
        try {
          await assert.rejects(enqueue(wrapper, { topic: 'wrap.no-begin', key: "a'b", payload: { x: '\\' } }, options()), outside);
        } finally {
          client.release();
        }
        assert.equal(await rows('wrap.no-begin'), 0);
      });
    }
  });

  it('refuses an object whose query forwards to a pool (the server is asked), writing nothing', async () => {
    const wrapper = { query: (text: string, values?: unknown[]) => db.pool.query(text, values) };
    await assert.rejects(enqueue(wrapper, { topic: 'old.wrapper', payload: {} }, options()), outside);
    assert.equal(await rows('old.wrapper'), 0);
  });
});
