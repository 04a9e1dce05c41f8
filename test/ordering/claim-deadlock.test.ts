import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { PostgresDriver } from '../../lib/db/postgres/postgres-driver.ts';
import { outboxClaimPaths } from '../helpers/claim-paths.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';

/**
 * Two outbox claims that deadlock over the index of the keys' holders: the database ends one of
 * them, which changed nothing, and the claim runs again instead of failing the pass.
 *
 * How they meet: keys x and y each have a row that commits late with a lower sequence (x0, y0)
 * than their committed rows (x1, y1). Claim A starts before the late rows commit, so its heads are
 * x1 and y1; claim B starts after, so its heads are x0 and y0. Each claim updates its rows in id
 * order, and the ids are chosen so that A puts x in flight first and B puts y in flight first. A
 * trigger holds A between its two rows (on an advisory lock the test holds) until B has taken y
 * and waits on A's entry for x; A then waits on B's entry for y: a deadlock, found after
 * `deadlock_timeout` (1 s by default). Seen in the four-claimer test on PostgreSQL 18 as a claim
 * failing with 40P01.
 */
const X1 = '10000000-0000-4000-8000-000000000000';
const Y1 = '20000000-0000-4000-8000-000000000000';
const Y0 = '30000000-0000-4000-8000-000000000000';
const X0 = '40000000-0000-4000-8000-000000000000';

/** Counts the statements the server ended as deadlock victims, on every connection of a pool. */
function deadlockCountingClient(count: { deadlocks: number }): typeof pg.Client {
  class DeadlockCountingClient extends pg.Client {}
  const query = pg.Client.prototype.query as (...args: unknown[]) => unknown;
  DeadlockCountingClient.prototype.query = function (this: pg.Client, ...args: unknown[]) {
    const counted = (error: unknown) => {
      if ((error as { code?: string } | null)?.code === '40P01') count.deadlocks++;
    };
    // A query object (a statement sent with QueueBox's settings in its round trip): its error comes through its callback.
    const submitted = args[0] as { submit?: unknown; callback?: (error: Error | null, result: unknown) => void } | undefined;
    if (typeof submitted?.submit === 'function' && typeof submitted.callback === 'function') {
      const answer = submitted.callback;
      submitted.callback = (error, result) => {
        if (error) counted(error);
        answer(error, result);
      };
    }
    const result = query.apply(this, args);
    if (result instanceof Promise) result.catch(counted);
    return result;
  } as pg.Client['query'];
  return DeadlockCountingClient;
}

for (const { path, overrides } of outboxClaimPaths(20)) {
  describe(`two outbox claims that deadlock over the keys' holders (${path})`, () => {
    let db: TestDatabase;
    const count = { deadlocks: 0 };
    const pools: pg.Pool[] = [];
    const drivers: PostgresDriver[] = [];
    const driverFor = (options?: string) => {
      const pool = new pg.Pool({ connectionString: db.url, max: 2, Client: deadlockCountingClient(count), ...(options === undefined ? {} : { options }) });
      pool.on('error', () => {});
      pools.push(pool);
      const driver = new PostgresDriver({ config: db.config, url: db.url, pool });
      drivers.push(driver);
      return driver;
    };
    before(async () => {
      db = await createTestDatabase(overrides);
    });
    after(async () => {
      for (const driver of drivers) await driver.close();
      for (const pool of pools) await pool.end();
      await db.drop();
    });

    it('the claim the database ends runs again: neither fails, and each key has one row in flight', async () => {
      const t = `"${db.schema}".outbox`;
      // The trigger first: creating it waits for every open transaction that wrote the table. It
      // holds A before y1 until the test lets go of the advisory lock (one per test schema).
      await db.query(`CREATE FUNCTION "${db.schema}".hold_claim_a() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          IF OLD.id = '${Y1}' AND current_setting('qbtest.hold', true) = 'on' THEN PERFORM pg_advisory_xact_lock(hashtext('${db.schema}')); END IF;
          RETURN NEW;
        END $$`);
      await db.query(`CREATE TRIGGER hold_claim_a BEFORE UPDATE ON ${t} FOR EACH ROW EXECUTE FUNCTION "${db.schema}".hold_claim_a()`);
      const late = new pg.Client({ connectionString: db.url });
      const gate = new pg.Client({ connectionString: db.url });
      await late.connect();
      await gate.connect();
      try {
        await gate.query('SELECT pg_advisory_lock(hashtext($1))', [db.schema]);
        // Sequences in the order y0 < x0 < x1 < y1: the late rows take theirs first.
        await late.query('BEGIN');
        await late.query(`INSERT INTO ${t} (id, topic, key, payload) VALUES ($1, 't', 'y', '{}'), ($2, 't', 'x', '{}')`, [Y0, X0]);
        await db.query(`INSERT INTO ${t} (id, topic, key, payload) VALUES ($1, 't', 'x', '{}')`, [X1]);
        await db.query(`INSERT INTO ${t} (id, topic, key, payload) VALUES ($1, 't', 'y', '{}')`, [Y1]);

        const a = driverFor('-c qbtest.hold=on');
        const b = driverFor();
        const claimA = a.outboxClaimMany({ limit: 20, leaseMs: 30_000 });
        claimA.catch(() => {}); // awaited below; not left unhandled if a wait fails first
        // A has put x in flight and waits at the gate before y1; the late rows commit, then B
        // claims: it takes y0 and waits on A's entry for x. Then A goes on, and waits on B's for y.
        await waitForClaim(db, 'advisory');
        await late.query('COMMIT');
        const claimB = b.outboxClaimMany({ limit: 20, leaseMs: 30_000 });
        claimB.catch(() => {});
        await waitForClaim(db, 'transactionid');
        await gate.query('SELECT pg_advisory_unlock(hashtext($1))', [db.schema]);
        const [rowsA, rowsB] = await Promise.all([claimA, claimB]);

        assert.equal(count.deadlocks, 1, 'precondition: the database ended one of the two claims as a deadlock victim');
        const claimed = [...rowsA, ...rowsB].map((r) => r.id).sort();
        const inFlight = await db.query<{ id: string; key: string }>(`SELECT id, key FROM ${t} WHERE state = 'processing' ORDER BY key`);
        assert.deepEqual(claimed, inFlight.map((r) => r.id).sort(), 'what the claims returned is what is in flight');
        assert.deepEqual(inFlight.map((r) => r.key), ['x', 'y'], 'one row of each key in flight');
        assert.ok(
          (rowsA.length === 2 && rowsB.length === 0) || (rowsA.length === 0 && rowsB.length === 2),
          `the surviving claim holds both keys, the one that ran again found them in flight (A ${rowsA.length}, B ${rowsB.length})`,
        );
      } finally {
        await gate.end();
        await late.end();
      }
    });
  });
}

/**
 * Waits until a claim of the test's schema (its statement names the schema) waits on a lock of
 * type `event`: `advisory` (A at the gate), `transactionid` (B on A's entry for x).
 */
async function waitForClaim(db: TestDatabase, event: 'advisory' | 'transactionid'): Promise<void> {
  const until = Date.now() + 10_000;
  for (;;) {
    const rows = await db.query(
      `SELECT 1 FROM pg_stat_activity
        WHERE pid <> pg_backend_pid() AND wait_event_type = 'Lock' AND wait_event = $2 AND position($1 IN query) > 0`,
      [db.schema, event],
    );
    if (rows.length > 0) return;
    if (Date.now() > until) throw new Error(`no claim of the test waited on a lock of type ${event}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}
