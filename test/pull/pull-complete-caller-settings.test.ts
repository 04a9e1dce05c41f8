import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { FencedLockTimeoutError } from '../../lib/errors.ts';
import { createPullClient } from '../../lib/pull/pull-client.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { delay } from '../helpers/wait.ts';
import { insertPullRows } from './pull-fixtures.ts';

/**
 * `complete(tx, claim)` runs inside the caller's transaction: the lease bound it puts on its own
 * lock wait must not stay on the caller's later statements, and it is sent at once, before a
 * statement the caller sends after calling it.
 */
describe('pull complete leaves the caller transaction as it found it', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({ database: { poolMax: 4 } });
  });
  after(async () => db.drop());

  /** Stores one pull row of `source` and claims it: the row's id, the pull client and its message. */
  async function claimOne(source: string, leaseMs = 60_000) {
    const [id] = await insertPullRows(db, source, [{ key: 'a' }]);
    const client = createPullClient(db.driver);
    const [message] = await client.claim(source, { batch: 1, leaseMs });
    assert.equal(message?.id, id);
    return { id: id!, client, message: message! };
  }

  for (const setting of ['2s', '0'] as const) {
    it(`the caller's lock_timeout (${setting}) is unchanged after complete`, async () => {
      const source = `settings-${setting}`;
      const { client, message } = await claimOne(source);
      const tx = await db.pool.connect();
      try {
        await tx.query('BEGIN');
        await tx.query(`SET LOCAL lock_timeout = '${setting}'`);
        const before = (await tx.query<{ lock_timeout: string }>('SHOW lock_timeout')).rows[0]!.lock_timeout;
        assert.deepEqual(await client.complete(tx, message!.claim), { ok: true });
        const afterComplete = (await tx.query<{ lock_timeout: string }>('SHOW lock_timeout')).rows[0]!.lock_timeout;
        await tx.query('COMMIT');
        assert.equal(afterComplete, before);
      } finally {
        tx.release();
      }
    });
  }

  for (const foreign of ['10s', 'on'] as const) {
    it(`puts the caller's lock_timeout back when queuebox.lock_timeout already holds a value of someone else's (${foreign})`, async () => {
      const source = `foreign-${foreign}`;
      const { client, message } = await claimOne(source);
      const tx = await db.pool.connect();
      let committed = false;
      try {
        // Another user of the same setting name (the application, an older QueueBox), for the session.
        await tx.query(`SET queuebox.lock_timeout = '${foreign}'`);
        await tx.query('BEGIN');
        await tx.query(`SET LOCAL lock_timeout = '2s'`);
        assert.deepEqual(await client.complete(tx, message!.claim), { ok: true });
        assert.equal((await tx.query<{ lock_timeout: string }>('SHOW lock_timeout')).rows[0]!.lock_timeout, '2s');
        await tx.query('COMMIT');
        committed = true;
        assert.equal((await tx.query<{ v: string }>(`SELECT current_setting('queuebox.lock_timeout') AS v`)).rows[0]!.v, foreign, 'the session value is back after the transaction');
        await tx.query('RESET queuebox.lock_timeout');
      } finally {
        tx.release(!committed);
      }
    });
  }

  it("is one statement on the caller's client: nothing of its own waits behind another query (pg 8 warns of that, pg 9 refuses it)", async () => {
    const { id, client, message } = await claimOne('one-statement');
    const warnings: string[] = [];
    const onWarning = (warning: Error) => warnings.push(warning.message);
    process.on('warning', onWarning);
    const tx = await db.pool.connect();
    let committed = false;
    try {
      await tx.query('BEGIN');
      await tx.query(`SET LOCAL lock_timeout = '3s'`);
      // A spy on the caller's client: what complete sends, and how many of its queries were open at once.
      const sent: string[] = [];
      let open = 0;
      let most = 0;
      const query = tx.query.bind(tx) as (text: string, values?: unknown[]) => Promise<unknown>;
      const spy = Object.assign(Object.create(tx) as typeof tx, {
        query: (text: string, values?: unknown[]) => {
          sent.push(text);
          most = Math.max(most, ++open);
          const answer = query(text, values);
          answer.then(() => open--, () => open--);
          return answer;
        },
      });
      assert.deepEqual(await client.complete(spy, message!.claim), { ok: true });
      assert.equal(sent.length, 1, `one statement, not ${sent.length}`);
      assert.equal(most, 1);
      assert.equal((await tx.query<{ lock_timeout: string }>('SHOW lock_timeout')).rows[0]!.lock_timeout, '3s');
      await tx.query('COMMIT');
      committed = true;
    } finally {
      // A failed check leaves the transaction open: that connection is not given back to the pool.
      tx.release(!committed);
      await new Promise((resolve) => setImmediate(resolve));
      process.off('warning', onWarning);
    }
    assert.deepEqual(warnings.filter((w) => /already executing a query/.test(w)), []);
    const [row] = await db.query<{ state: string }>(`SELECT state FROM "${db.schema}".inbox WHERE id = $1`, [id]);
    assert.equal(row!.state, 'processed');
  });

  it("waits on a row lock no longer than the claim's lease, inside the caller's transaction too", async () => {
    const leaseMs = 1500;
    const { id, message } = await claimOne('locked', leaseMs);
    const claimedAt = Date.now();
    const holder = await db.pool.connect();
    const tx = await db.pool.connect();
    try {
      await holder.query('BEGIN');
      await holder.query(`SELECT id FROM "${db.schema}".inbox WHERE id = $1 FOR UPDATE`, [id]);
      await tx.query('BEGIN');
      // The caller's own bound, far beyond the lease: the write is held to the lease instead.
      await tx.query(`SET LOCAL lock_timeout = '60s'`);
      await assert.rejects(db.driver.pullComplete(tx, message!.claim), FencedLockTimeoutError);
      const waited = Date.now() - claimedAt;
      assert.ok(waited < leaseMs + 3000, `gave up at the lease's end, not the caller's 60 s (${waited} ms after the claim)`);
      await tx.query('ROLLBACK');
    } finally {
      await holder.query('ROLLBACK').catch(() => undefined);
      holder.release();
      tx.release();
    }
    const [row] = await db.query<{ state: string }>(`SELECT state FROM "${db.schema}".inbox WHERE id = $1`, [id]);
    assert.equal(row!.state, 'processing', 'nothing written');
  });

  it("after waiting on a row another transaction updated, writes and puts the caller's lock_timeout back (the row's conditions evaluated twice)", async () => {
    const { id, message } = await claimOne('rechecked');
    const holder = await db.pool.connect();
    const tx = await db.pool.connect();
    let committed = false;
    try {
      await holder.query('BEGIN');
      // An update (not only a lock): PostgreSQL checks the waiting write's conditions again on the new row version.
      await holder.query(`UPDATE "${db.schema}".inbox SET updated_at = clock_timestamp() WHERE id = $1`, [id]);
      await tx.query('BEGIN');
      await tx.query(`SET LOCAL lock_timeout = '45s'`);
      const completed = db.driver.pullComplete(tx, message!.claim);
      await delay(300);
      await holder.query('COMMIT');
      assert.equal(await completed, true);
      assert.equal((await tx.query<{ lock_timeout: string }>('SHOW lock_timeout')).rows[0]!.lock_timeout, '45s');
      await tx.query('COMMIT');
      committed = true;
    } finally {
      await holder.query('ROLLBACK').catch(() => undefined);
      holder.release();
      tx.release(!committed);
    }
    const [row] = await db.query<{ state: string }>(`SELECT state FROM "${db.schema}".inbox WHERE id = $1`, [id]);
    assert.equal(row!.state, 'processed');
  });

  it('a complete called before the caller commits is written inside the transaction', async () => {
    const { id, client, message } = await claimOne('order');
    const tx = await db.pool.connect();
    try {
      await tx.query('BEGIN');
      const completed = client.complete(tx, message!.claim);
      await tx.query('ROLLBACK');
      await completed.catch(() => undefined);
    } finally {
      tx.release();
    }
    const [row] = await db.query<{ state: string }>(`SELECT state FROM "${db.schema}".inbox WHERE id = $1`, [id]);
    assert.equal(row!.state, 'processing', 'rolled back with the caller transaction');
  });
});
