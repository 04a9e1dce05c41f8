/**
 * SQL Server leases end with the invocation, as PostgreSQL's do: every lease parameter of a claim
 * or renewal is capped to the time the invocation has left (`leaseWithinBudget`) when the request
 * binds its inputs, not when the statement was built. Checked without a server: a stand-in runner
 * records the values the request binds.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { withStatementBudget } from '../../lib/db/statement-budget.ts';
import { inboxClaimPushMany } from '../../lib/db/sqlserver/inbox-claim.ts';
import { inboxRenewMany } from '../../lib/db/sqlserver/inbox-queries.ts';
import { runStatement, type MssqlRunner } from '../../lib/db/sqlserver/mssql-pool.ts';
import { outboxClaimMany } from '../../lib/db/sqlserver/outbox-claim.ts';
import { outboxRenewMany } from '../../lib/db/sqlserver/outbox-queries.ts';
import { buildPullClaim, pullClaimMany, pullRenew } from '../../lib/db/sqlserver/pull-queries.ts';
import { scaleOutAcquire, scaleOutStart } from '../../lib/db/sqlserver/scale-out-queries.ts';
import { names, SENTINELS } from './statement-shapes.ts';
import { loadMssql } from '../../lib/db/sqlserver/mssql-module.ts';

// The SQL Server modules reach `mssql` through mssql(); QueueBox loads it in importOptional, tests here.
await loadMssql();

const LEASE = 30_000;
const claim = { id: SENTINELS.id, token: SENTINELS.token };

/** A runner whose requests answer with no rows and record every bound input, request by request. */
function recordingRunner(): { runner: MssqlRunner; bound: Array<Record<string, unknown>> } {
  const bound: Array<Record<string, unknown>> = [];
  const runner = {
    request() {
      const inputs: Record<string, unknown> = {};
      bound.push(inputs);
      return {
        input(name: string, _type: unknown, value: unknown) {
          inputs[name] = value;
        },
        async query() {
          return { recordset: [], recordsets: [[]], rowsAffected: [] };
        },
      };
    },
  } as unknown as MssqlRunner;
  return { runner, bound };
}

/** Every statement that grants or renews an invocation's lease, run through `runner` with `leaseMs`. */
const LEASED: Array<[string, (runner: MssqlRunner, leaseMs: number) => Promise<unknown>]> = [
  ['outbox claim', (r, leaseMs) => outboxClaimMany(r, names, { limit: 5, leaseMs })],
  ['inbox claim push', (r, leaseMs) => inboxClaimPushMany(r, names, { limit: 5, leaseMs })],
  ['pull claim', (r, leaseMs) => pullClaimMany(r as never, names, { source: 'orders', limit: 5, leaseMs })],
  ['outbox renew', (r, leaseMs) => outboxRenewMany(r, names, { claims: [claim], leaseMs })],
  ['inbox renew', (r, leaseMs) => inboxRenewMany(r, names, { claims: [claim], leaseMs })],
  ['pull renew', (r, leaseMs) => pullRenew(r, names, { ...claim, leaseMs })],
  ['scale-out start', (r, leaseMs) => scaleOutStart(r, names, { worker: 'outboxPoller', slot: { slot: 2, token: '1764504000123456' }, leaseMs })],
];

describe('SQL Server leases within the invocation budget', () => {
  it('every claim and renewal binds its lease as no more than the time left (withStatementBudget(() => 1234))', async () => {
    for (const [name, run] of LEASED) {
      const { runner, bound } = recordingRunner();
      await withStatementBudget(() => 1234, () => run(runner, LEASE));
      assert.equal(bound.length, 1, name);
      const lease = bound[0]!.p_lease_ms;
      assert.equal(typeof lease, 'number', name);
      assert.ok((lease as number) <= 1234 && (lease as number) >= 1, `${name}: bound ${String(lease)}`);
      if (name === 'pull claim') assert.ok((bound[0]!.p_lease_floor_ms as number) <= 1000, 'the pull lease floor never exceeds the capped lease');
    }
  });

  it('the cap is taken when the request binds its inputs, from the time left then, not when the statement was built', async () => {
    const statement = buildPullClaim(names, { source: 'orders', limit: 5, leaseMs: LEASE });
    const { runner, bound } = recordingRunner();
    let left = 5_000;
    await withStatementBudget(() => left, async () => {
      left = 700; // a wait between building the statement and sending it
      await runStatement(runner, statement);
    });
    assert.equal(bound[0]!.p_lease_ms, 700);
    assert.equal(bound[0]!.p_lease_floor_ms, 700, 'the floor stays within the capped lease');
    assert.equal(bound[0]!.p_limit, 5, 'other parameters are bound as built');
    assert.equal(statement.params.find((p) => p.name === 'p_lease_ms')!.value, LEASE, 'the statement keeps the asked lease');
  });

  it('outside a pass a lease is bound as asked; the scale-out start window (a lease for another invocation) is never capped', async () => {
    for (const [name, run] of LEASED) {
      const { runner, bound } = recordingRunner();
      await run(runner, LEASE);
      assert.equal(bound[0]!.p_lease_ms, LEASE, name);
    }
    const { runner, bound } = recordingRunner();
    await withStatementBudget(() => 1234, () => scaleOutAcquire(runner, names, { worker: 'outboxPoller', slots: 3, want: 2, leaseMs: 60_000 }));
    assert.equal(bound[0]!.p_lease_ms, 60_000);
  });
});
