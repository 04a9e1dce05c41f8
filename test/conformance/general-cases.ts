/**
 * Conformance cases of the driver's lifecycle methods: migrate, schemaVerify, clockNow, close.
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

  define('close ends the pool: the closed driver no longer queries', async (t) => {
    const other = t.newDriver();
    await other.clockNow();
    await other.close();
    await assert.rejects(other.clockNow());
  });
}
