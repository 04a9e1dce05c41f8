/**
 * `LeaseKeeper.close({ reportLost: true })`: the claims stay watched until the renewal under way
 * has answered, so a loss it finds is reported (`onLost`, the claim's own callback), as a pull run
 * needs for the handlers its drain gave up on. A claim released meanwhile is not reported, and no
 * renewal starts while the keeper closes. Plain `close()` drops the claims at once, as before.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { LeaseKeeper } from '../../lib/claims/lease-keeper.ts';
import type { ClaimRef } from '../../lib/db/driver.ts';
import { createGate } from '../helpers/wait.ts';

function keeperWithHeldRenewal() {
  const answer = createGate();
  const renewals: string[][] = [];
  const lost: string[] = [];
  const keeper = new LeaseKeeper({
    leaseMs: 60_000,
    nextLeaseMs: () => 60_000,
    // Renews `kept` only: the others were taken over meanwhile.
    renew: async (claims: ClaimRef[]) => {
      renewals.push(claims.map((c) => c.id));
      await answer.wait();
      return claims.filter((c) => c.id === 'kept').map((c) => c.id);
    },
    onLost: (claim) => lost.push(claim.id),
  });
  return { keeper, answer, renewals, lost };
}

describe('LeaseKeeper.close({ reportLost })', () => {
  it('reports the claims the renewal under way finds lost, not one released meanwhile, and starts no renewal', async () => {
    const { keeper, answer, renewals, lost } = keeperWithHeldRenewal();
    const ownCallbacks: string[] = [];
    for (const id of ['kept', 'taken', 'released']) keeper.watch({ id, token: `t-${id}` }, () => ownCallbacks.push(id));
    const renewing = keeper.renewNow();
    const closing = keeper.close({ reportLost: true });
    keeper.release({ id: 'released', token: 't-released' });
    const asked = keeper.renewNow(); // joins the renewal under way
    answer.open();
    await closing;
    await renewing;
    await asked;
    await keeper.renewNow(); // closed: starts nothing
    assert.deepEqual(lost, ['taken']);
    assert.deepEqual(ownCallbacks, ['taken']);
    assert.equal(renewals.length, 1, 'no renewal after the one under way');
    assert.equal(keeper.size, 0, 'nothing is tracked once closed');
  });

  it('plain close() drops the claims at once: the loss is not reported', async () => {
    const { keeper, answer, lost } = keeperWithHeldRenewal();
    keeper.watch({ id: 'taken', token: 't-taken' }, () => {});
    const renewing = keeper.renewNow();
    const closing = keeper.close();
    answer.open();
    await closing;
    await renewing;
    assert.deepEqual(lost, []);
  });
});
