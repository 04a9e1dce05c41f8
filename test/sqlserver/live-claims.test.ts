/**
 * Outbox claims against other transactions on a live SQL Server, beyond the conformance suite:
 *
 * - late commit: a lower-sequence row of a key, inserted by a transaction that has not committed,
 *   neither holds up the claim of other keys nor is overtaken by the key's later rows;
 * - a claim cancelled mid-way (holding its claim lock, waiting on a row) leaves no transaction,
 *   no lock and no half-claimed row;
 * - a staged deadlock between a claim and another transaction: the victim's error is mapped
 *   (a claim: `TransientDatabaseError` 1205, nothing claimed) or the claim survives its victim;
 * - a 10,000-row set-based insert into the outbox, uncommitted while claims run: claims go on,
 *   the insert holds no table lock and nothing escalates.
 *
 * Runs when `QUEUEBOX_MSSQL_URL` is set (a fresh schema, dropped afterwards; the login needs
 * `VIEW SERVER STATE` to watch waits and locks, as `sa` has); skipped with the reason otherwise.
 * Where a case must wait until another session is blocked, it polls `sys.dm_os_waiting_tasks`
 * a bounded number of times; no assertion is about time.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import sql from 'mssql';
import { parseConfig } from '../../lib/config/load-config.ts';
import { TransientDatabaseError } from '../../lib/errors.ts';
import { buildOutboxClaim } from '../../lib/db/sqlserver/outbox-claim.ts';
import { createMssqlPool, statementText } from '../../lib/db/sqlserver/mssql-pool.ts';
import type { MssqlNames } from '../../lib/db/sqlserver/names.ts';
import type { SqlServerDriver } from '../../lib/db/sqlserver/sqlserver-driver.ts';
import type { OutboxRow } from '../../lib/db/driver.ts';
import { createSqlServerTarget } from '../conformance/sqlserver-target.ts';
import { enqueueRows, type ConformanceTarget } from '../conformance/driver-conformance.ts';

const url = process.env.QUEUEBOX_MSSQL_URL;
const skip = url ? false : 'QUEUEBOX_MSSQL_URL is not set: no SQL Server on this machine (npm run test:sqlserver starts one in Docker)';
const LEASE = 60_000;

/** A transaction on its own connection, held open until the case ends it. */
interface Held {
  tx: sql.Transaction;
  spid: number;
}

