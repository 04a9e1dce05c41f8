import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { insertOutboxRows } from '../helpers/outbox-pass-fixture.ts';
import { delay } from '../helpers/wait.ts';
import { installAuditTrail } from './audit-trail.ts';
import { brokenFenceDriver } from './broken-fence-driver.ts';
import { checkRun } from './checker.ts';
import type { FaultDelivery } from './fault-destination.ts';
import { faultyDriver, InvocationFaults, Ledger } from './invocation-faults.ts';

describe('the fault checker', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase();
    await db.pool.query(`CREATE TABLE "${db.schema}".faults_effects (n bigserial PRIMARY KEY, inbox_id uuid NOT NULL)`);
    await installAuditTrail(db.pool, db.schema);
  });
  after(async () => db.drop());

  /**
   * The stale-owner schedule: an owner claims the three rows with a 1 s lease and publishes, then
   * freezes past its lease; a new owner reclaims and claims them again; the old owner thaws and
   * marks sent (through `fence`). Returns what both owners claimed and what the stale mark changed.
   */
  async function staleOwnerSchedule(fence: 'broken' | 'intact') {
    await db.pool.query(`TRUNCATE "${db.schema}".outbox, "${db.schema}".faults_audit`);
    const ids = await insertOutboxRows(db, [0, 1, 2].map((i) => ({ topic: 'orders.created', key: `k${i}`, payload: { i } })));
    const ledger = new Ledger();
    const stale = db.newDriver();
    const owner = faultyDriver(fence === 'broken' ? brokenFenceDriver(stale) : stale, new InvocationFaults(stale.pool), ledger);
    const deliveries: FaultDelivery[] = [];
    const deliver = (rowIds: string[]) => rowIds.forEach((id) => deliveries.push({ n: deliveries.length, id, key: null, attempt: 0, at: Date.now() }));
    const first = await owner.outboxClaimMany({ limit: 10, leaseMs: 1000 });
    deliver(first.map((r) => r.id));
    await delay(1100);
    const reclaimed = (await db.driver.outboxReclaimExpired({})).reclaimed;
    const second = await db.driver.outboxClaimMany({ limit: 10, leaseMs: 30_000 });
    const changed = await owner.outboxMarkSentMany({ claims: first.map((r) => ({ id: r.id, token: r.claimToken })) });
    deliver(second.map((r) => r.id));
    return { ids, ledger, deliveries, first, second, reclaimed, changed };
  }

  it('reports a fence violation when a frozen owner thaws and its mark-sent ignores the claim token and lease', async () => {
    const { ids, ledger, deliveries, first, second, reclaimed, changed } = await staleOwnerSchedule('broken');
    assert.equal(first.length, 3);
    assert.equal(reclaimed, 3);
    assert.equal(second.length, 3);
    assert.deepEqual(new Set(changed), new Set(ids), 'the broken fence let the stale owner write');

    const report = await checkRun({
      pool: db.pool,
      schema: db.schema,
      deliveries,
      ledger,
      counters: { outboxClaimsLost: 0, outboxReclaimed: 3, inboxClaimsLost: 0, pullClaimsLost: 0 },
    });
    assert.equal(report.violations.get('fence: a stale token marked a row sent')?.count, 3, [...report.violations.keys()].join(', '));
  });

  it('reports nothing for the same schedule when the fence is intact', async () => {
    const { ledger, deliveries, second, reclaimed, changed } = await staleOwnerSchedule('intact');
    assert.equal(reclaimed, 3);
    assert.deepEqual(changed, []);
    await db.driver.outboxMarkSentMany({ claims: second.map((r) => ({ id: r.id, token: r.claimToken })) });

    const report = await checkRun({
      pool: db.pool,
      schema: db.schema,
      deliveries,
      ledger,
      counters: { outboxClaimsLost: 3, outboxReclaimed: 3, inboxClaimsLost: 0, pullClaimsLost: 0 },
    });
    assert.equal(report.violationCount, 0, [...report.violations.entries()].map(([k, v]) => `${k}: ${v.examples.join('; ')}`).join('\n'));
  });
  it('the audit marks a finishing write sent after its lease ended, and not one whose fence passed in a slow statement', async () => {
    await db.pool.query(`TRUNCATE "${db.schema}".outbox, "${db.schema}".faults_audit`);
    const [late, slow] = await insertOutboxRows(db, [0, 1].map((i) => ({ topic: 't', key: `k${i}`, payload: { i } })));
    const claimed = await db.driver.outboxClaimMany({ limit: 10, leaseMs: 30_000 });
    const table = `"${db.schema}".outbox`;
    // A lease that ended before the write was sent, and a write without the lease in its fence.
    await db.pool.query(`UPDATE ${table} SET lease_expires_at = clock_timestamp() - interval '1 millisecond' WHERE id = $1`, [late]);
    await db.pool.query(`UPDATE ${table} SET state = 'sent', lease_expires_at = NULL WHERE id = $1 AND claim_token = $2`, [late, claimed.find((r) => r.id === late)!.claimToken]);
    // A fenced write whose row is written 300 ms after its fence passed, by then past its lease.
    await db.pool.query(`UPDATE ${table} SET lease_expires_at = clock_timestamp() + interval '100 milliseconds' WHERE id = $1`, [slow]);
    await db.pool.query(
      `UPDATE ${table} t SET state = 'sent', lease_expires_at = NULL
        FROM (SELECT id FROM ${table} WHERE id = $1 AND state = 'processing' AND lease_expires_at > clock_timestamp()) f, pg_sleep(0.3)
       WHERE t.id = f.id`,
      [slow],
    );
    const audit = await db.query<{ row_id: string; lease_live: boolean }>(`SELECT row_id, lease_live FROM "${db.schema}".faults_audit WHERE new_state = 'sent'`);
    assert.deepEqual(new Map(audit.map((a) => [a.row_id, a.lease_live])), new Map([[late, false], [slow, true]]));
  });
});
