/**
 * Outbox claims against other transactions on a live SQL Server, beyond the conformance suite:
 *
 * - late commit: a lower-sequence row of a key, inserted by a transaction that has not committed,
 *   neither holds up the claim of other keys nor is overtaken by the key's later rows;
 * - a claim cancelled mid-way (holding its claim lock, waiting on a key's head whose finishing
 *   write another transaction has not committed) leaves no transaction, no lock and no
 *   half-claimed row;
 * - a staged deadlock: that claim waits on the head, and the other transaction asks for the claim
 *   lock. The victim's error is mapped (a claim: `TransientDatabaseError` 1205, nothing claimed)
 *   or the claim survives its victim;
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
import { loadMssql } from '../../lib/db/sqlserver/mssql-module.ts';

// The SQL Server modules reach `mssql` through mssql(); QueueBox loads it in importOptional, tests here.
await loadMssql();

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

  /**
   * Locks a session holds in this database beyond the database itself, by kind and mode;
   * `outboxOnly`: the table-level (OBJECT) locks on the outbox only.
   */
  async function locksOf(spid: number, outboxOnly = false): Promise<Array<{ type: string; mode: string; n: number }>> {
    const { recordset } = await monitor
      .request()
      .input('spid', sql.Int, spid)
      .input('outbox', sql.NVarChar(300), outboxOnly ? names.outbox : null)
      .query<{ type: string; mode: string; n: number }>(
        `SELECT resource_type AS type, request_mode AS mode, COUNT(*) AS n FROM sys.dm_tran_locks
          WHERE request_session_id = @spid AND resource_database_id = DB_ID() AND resource_type <> N'DATABASE'
            AND (@outbox IS NULL OR (resource_type = N'OBJECT' AND resource_associated_entity_id = OBJECT_ID(@outbox)))
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

  /**
   * Key A's head is in flight and its finishing write (`sent`) is under way in another transaction
   * that has not committed; A's next row waits behind it. A claim meets that lower row in a
   * locking read (the pick's head lookup, or the `UPDATE`'s head re-check) and waits for it,
   * holding its claim lock, inside its transaction.
   */
  async function stageFinishingWrite(priority?: 'HIGH' | 'LOW'): Promise<{ held: Held; a1: OutboxRow; a2: string; others: string[] }> {
    await t.reset();
    const [a1Id] = await enqueueRows(t, [{ topic: 'wait', key: 'A', payload: { n: 1 } }]);
    const [a1] = await claim();
    assert.equal(a1?.id, a1Id, 'A’s head is in flight');
    const [a2, ...others] = await enqueueRows(t, [
      { topic: 'wait', key: 'A', payload: { n: 2 } },
      { topic: 'wait', key: 'B', payload: { n: 1 } },
      { topic: 'wait', key: 'C', payload: { n: 1 } },
      { topic: 'wait', payload: { keyless: true } },
    ]);
    const held = await begin();
    if (priority) await held.tx.request().batch(`SET DEADLOCK_PRIORITY ${priority};`);
    await held.tx.request().input('id', sql.UniqueIdentifier, a1!.id).query(`UPDATE ${names.outbox} SET state = N'sent', updated_at = SYSUTCDATETIME() WHERE id = @id;`);
    return { held, a1: a1!, a2: a2!, others };
  }

  it('a claim cancelled mid-way (claim lock held, waiting on a row) leaves no transaction, no lock and no half-claimed row', { skip }, async () => {
    const { held, a1, others } = await stageFinishingWrite();
    let waiting: number | undefined;
    try {
      const statement = buildOutboxClaim(names, { limit: 10, leaseMs: LEASE });
      const request = single.request();
      for (const p of statement.params) request.input(p.name, p.type, p.value);
      const cut = request.query(statementText(single, statement));
      cut.catch(() => {});
      waiting = await blockedBy(held.spid, cut);
      assert.notEqual(waiting, undefined, 'the claim waits on A’s head, whose finishing write has not committed');
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
    } finally {
      await held.tx.rollback().catch(() => {});
    }
    // Read once the other transaction has ended (a locking read would wait for it).
    assert.deepEqual(await openClaimState(), { processing: 1, tokens: 1 }, 'no row half-claimed: only A’s head, claimed before, is in flight');
    assert.equal((await t.row('outbox', a1.id))!.claim_token, a1.claimToken);
    const next = await claim();
    assert.deepEqual(ids(next).sort(), [others[0], others[1], others[2]].sort(), 'the next claim takes B, C and the keyless row; A waits for its head');
  });

  it('staged deadlock, the claim its victim (the other transaction has DEADLOCK_PRIORITY HIGH): mapped to TransientDatabaseError 1205, nothing claimed, no lock left; the finishing write lands and the next claim takes A’s next row', { skip }, async (c) => {
    const { held, a1, a2, others } = await stageFinishingWrite('HIGH');
    try {
      const claimed = claim();
      claimed.catch(() => {});
      if ((await blockedBy(held.spid, claimed)) === undefined) return c.skip('the claim did not wait on the row being written, so no deadlock could be staged');
      // The cycle: the claim holds its claim lock and waits on A's head; the other transaction asks for the claim lock.
      const lockRequest = askClaimLock(held);
      const outcome = await claimed.then(
        (rows) => ({ rows }),
        (error: unknown) => ({ error }),
      );
      const { recordset } = await lockRequest;
      assert.ok(recordset[0]!.result >= 0, `the other transaction got the claim lock: ${recordset[0]!.result}`);
      if ('error' in outcome) {
        const error = outcome.error as TransientDatabaseError;
        assert.ok(error instanceof TransientDatabaseError, `mapped to TransientDatabaseError (a worker backs off and claims again): ${String(error)}`);
        assert.equal(error.code, '1205', `the deadlock victim's number (1222 would mean the claim's lock timeout ended its wait before the deadlock monitor ran): ${error.message}`);
        assert.match(error.message, /deadlock/i);
        await held.tx.commit();
        assert.deepEqual(await openClaimState(), { processing: 0, tokens: 1 }, 'the victim claimed nothing (A’s head is sent, with its token)');
        const next = await claim();
        assert.deepEqual(ids(next).sort(), [a2, ...others].sort(), 'the next claim takes A’s next row, B, C and the keyless row');
      } else {
        assert.fail(`the claim returned ${JSON.stringify(ids(outcome.rows))} while the other transaction held the claim lock and A’s head (${a1.id})`);
      }
    } finally {
      await held.tx.rollback().catch(() => {});
    }
  });

  it('staged deadlock, the other transaction its victim (DEADLOCK_PRIORITY LOW): the claim survives and goes on once the victim has rolled back', { skip }, async (c) => {
    const { held, a1, others } = await stageFinishingWrite('LOW');
    const claimed = claim();
    claimed.catch(() => {});
    try {
      if ((await blockedBy(held.spid, claimed)) === undefined) return c.skip('the claim did not wait on the row being written, so no deadlock could be staged');
      // sp_getapplock reports its own deadlock as -3, or the victim's batch fails with 1205.
      const victim = await askClaimLock(held).then(
        (r) => ({ result: r.recordset[0]!.result }),
        (error: unknown) => ({ number: (error as { number?: number }).number }),
      );
      assert.ok(('result' in victim && victim.result === -3) || ('number' in victim && victim.number === 1205), `the other transaction was the victim: ${JSON.stringify(victim)}`);
    } finally {
      await held.tx.rollback().catch(() => {});
    }
    const rows = await claimed;
    assert.deepEqual(ids(rows).sort(), [...others].sort(), 'the claim took B, C and the keyless row; A waits for its head, still in flight');
    assert.equal((await t.row('outbox', a1.id))!.state, 'processing', 'the victim’s finishing write was rolled back');
  });

  function askClaimLock(held: Held): Promise<sql.IResult<{ result: number }>> {
    const request = held.tx
      .request()
      .input('lock', sql.NVarChar(255), names.outboxClaimLock)
      .query<{ result: number }>(`DECLARE @r INT; EXEC @r = sp_getapplock @Resource = @lock, @LockMode = N'Exclusive', @LockOwner = N'Transaction', @LockTimeout = 60000; SELECT @r AS result;`);
    request.catch(() => {});
    return request;
  }

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

      const locks = await locksOf(held.spid, true);
      assert.deepEqual(
        locks.map((l) => l.mode),
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
    assert.ok(heads.length > 0, 'the committed bulk rows are claimed');
    assert.equal(new Set(heads.map((r) => r.key)).size, heads.length, 'one row per bulk key');
    const { recordset } = await monitor.request().query<{ id: string }>(
      `SELECT LOWER(CONVERT(NVARCHAR(36), id)) AS id FROM (SELECT id, ROW_NUMBER() OVER (PARTITION BY [key] ORDER BY [sequence]) AS rn FROM ${names.outbox} WHERE topic = N'bulk') AS r WHERE rn = 1;`,
    );
    const lowest = new Set(recordset.map((r) => r.id));
    assert.deepEqual(ids(heads).filter((id) => !lowest.has(id)), [], 'each claimed row is its key’s lowest sequence');
  });
});