describe('SQL Server claims against other transactions (live)', { timeout: 600_000 }, () => {
  let t: ConformanceTarget;
  let names: MssqlNames;
  /** One connection: the claim a case cancels, then checked on that same connection. */
  let single: sql.ConnectionPool;
  /** The other transaction of a case. */
  let other: sql.ConnectionPool;
  /** Reads waits and locks of the other two. */
  let monitor: sql.ConnectionPool;

  before(async () => {
    if (!url) return;
    t = await createSqlServerTarget(url);
    names = (t.driver as SqlServerDriver).names;
    const database = parseConfig({ database: { type: 'sqlserver', url, poolMax: 1 } }).database;
    [single, other, monitor] = [createMssqlPool(database, url), createMssqlPool(database, url), createMssqlPool(database, url)];
    await Promise.all([single.connect(), other.connect(), monitor.connect()]);
  });
  after(async () => {
    await Promise.all([single?.close(), other?.close(), monitor?.close()]);
    await t?.close();
  });

  async function begin(): Promise<Held> {
    const tx = new sql.Transaction(other);
    await tx.begin(sql.ISOLATION_LEVEL.READ_COMMITTED);
    const { recordset } = await tx.request().query<{ spid: number }>('SELECT @@SPID AS spid;');
    return { tx, spid: recordset[0]!.spid };
  }

  /** X-locks row `id` without changing it, as a writer of that row would. */
  async function lockRow(held: Held, id: string): Promise<void> {
    await held.tx.request().input('id', sql.UniqueIdentifier, id).query(`UPDATE ${names.outbox} SET payload = payload WHERE id = @id;`);
  }

  /**
   * The session blocked by `spid`, once one is; `undefined` when `work` settles first (it never
   * waited). Polls at most 400 times.
   */
  async function blockedBy(spid: number, work: Promise<unknown>): Promise<number | undefined> {
    let settled = false;
    void work.then(
      () => (settled = true),
      () => (settled = true),
    );
    for (let i = 0; i < 400; i++) {
      const { recordset } = await monitor.request().input('spid', sql.SmallInt, spid).query<{ session_id: number }>('SELECT TOP (1) session_id FROM sys.dm_os_waiting_tasks WHERE blocking_session_id = @spid;');
      if (recordset[0]) return recordset[0].session_id;
      if (settled) return undefined;
      await sleep(25);
    }
    throw new Error(`no session waited on session ${spid}, and the work did not settle`);
  }

  /** Locks a session holds on the outbox beyond the database: [resource_type, request_mode, count]. */
  async function locksOf(spid: number): Promise<Array<{ type: string; mode: string; n: number }>> {
    const { recordset } = await monitor
      .request()
      .input('spid', sql.Int, spid)
      .query<{ type: string; mode: string; n: number }>(
        `SELECT resource_type AS type, request_mode AS mode, COUNT(*) AS n FROM sys.dm_tran_locks
          WHERE request_session_id = @spid AND resource_database_id = DB_ID() AND resource_type <> N'DATABASE'
          GROUP BY resource_type, request_mode ORDER BY resource_type, request_mode;`,
      );
    return recordset;
  }

  async function openClaimState(): Promise<{ processing: number; tokens: number }> {
    const { recordset } = await monitor.request().query<{ processing: number; tokens: number }>(
      `SELECT SUM(CASE WHEN state = N'processing' THEN 1 ELSE 0 END) AS processing, SUM(CASE WHEN claim_token IS NOT NULL THEN 1 ELSE 0 END) AS tokens FROM ${names.outbox};`,
    );
    return { processing: Number(recordset[0]?.processing ?? 0), tokens: Number(recordset[0]?.tokens ?? 0) };
  }

  const ids = (rows: OutboxRow[]) => rows.map((r) => r.id);
  const claim = (limit = 10) => t.driver.outboxClaimMany({ limit, leaseMs: LEASE });
  const settle = async (rows: OutboxRow[]) => t.driver.outboxMarkSentMany({ claims: rows.map((r) => ({ id: r.id, token: r.claimToken })) });

  it('late commit: a key’s lower row, uncommitted, neither holds up the claim of other keys nor is overtaken by the key’s later row', { skip }, async () => {
    await t.reset();
    const { recordset } = await monitor.request().query<{ rcsi: boolean }>('SELECT is_read_committed_snapshot_on AS rcsi FROM sys.databases WHERE database_id = DB_ID();');
    const setting = `READ_COMMITTED_SNAPSHOT ${recordset[0]!.rcsi ? 'ON' : 'OFF'}`;
    // The application's transaction takes K's first sequence number and has not committed yet.
    let inserted!: () => void;
    let release!: () => void;
    const insertedSignal = new Promise<void>((resolve) => (inserted = resolve));
    const gate = new Promise<void>((resolve) => (release = resolve));
    let lateId = '';
    const late = t.inTransaction(async (tx) => {
      lateId = await t.driver.outboxInsert(tx, { topic: 'late', key: 'K', payload: { n: 1 } }, { maxAttempts: 5 });
      inserted();
      await gate;
    }, 'commit');
    try {
      await insertedSignal;
      const [k2, l1, m1] = await enqueueRows(t, [
        { topic: 'late', key: 'K', payload: { n: 2 } },
        { topic: 'late', key: 'L', payload: { n: 1 } },
        { topic: 'late', key: 'M', payload: { n: 1 } },
      ]);
      let during: OutboxRow[];
      try {
        during = await claim();
      } catch (error) {
        assert.fail(`${setting}: the claim of keys L and M was held up by key K's uncommitted row: ${String((error as Error).message)}`);
      }
      assert.deepEqual(ids(during).sort(), [l1, m1].sort(), `${setting}: the other keys are claimed; K's later row ${k2} is not (its head has not committed)`);
      await settle(during);
      release();
      await late;
      const next = await claim();
      assert.deepEqual(ids(next), [lateId], `${setting}: once committed, K's lower row is K's head and is claimed first`);
      await settle(next);
      assert.deepEqual(ids(await claim()), [k2], `${setting}: then K's later row`);
    } finally {
      release();
      await late.catch(() => {});
    }
  });

  it('a claim cancelled mid-way (claim lock held, waiting on a row) leaves no transaction, no lock and no half-claimed row', { skip }, async () => {
    await t.reset();
    const [a1, b1, c1, , keyless] = await enqueueRows(t, [
      { topic: 'cut', key: 'A', payload: { n: 1 } },
      { topic: 'cut', key: 'B', payload: { n: 1 } },
      { topic: 'cut', key: 'C', payload: { n: 1 } },
      { topic: 'cut', key: 'A', payload: { n: 2 } },
      { topic: 'cut', payload: { keyless: true } },
    ]);
    const held = await begin();
    try {
      await lockRow(held, a1!);
      const statement = buildOutboxClaim(names, { limit: 10, leaseMs: LEASE });
      const request = single.request();
      for (const p of statement.params) request.input(p.name, p.type, p.value);
      const cut = request.query(statementText(single, statement));
      const waiting = await blockedBy(held.spid, cut);
      assert.notEqual(waiting, undefined, 'the claim waits on the locked head of key A (its claim lock taken, its transaction open)');
      assert.deepEqual(
        (await locksOf(waiting!)).filter((l) => l.type === 'APPLICATION').map((l) => l.mode),
        ['X'],
        'while it waits, the claim holds its claim lock',
      );
      request.cancel();
      await assert.rejects(cut, 'the cancelled claim fails');

      const { recordset } = await single.request().input('lock', sql.NVarChar(255), names.outboxClaimLock).query<{ open: number; held: string; spid: number }>(
        `SELECT @@TRANCOUNT AS [open], APPLOCK_MODE(N'public', @lock, N'Transaction') AS held, @@SPID AS spid;`,
      );
      assert.deepEqual({ open: recordset[0]!.open, held: recordset[0]!.held }, { open: 0, held: 'NoLock' });
      assert.equal(recordset[0]!.spid, waiting, 'checked on the connection the claim ran on');
      assert.deepEqual(await locksOf(waiting!), [], 'no lock of the cancelled claim remains');
      assert.deepEqual(await openClaimState(), { processing: 0, tokens: 0 }, 'no row half-claimed: rows of keys B, C and the keyless row were not taken either');
    } finally {
      await held.tx.rollback().catch(() => {});
    }
    const next = await claim();
    assert.deepEqual(ids(next).sort(), [a1, b1, c1, keyless].sort(), 'the next claim takes every head and the keyless row, not A\'s second row');
  });

  /**
   * The cycle: the claim holds its claim lock and waits on the head row another transaction has
   * locked; that transaction then asks for the claim lock. SQL Server picks a victim by
   * DEADLOCK_PRIORITY.
   */
  async function stageDeadlock(priority: 'HIGH' | 'LOW'): Promise<{ claimed: Promise<OutboxRow[]>; held: Held; lockRequest: Promise<sql.IResult<{ result: number }>>; head: string; later: string } | undefined> {
    await t.reset();
    const [head, later] = await enqueueRows(t, [
      { topic: 'deadlock', key: 'D', payload: { n: 1 } },
      { topic: 'deadlock', key: 'D', payload: { n: 2 } },
    ]);
    const held = await begin();
    await held.tx.request().batch(`SET DEADLOCK_PRIORITY ${priority};`);
    await lockRow(held, head!);
    const claimed = claim();
    claimed.catch(() => {});
    const waiting = await blockedBy(held.spid, claimed);
    if (waiting === undefined) {
      await held.tx.rollback().catch(() => {});
      return undefined;
    }
    const lockRequest = held.tx
      .request()
      .input('lock', sql.NVarChar(255), names.outboxClaimLock)
      .query<{ result: number }>(`DECLARE @r INT; EXEC @r = sp_getapplock @Resource = @lock, @LockMode = N'Exclusive', @LockOwner = N'Transaction', @LockTimeout = 60000; SELECT @r AS result;`);
    lockRequest.catch(() => {});
    return { claimed, held, lockRequest, head: head!, later: later! };
  }

  it('staged deadlock, the claim its victim (the other transaction has DEADLOCK_PRIORITY HIGH): a TransientDatabaseError 1205, nothing claimed, no lock left; the next claim takes the head', { skip }, async (c) => {
    const staged = await stageDeadlock('HIGH');
    if (!staged) return c.skip('the claim did not wait on the locked head, so no deadlock could be staged');
    try {
      const outcome = await staged.claimed.then(
        (rows) => ({ rows }),
        (error: unknown) => ({ error }),
      );
      assert.ok('error' in outcome, `the claim was expected to be the victim; it returned ${JSON.stringify('rows' in outcome ? ids(outcome.rows) : [])}`);
      const error = outcome.error as TransientDatabaseError;
      assert.ok(error instanceof TransientDatabaseError, `mapped to TransientDatabaseError (a worker backs off and claims again): ${String(error)}`);
      assert.equal(error.code, '1205', `the deadlock victim's number (1222 would mean the claim's lock timeout ended its wait before the deadlock monitor ran): ${error.message}`);
      assert.match(error.message, /deadlock/i);
      const { recordset } = await staged.lockRequest;
      assert.ok(recordset[0]!.result >= 0, 'the other transaction got the claim lock once the victim rolled back');
      assert.deepEqual(await openClaimState(), { processing: 0, tokens: 0 }, 'the victim claimed nothing');
    } finally {
      await staged.held.tx.rollback().catch(() => {});
    }
    assert.deepEqual(ids(await claim()), [staged.head], 'the next claim takes the head, not the later row');
  });

  it('staged deadlock, the other transaction its victim (DEADLOCK_PRIORITY LOW): the claim survives and takes the head once the victim has rolled back', { skip }, async (c) => {
    const staged = await stageDeadlock('LOW');
    if (!staged) return c.skip('the claim did not wait on the locked head, so no deadlock could be staged');
    // sp_getapplock reports its own deadlock as -3, or the victim's batch fails with 1205.
    const victim = await staged.lockRequest.then(
      (r) => ({ result: r.recordset[0]!.result }),
      (error: unknown) => ({ number: (error as { number?: number }).number }),
    );
    assert.ok(('result' in victim && victim.result === -3) || ('number' in victim && victim.number === 1205), `the other transaction was the victim: ${JSON.stringify(victim)}`);
    await staged.held.tx.rollback().catch(() => {});
    const rows = await staged.claimed;
    assert.deepEqual(ids(rows), [staged.head], 'the claim took the head and not the later row');
    assert.deepEqual(await openClaimState(), { processing: 1, tokens: 1 });
  });

  it('a 10,000-row set-based insert into the outbox, uncommitted while claims run: claims go on, no table lock, no escalation; after its commit its keys move in order', { skip }, async () => {
    await t.reset();
    const waiting = await enqueueRows(t, Array.from({ length: 40 }, (_, n) => ({ topic: 'before', key: `w-${n}`, payload: { n } })));
    const escalationsBefore = await t.lockEscalations!('outbox');
    const held = await begin();
    const claimed: OutboxRow[] = [];
    const errors: string[] = [];
    try {
      const insert = held.tx.request().query(
        `INSERT INTO ${names.outbox} (topic, [key], payload)
         SELECT N'bulk', CONCAT(N'bulk-', n % 100), CONCAT(N'{"n":', n, N'}')
           FROM (SELECT TOP (10000) ROW_NUMBER() OVER (ORDER BY (SELECT NULL)) AS n FROM sys.all_columns AS a CROSS JOIN sys.all_columns AS b) AS numbers
          ORDER BY n;`,
      );
      // Claims while the insert runs, and after it while its transaction stays open.
      let inserting = true;
      void insert.finally(() => (inserting = false)).catch(() => {});
      const loop = async () => {
        for (let round = 0; inserting || round < 2; round++) {
          try {
            const rows = await claim(5);
            claimed.push(...rows);
            await settle(rows);
          } catch (error) {
            errors.push(String((error as Error).message));
          }
        }
      };
      await Promise.all([insert, loop()]);
      assert.deepEqual(errors, [], 'no claim failed (a table lock would make each wait its lock timeout and fail with 1222)');

      const locks = await locksOf(held.spid);
      assert.deepEqual(
        locks.filter((l) => l.type === 'OBJECT').map((l) => l.mode),
        ['IX'],
        `the insert holds intent locks on the table, not a table lock: ${JSON.stringify(locks)}`,
      );
      assert.equal(await t.lockEscalations!('outbox'), escalationsBefore, 'no lock escalation on the outbox');
      // Deterministic: with the insert's 10,000 rows uncommitted, a claim still takes the rows that were waiting.
      const rest = await claim(100);
      claimed.push(...rest);
      await settle(rest);
      assert.deepEqual(ids(claimed).sort(), [...waiting].sort(), 'every waiting row was claimed, once; no uncommitted bulk row');
      await held.tx.commit();
    } finally {
      await held.tx.rollback().catch(() => {});
    }
    assert.equal(await t.count('outbox', 'pending'), 10_000, 'the 10,000 rows landed');
    const heads = await claim(100);
    assert.equal(heads.length, 100, 'one head per bulk key');
    const { recordset } = await monitor.request().query<{ id: string }>(
      `SELECT LOWER(CONVERT(NVARCHAR(36), id)) AS id FROM (SELECT id, ROW_NUMBER() OVER (PARTITION BY [key] ORDER BY [sequence]) AS rn FROM ${names.outbox} WHERE topic = N'bulk') AS r WHERE rn = 1;`,
    );
    assert.deepEqual(ids(heads).sort(), recordset.map((r) => r.id).sort(), 'each key’s lowest sequence');
  });
});
