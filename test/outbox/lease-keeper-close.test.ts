/**
 * `LeaseKeeper.close()`: a worker awaits it before it returns, so that a renewal under way is not
 * frozen with a Lambda container whose handler has returned (outbox pass, relay pass, pull run).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { LeaseKeeper } from '../../lib/claims/lease-keeper.ts';
import type { ClaimRef } from '../../lib/db/driver.ts';
import { createGate } from '../helpers/wait.ts';

describe('LeaseKeeper.close', () => {
  it('stops renewing and resolves only once the renewal under way has answered', async () => {
    const answer = createGate();
    const renewals: ClaimRef[][] = [];
    const keeper = new LeaseKeeper({
      leaseMs: 60_000,
      nextLeaseMs: () => 60_000,
      renew: async (claims) => {
        renewals.push(claims);
        await answer.wait();
        return claims.map((c) => c.id);
      },
      onLost: () => assert.fail('nothing is lost'),
    });
    keeper.watch({ id: 'a', token: 't-a' }, () => assert.fail('not lost'));
    const renewing = keeper.renewNow();
    let closed = false;
    const closing = keeper.close().then(() => (closed = true));
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(closed, false, 'close waits for the renewal in flight');
    assert.equal(keeper.size, 0, 'the claims are no longer tracked');
    answer.open();
    await closing;
    await renewing;
    assert.equal(closed, true);
    assert.equal(renewals.length, 1, 'no renewal after close');
  });

  it('resolves at once without a renewal under way, and after one that failed', async () => {
    const idle = new LeaseKeeper({ leaseMs: 60_000, nextLeaseMs: () => 60_000, renew: async () => [], onLost: () => {} });
    await idle.close();
    const failing = new LeaseKeeper({
      leaseMs: 60_000,
      nextLeaseMs: () => 60_000,
      renew: async () => {
        throw new Error('connection lost');
      },
      onLost: () => {},
    });
    failing.watch({ id: 'a', token: 't-a' }, () => {});
    const renewing = failing.renewNow();
    await failing.close();
    await renewing;
  });
});
