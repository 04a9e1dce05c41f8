/**
 * The lease keeper keys every watch by claim (id and token): two claims of one row are renewed,
 * reported and released separately.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { LeaseKeeper } from '../../lib/claims/lease-keeper.ts';
import type { ClaimRef } from '../../lib/db/driver.ts';

describe('LeaseKeeper: a claim is its token', () => {
  it('renews an old and a new claim of one row in separate statements and reports only the one that lost', async () => {
    const sent: ClaimRef[][] = [];
    const lost: string[] = [];
    const keeper = new LeaseKeeper({
      leaseMs: 60_000,
      nextLeaseMs: () => 60_000,
      // The database holds row r under token "new" only: the fence renews that claim alone.
      renew: async (claims) => {
        sent.push(claims);
        return claims.filter((c) => c.token !== 'old').map((c) => c.id);
      },
      onLost: (claim) => lost.push(`${claim.id}/${claim.token}`),
    });
    const oldSignal = keeper.track({ id: 'r', token: 'old' });
    const newSignal = keeper.track({ id: 'r', token: 'new' });
    keeper.watch({ id: 'other', token: 'o' }, () => {});
    assert.equal(keeper.size, 3, 'both claims of r are watched');
    await keeper.renewNow();
    assert.deepEqual(
      sent.map((claims) => claims.map((c) => c.id).sort()),
      [['other', 'r'], ['r']],
      'no statement names r twice',
    );
    assert.deepEqual(lost, ['r/old']);
    assert.equal(oldSignal.aborted, true);
    assert.equal(newSignal.aborted, false);
    keeper.release({ id: 'r', token: 'old' }); // the old run ends: the new claim stays watched
    sent.length = 0;
    await keeper.renewNow();
    assert.deepEqual(sent.map((claims) => claims.map((c) => `${c.id}/${c.token}`).sort()), [['other/o', 'r/new']]);
    keeper.release({ id: 'r', token: 'new' });
    keeper.release({ id: 'other', token: 'o' });
    assert.equal(keeper.size, 0);
  });

  it('lets a settle wait for a renewal under way, and no longer than a lease', async () => {
    let answer: (ids: string[]) => void = () => {};
    const keeper = new LeaseKeeper({
      leaseMs: 1000,
      nextLeaseMs: () => 1000,
      renew: () => new Promise<string[]>((resolve) => (answer = resolve)),
      onLost: () => {},
    });
    keeper.watch({ id: 'a', token: 't' }, () => {});
    const renewing = keeper.renewNow();
    keeper.release({ id: 'a', token: 't' });
    let idle = false;
    const waited = keeper.idle().then(() => (idle = true));
    await new Promise((resolve) => setTimeout(resolve, 50));
    assert.equal(idle, false, 'the renewal still carries the row');
    answer(['a']);
    await renewing;
    await waited;
    const hung = new LeaseKeeper({ leaseMs: 1000, nextLeaseMs: () => 1000, renew: () => new Promise<string[]>(() => {}), onLost: () => {} });
    hung.watch({ id: 'b', token: 't' }, () => {});
    void hung.renewNow();
    let hungIdle = false;
    const hungWaited = hung.idle().then(() => (hungIdle = true));
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.equal(hungIdle, false, 'a renewal that never answers is waited for (up to one lease)');
    await hungWaited; // and no longer: were it waited for forever, the test's timeout would fail it
    hung.stop();
    keeper.stop();
  });
});
