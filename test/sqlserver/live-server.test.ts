/**
 * SQL Server behaviour only a live server shows, beyond the conformance suite: a claim cut off by
 * the client (cancel or request timeout) leaves no transaction and no claim lock on its pooled
 * connection, and a claim refuses to run inside an open transaction. Runs when
 * `QUEUEBOX_MSSQL_URL` is set; skipped with the reason otherwise. Also: a fenced write chosen as a
 * deadlock victim is run again and lands.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import sql from 'mssql';
import { parseConfig } from '../../lib/config/load-config.ts';
import { QueueBoxError } from '../../lib/errors.ts';
import { mssqlNames } from '../../lib/db/sqlserver/names.ts';
import { buildOutboxClaim } from '../../lib/db/sqlserver/outbox-claim.ts';
import { createMssqlPool, runStatement, statementText } from '../../lib/db/sqlserver/mssql-pool.ts';
import { createSqlServerTarget } from '../conformance/sqlserver-target.ts';
import { enqueueRows, type ConformanceTarget } from '../conformance/driver-conformance.ts';
import { loadMssql } from '../../lib/db/sqlserver/mssql-module.ts';

// The SQL Server modules reach `mssql` through mssql(); QueueBox loads it in importOptional, tests here.
await loadMssql();

const url = process.env.QUEUEBOX_MSSQL_URL;
const skip = url ? false : 'QUEUEBOX_MSSQL_URL is not set: no SQL Server on this machine';

describe('SQL Server on a live server', () => {
  let t: ConformanceTarget;
  let single: sql.ConnectionPool;
  let blocker: sql.ConnectionPool;
  let names: ReturnType<typeof mssqlNames>;

  before(async () => {
    if (!url) return;
    t = await createSqlServerTarget(url!);
    names = (t.driver as unknown as { names: ReturnType<typeof mssqlNames> }).names;
    const database = parseConfig({ database: { type: 'sqlserver', url: url!, poolMax: 1 } }).database;
    single = createMssqlPool(database, url!);
    blocker = createMssqlPool(database, url!);
    await Promise.all([single.connect(), blocker.connect()]);
  });
  after(async () => {
    await Promise.all([single?.close(), blocker?.close()]);
    await t?.close();
  });

  it('a claim cancelled while it waits leaves no transaction and no claim lock on its connection; the next claim is not held up', { skip }, async () => {
    await t.reset();
    // K's head is in flight and its finishing write has not committed: a claim reading K waits for
    // that row (the claims wait for no application row, but do wait for such a write).
    const [head] = await enqueueRows(t, [{ topic: 'cut', key: 'K', payload: { n: 1 } }]);
    const [inFlight] = await t.driver.outboxClaimMany({ limit: 10, leaseMs: 60_000 });
    assert.equal(inFlight?.id, head);
    const [next] = await enqueueRows(t, [{ topic: 'cut', key: 'K', payload: { n: 2 } }]);
    const hold = new sql.Transaction(blocker);
    await hold.begin(sql.ISOLATION_LEVEL.READ_COMMITTED);
    await hold.request().input('id', sql.UniqueIdentifier, head).query(`UPDATE ${names.outbox} SET state = N'sent', updated_at = SYSUTCDATETIME() WHERE id = @id;`);

    const statement = buildOutboxClaim(names, { limit: 10, leaseMs: 60_000 });
    const request = single.request();
    for (const p of statement.params) request.input(p.name, p.type, p.value);
    const claim = request.query(statementText(single, statement));
    claim.catch(() => {});
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    request.cancel();
    await assert.rejects(claim, 'the claim waited on K’s head and was cancelled');

    const { recordset } = await single.request().input('lock', sql.NVarChar(255), names.outboxClaimLock).query<{ open: number; held: string }>(
      `SELECT @@TRANCOUNT AS [open], APPLOCK_MODE(N'public', @lock, N'Transaction') AS held;`,
    );
    assert.deepEqual(recordset[0], { open: 0, held: 'NoLock' });

    await hold.commit();
    // A lock left behind would make this claim wait LOCK_TIMEOUT (10 s) and fail with error 1222
    // (or, retried, run into the test's timeout).
    const claimed = await t.newDriver().outboxClaimMany({ limit: 10, leaseMs: 60_000 });
    assert.deepEqual(claimed.map((r) => r.id), [next], 'no lock left behind: the claim takes K’s next row, now its head');
  });

  it('a claim refuses to run inside an open transaction (it would commit nothing and keep its lock)', { skip }, async () => {
    const tx = new sql.Transaction(single);
    await tx.begin();
    try {
      await assert.rejects(runStatement(tx, buildOutboxClaim(names, { limit: 1, leaseMs: 60_000 })), (e: unknown) => e instanceof QueueBoxError && /open transaction/.test(e.message));
    } finally {
      await tx.rollback().catch(() => {});
    }
  });

  it('a fenced write chosen as deadlock victim runs again and lands: a delivered row is marked sent, not lost', { skip }, async () => {
    await t.reset();
    await enqueueRows(t, [{ topic: 'deadlock', payload: { n: 1 } }, { topic: 'deadlock', payload: { n: 2 } }]);
    const claimed = await t.driver.outboxClaimMany({ limit: 2, leaseMs: 60_000 });
    assert.equal(claimed.length, 2);
    const [first, second] = claimed as [(typeof claimed)[0], (typeof claimed)[0]];
    // The other transaction locks the second row; the fenced write locks the first and waits for
    // the second (it takes rows in the items' order, a nested loop over OPENJSON); the other
    // transaction then asks for the first: a deadlock, which the other transaction
    // (DEADLOCK_PRIORITY HIGH) survives. The fenced write, its victim, runs again and lands.
    const other = new sql.Transaction(blocker);
    await other.begin(sql.ISOLATION_LEVEL.READ_COMMITTED);
    await other.request().batch('SET DEADLOCK_PRIORITY HIGH;');
    await other.request().input('id', sql.UniqueIdentifier, second.id).query(`UPDATE ${names.outbox} SET payload = payload WHERE id = @id;`);
    const marking = t.driver.outboxMarkSentMany({ claims: [first, second].map((r) => ({ id: r.id, token: r.claimToken })) });
    await new Promise((resolve) => setTimeout(resolve, 500));
    await other.request().input('id', sql.UniqueIdentifier, first.id).query(`UPDATE ${names.outbox} SET payload = payload WHERE id = @id;`);
    await other.commit();
    assert.deepEqual((await marking).sort(), [first.id, second.id].sort());
    assert.equal((await t.row('outbox', first.id))!.state, 'sent');
    assert.equal((await t.row('outbox', second.id))!.state, 'sent');
  });
});
