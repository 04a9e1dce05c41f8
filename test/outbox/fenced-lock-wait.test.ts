import assert from 'node:assert/strict';
import type pg from 'pg';
import { describe, it } from 'node:test';
import { FencedLockTimeoutError } from '../../lib/errors.ts';
import { runOutboxPass } from '../../lib/outbox/outbox-pass.ts';
import { createInvocationContext } from '../../lib/runtime/invocation-context.ts';
import type { TestDatabase } from '../helpers/database.ts';
import { emfValues, insertOutboxRows, inspectRows, passFixture, withOutboxDatabase } from '../helpers/outbox-pass-fixture.ts';
import { RecordingDestination } from '../helpers/recording-destination.ts';
import { delay, waitUntil } from '../helpers/wait.ts';

/**
 * A fenced write never lands after its lease. PostgreSQL checks the fence's `lease_expires_at >
 * clock_timestamp()` when it reads the row; a write queued behind another transaction's lock on
 * the row is not checked again when that holder ends without changing the row. The write's lock
 * wait is therefore bounded by the time left on the lease: past it, the write fails, changes
 * nothing, and the claim counts as lost.
 */
describe('fenced writes: the lock wait ends with the lease', () => {
  let db!: TestDatabase;
  withOutboxDatabase((created) => (db = created));

  /** Locks `id` in an open transaction (`SELECT … FOR UPDATE`, changing nothing); `release` commits. */
  async function holdRowLock(id: string): Promise<{ release(): Promise<void> }> {
    const holder: pg.PoolClient = await db.pool.connect();
    await holder.query('BEGIN');
    await holder.query(`SELECT id FROM "${db.schema}".outbox WHERE id = $1 FOR UPDATE`, [id]);
    return {
      async release() {
        await holder.query('COMMIT');
        holder.release();
      },
    };
  }

  /** Waits until the lease of `id` has ended on the database clock, then a little longer. */
  async function pastLease(id: string): Promise<void> {
    await waitUntil('the lease ended', async () => (await db.query<{ over: boolean }>(`SELECT lease_expires_at < clock_timestamp() AS over FROM "${db.schema}".outbox WHERE id = $1`, [id]))[0]!.over, 20_000);
    await delay(300);
  }

  for (const write of ['mark sent', 'renew', 'retry', 'dead'] as const) {
    it(`a ${write} queued behind a row lock held past the lease changes nothing and fails as a lost claim`, async () => {
      const [id] = await insertOutboxRows(db, [{ topic: 'orders.paid', payload: {} }]);
      const [row] = await db.driver.outboxClaimMany({ limit: 1, leaseMs: 1000 });
      assert.equal(row?.id, id);
      const claim = { id: id!, token: row!.claimToken };
      const lock = await holdRowLock(id!);
      const sent = {
        'mark sent': () => db.driver.outboxMarkSentMany({ claims: [claim] }),
        renew: () => db.driver.outboxRenewMany({ claims: [claim], leaseMs: 60_000 }),
        retry: () => db.driver.outboxRetryMany({ items: [{ ...claim, delayMs: 0, error: 'x' }] }),
        dead: () => db.driver.outboxMarkDeadMany({ items: [{ ...claim, error: 'x' }] }),
      }[write]();
      const result = sent.then((ids) => ({ ids }), (error: unknown) => ({ error }));
      await pastLease(id!);
      // Without the bound, the write would go through right here, after its lease.
      await lock.release();
      const outcome = await result;
      assert.ok('error' in outcome, `the ${write} must not land after its lease (it returned ${JSON.stringify(outcome)})`);
      assert.ok(outcome.error instanceof FencedLockTimeoutError, `a FencedLockTimeoutError, not ${String(outcome.error)}`);
      const [after] = await db.query<{ state: string; token: string; over: boolean }>(
        `SELECT state, claim_token AS token, lease_expires_at < clock_timestamp() AS over FROM "${db.schema}".outbox WHERE id = $1`,
        [id],
      );
      assert.deepEqual(after, { state: 'processing', token: claim.token, over: true }, 'the row is as the claim left it, its lease over');
    });
  }

  it('a pass whose settle waits on a row lock past the lease counts the claim lost, logs it and leaves the row to the reclaim', async () => {
    const [id] = await insertOutboxRows(db, [{ topic: 'orders.paid', payload: {} }]);
    let lock: { release(): Promise<void> } | undefined;
    // The destination takes the lock before it answers: the settle then queues behind it.
    const destination = new RecordingDestination({ waitFor: async () => void (lock = await holdRowLock(id!)) });
    const options = passFixture(db, { destinations: [destination], context: createInvocationContext({ timeoutMs: 30_000 }), outbox: { claimTimeoutMs: 1500 } });
    const pass = runOutboxPass(options);
    await waitUntil('the destination took the row lock', () => lock !== undefined);
    await pastLease(id!);
    await lock!.release();
    const summary = await pass;
    assert.deepEqual({ claimed: summary.claimed, sent: summary.sent, claimsLost: summary.claimsLost, abandoned: summary.abandoned }, { claimed: 1, sent: 0, claimsLost: 1, abandoned: 0 });
    assert.equal(summary.stoppedBecause, 'drained', 'a settle that outlived its lease is not an error of the pass');
    assert.deepEqual((await inspectRows(db)).map((r) => r.state), ['processing']);
    assert.equal(emfValues(options.lines).get('queuebox_claims_lost_total{component=outbox}'), 1);
    const logged = options.logger.at('error').find((e) => e.message.startsWith('outbox claim lost before marking sent'));
    assert.deepEqual(logged?.extra.ids, [id]);
    const reclaim = await db.driver.outboxReclaimExpired({});
    assert.equal(reclaim.reclaimed, 1, 'the reclaim takes the row back');
  });

  it('a fenced write that PostgreSQL chose as a deadlock victim runs again and lands (nothing of the first run was written)', async () => {
    await insertOutboxRows(db, [{ topic: 'orders.paid', payload: { n: 1 } }, { topic: 'orders.paid', payload: { n: 2 } }]);
    const rows = await db.driver.outboxClaimMany({ limit: 2, leaseMs: 60_000 });
    assert.equal(rows.length, 2);
    const [first, second] = rows as [(typeof rows)[0], (typeof rows)[0]];
    const table = `"${db.schema}".outbox`;
    // Another transaction holds the second row; the write locks the first, then waits on the second.
    const holder: pg.PoolClient = await db.pool.connect();
    try {
      await holder.query('BEGIN');
      await holder.query(`SELECT id FROM ${table} WHERE id = $1 FOR UPDATE`, [second.id]);
      const write = db.driver.outboxMarkSentMany({ claims: [first, second].map((r) => ({ id: r.id, token: r.claimToken })) });
      const outcome = write.then((ids) => ({ ids }), (error: unknown) => ({ error }));
      await waitUntil('the write waits on the second row', async () =>
        (await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%UPDATE %outbox%' AND pid <> pg_backend_pid()`))[0]!.n > 0,
      10_000);
      await delay(200);
      // The holder now needs the first row, which the write holds: a cycle. The write has waited
      // longer, so its deadlock check (after deadlock_timeout) finds the cycle and ends it.
      await holder.query(`UPDATE ${table} SET updated_at = updated_at WHERE id = $1`, [first.id]);
      await holder.query('COMMIT');
      const result = await outcome;
      assert.ok('ids' in result, `the write is sent again after the deadlock and lands (it failed: ${String((result as { error?: unknown }).error)})`);
      assert.deepEqual([...result.ids].sort(), [first.id, second.id].sort());
      const states = await db.query<{ state: string }>(`SELECT state FROM ${table} ORDER BY sequence`);
      assert.deepEqual(states.map((r) => r.state), ['sent', 'sent']);
    } finally {
      holder.release();
    }
  });
});
