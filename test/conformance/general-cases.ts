/**
 * Conformance cases of the driver's lifecycle methods: migrate, schemaVerify, clockNow, close;
 * and the workers' last finished passes (passRecordFinished, passListFinished).
 */
import assert from 'node:assert/strict';
import { SchemaMismatchError } from '../../lib/errors.ts';
import { enqueueRows, type DefineCase } from './driver-conformance.ts';

export function defineGeneralCases(define: DefineCase): void {
  define('migrate is idempotent: a second run applies nothing and keeps the rows', async (t) => {
    const [id] = await enqueueRows(t, [{ topic: 'kept', payload: { a: 1 } }]);
    const again = await t.newDriver().migrate();
    assert.deepEqual(again.applied, []);
    assert.equal((await t.row('outbox', id!))?.state, 'pending');
  });

  define('migrate run by three replicas at once: all succeed under the migrate lock', async (t) => {
    const replicas = [t.newDriver(), t.newDriver(), t.newDriver()];
    const results = await Promise.all(replicas.map((d) => d.migrate()));
    await Promise.all(replicas.map((d) => d.close()));
    assert.deepEqual(results.map((r) => r.applied), [[], [], []]);
    await t.driver.schemaVerify();
  });

  define('schemaVerify passes on the migrated tables', async (t) => {
    await t.driver.schemaVerify();
  });

  define('schemaVerify throws SchemaMismatchError naming tables that do not exist', async (t) => {
    const missing = t.newDriver({ outbox: 'absent_outbox', inbox: 'absent_inbox', maintenance: 'absent_maintenance' });
    await assert.rejects(missing.schemaVerify(), (error: unknown) => {
      assert.ok(error instanceof SchemaMismatchError, `SchemaMismatchError, got ${String(error)}`);
      assert.ok(error.statements.some((s) => s.includes('absent_outbox')), error.statements.join('\n'));
      return true;
    });
  });

  define('clockNow reads the database clock, which leases are computed from', async (t) => {
    const before = await t.driver.clockNow();
    assert.ok(before instanceof Date && !Number.isNaN(before.getTime()));
    await enqueueRows(t, [{ topic: 'lease', payload: {} }]);
    const [row] = await t.driver.outboxClaimMany({ limit: 1, leaseMs: 60_000 });
    const afterClaim = await t.driver.clockNow();
    const lease = row!.leaseExpiresAt.getTime();
    assert.ok(lease >= before.getTime() + 60_000 - 5 && lease <= afterClaim.getTime() + 60_000 + 5, `lease ${row!.leaseExpiresAt.toISOString()} is db clock + 60 s`);
  });

  define('passRecordFinished stamps a worker\'s row with the database clock; passListFinished reads each worker\'s last pass, apart per outbox table', async (t) => {
    assert.deepEqual(await t.driver.passListFinished(), [], 'no pass recorded yet');
    const before = await t.driver.clockNow();
    await t.driver.passRecordFinished({ worker: 'outboxPoller' });
    await t.driver.passRecordFinished({ worker: 'reclaim' });
    const first = await t.driver.passListFinished();
    assert.deepEqual(first.map((p) => p.worker).sort(), ['outboxPoller', 'reclaim']);
    const poller = first.find((p) => p.worker === 'outboxPoller')!;
    assert.ok(poller.finishedAt.getTime() >= before.getTime() - 1, `stamped on the database clock: ${poller.finishedAt.toISOString()} >= ${before.toISOString()}`);
    assert.ok(poller.ageSeconds >= 0 && poller.ageSeconds < 5, `age ${poller.ageSeconds}`);

    await new Promise((resolve) => setTimeout(resolve, 20));
    await Promise.all([t.driver.passRecordFinished({ worker: 'outboxPoller' }), t.newDriver().passRecordFinished({ worker: 'outboxPoller' })]);
    const again = await t.driver.passListFinished();
    assert.equal(again.length, 2, 'one row per worker, however often and concurrently it finishes');
    assert.ok(again.find((p) => p.worker === 'outboxPoller')!.finishedAt > poller.finishedAt, 'the later pass replaces the earlier');

    const other = t.newDriver({ outbox: 'other_outbox' });
    assert.deepEqual(await other.passListFinished(), [], 'another outbox table (another configuration) has passes of its own');
    // Two first passes at once: one row, neither fails.
    await Promise.all([other.passRecordFinished({ worker: 'inboxRelay' }), t.newDriver({ outbox: 'other_outbox' }).passRecordFinished({ worker: 'inboxRelay' })]);
    assert.deepEqual((await other.passListFinished()).map((p) => p.worker), ['inboxRelay']);
    assert.deepEqual((await t.driver.passListFinished()).map((p) => p.worker).sort(), ['outboxPoller', 'reclaim']);
  });

  define('close ends the pool: the closed driver no longer queries', async (t) => {
    const other = t.newDriver();
    await other.clockNow();
    await other.close();
    await assert.rejects(other.clockNow());
  });
}
