/**
 * The lease keeper's bookkeeping, without a database: which claims a renewal carries, which it
 * reports lost (per item, once), and that released claims are neither renewed nor reported.
 * (Renewal against PostgreSQL, with stale owners and expired leases: leases.test.ts.)
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { LeaseKeeper, type LostReason } from '../../lib/claims/lease-keeper.ts';
import type { ClaimRef } from '../../lib/db/driver.ts';
import { OpenCalls } from '../../lib/outbox/open-calls.ts';

interface Row {
  id: string;
  claimToken: string;
}

const rowsOf = (prefix: string, n: number): Row[] => Array.from({ length: n }, (_, i) => ({ id: `${prefix}${i}`, claimToken: `t-${prefix}${i}` }));
const claimOf = (row: Row): ClaimRef => ({ id: row.id, token: row.claimToken });

function keeperWith(renew: (claims: ClaimRef[]) => Promise<string[]>) {
  const lostReported: Array<[string, LostReason]> = [];
  const sent: ClaimRef[][] = [];
  const keeper = new LeaseKeeper({
    leaseMs: 60_000,
    nextLeaseMs: () => 60_000,
    renew: async (claims) => {
      sent.push(claims);
      return renew(claims);
    },
    onLost: (claim, reason) => lostReported.push([claim.id, reason]),
  });
  return { keeper, lostReported, sent };
}

describe('LeaseKeeper', () => {
  it('renews every watched claim, single and grouped, in one call', async () => {
    const { keeper, sent, lostReported } = keeperWith(async (claims) => claims.map((c) => c.id));
    keeper.watch({ id: 'single', token: 't-single' }, () => assert.fail('not lost'));
    keeper.watchMany(rowsOf('a', 3), claimOf, () => assert.fail('not lost'));
    keeper.watchMany(rowsOf('b', 2), claimOf, () => assert.fail('not lost'));
    assert.equal(keeper.size, 6);
    await keeper.renewNow();
    assert.equal(sent.length, 1);
    assert.deepEqual(sent[0]!.map((c) => `${c.id}:${c.token}`).sort(), ['a0:t-a0', 'a1:t-a1', 'a2:t-a2', 'b0:t-b0', 'b1:t-b1', 'single:t-single']);
    assert.deepEqual(lostReported, []);
    keeper.stop();
  });

  it('reports each claim the renewal did not return once, to the pass and to its group, and stops renewing it', async () => {
    const { keeper, sent, lostReported } = keeperWith(async (claims) => claims.filter((c) => c.id !== 'a1' && c.id !== 'b0').map((c) => c.id));
    const groupLost: string[] = [];
    keeper.watchMany(rowsOf('a', 3), claimOf, (row, reason) => groupLost.push(`${row.id}:${reason}`));
    keeper.watchMany(rowsOf('b', 1), claimOf, (row, reason) => groupLost.push(`${row.id}:${reason}`));
    await keeper.renewNow();
    assert.deepEqual(groupLost.sort(), ['a1:fenced', 'b0:fenced']);
    assert.deepEqual(lostReported.map(([id]) => id).sort(), ['a1', 'b0']);
    assert.equal(keeper.size, 2, 'a0 and a2 still watched');
    await keeper.renewNow();
    assert.deepEqual(sent[1]!.map((c) => c.id).sort(), ['a0', 'a2']);
    assert.equal(groupLost.length, 2, 'a loss is reported once');
    keeper.stop();
  });

  it('loses every watched claim when the renewal fails', async () => {
    const { keeper, lostReported } = keeperWith(async () => {
      throw new Error('connection reset');
    });
    keeper.watchMany(rowsOf('a', 2), claimOf, () => {});
    keeper.watch({ id: 'single', token: 't' }, () => {});
    await keeper.renewNow();
    assert.deepEqual(lostReported.map(([id, reason]) => `${id}:${reason}`).sort(), ['a0:renew-failed', 'a1:renew-failed', 'single:renew-failed']);
    assert.equal(keeper.size, 0);
  });

  it('neither renews nor reports released claims, whichever order groups are released in', async () => {
    const { keeper, sent, lostReported } = keeperWith(async () => []);
    const a = keeper.watchMany(rowsOf('a', 2), claimOf, () => assert.fail('released'));
    const b = keeper.watchMany(rowsOf('b', 2), claimOf, () => {});
    const c = keeper.watchMany(rowsOf('c', 2), claimOf, () => assert.fail('released'));
    keeper.watch({ id: 's', token: 't' }, () => assert.fail('released'));
    keeper.releaseMany(a);
    keeper.releaseMany(c);
    keeper.release({ id: 's', token: 't' });
    keeper.releaseMany(a); // twice: harmless
    assert.equal(keeper.size, 2);
    await keeper.renewNow();
    assert.deepEqual(sent[0]!.map((x) => x.id).sort(), ['b0', 'b1']);
    assert.deepEqual(lostReported.map(([id]) => id).sort(), ['b0', 'b1']);
    keeper.releaseMany(b);
    assert.equal(keeper.size, 0);
  });

  it('ignores a loss that arrives after the claim was released during the renewal', async () => {
    let release: () => void = () => {};
    const { keeper, lostReported } = keeperWith(async () => {
      release();
      return [];
    });
    const handle = keeper.watchMany(rowsOf('a', 2), claimOf, () => assert.fail('released before the answer'));
    release = () => keeper.releaseMany(handle);
    await keeper.renewNow();
    assert.deepEqual(lostReported, []);
  });
});

describe('OpenCalls', () => {
  const call = () => {
    const reasons: unknown[] = [];
    return { slot: -1, reasons, abort: (reason: unknown) => reasons.push(reason) };
  };

  it('aborts the calls still open when the pass stops, and a call opened afterwards at once', () => {
    const calls = new OpenCalls();
    const [a, b, c] = [call(), call(), call()];
    calls.add(a);
    calls.add(b);
    calls.add(c);
    calls.remove(a);
    assert.equal(calls.size, 2);
    const stop = new Error('pass stopped');
    calls.abortAll(stop);
    assert.deepEqual([a.reasons, b.reasons, c.reasons], [[], [stop], [stop]]);
    const late = call();
    calls.add(late);
    assert.deepEqual(late.reasons, [stop]);
    assert.equal(calls.stopped, true);
    assert.equal(calls.size, 0);
  });
});
