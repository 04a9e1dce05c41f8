import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { leaseMsFor, MIN_LEASE_MS, RENEWAL_TAIL_MS, renewalLeaseMsFor } from '../../lib/claims/lease.ts';

describe('lease arithmetic', () => {
  it('a claim is leased min(claimTimeoutMs, time left), and not at all with less than MIN_LEASE_MS left', () => {
    assert.equal(leaseMsFor(30_000, undefined), 30_000);
    assert.equal(leaseMsFor(30_000, 12_345.9), 12_345);
    assert.equal(leaseMsFor(1000, MIN_LEASE_MS), MIN_LEASE_MS);
    assert.equal(leaseMsFor(1000, MIN_LEASE_MS - 1), 0);
    assert.equal(leaseMsFor(30_000, 0), 0);
  });

  it('a renewal is leased min(claimTimeoutMs, time left) however little is left, so the lease ends with the invocation', () => {
    assert.equal(renewalLeaseMsFor(30_000, undefined), 30_000);
    assert.equal(renewalLeaseMsFor(1000, 1284), 1000);
    assert.equal(renewalLeaseMsFor(1000, 951.7), 951);
    assert.equal(renewalLeaseMsFor(1000, RENEWAL_TAIL_MS), RENEWAL_TAIL_MS);
    // In the last RENEWAL_TAIL_MS nothing is renewed (the renewal before reached the end).
    assert.equal(renewalLeaseMsFor(1000, RENEWAL_TAIL_MS - 1), 0);
    assert.equal(renewalLeaseMsFor(1000, 1), 0);
    assert.equal(renewalLeaseMsFor(1000, 0), 0);
    assert.equal(renewalLeaseMsFor(1000, -20), 0);
  });

  it('a lease renewed every third of claimTimeoutMs never ends before the invocation once renewals use the time left', () => {
    // Renewals at every third of the lease from the claim; each ends at t + the lease granted.
    for (const claimTimeoutMs of [1000, 1200, 1499, 1500, 3000]) {
      for (let invocationMs = 1000; invocationMs <= 4000; invocationMs += 7) {
        let leaseEnd = leaseMsFor(claimTimeoutMs, invocationMs);
        if (leaseEnd === 0) continue;
        for (let t = Math.floor(claimTimeoutMs / 3); t < invocationMs; t += Math.floor(claimTimeoutMs / 3)) {
          assert.ok(leaseEnd > t, `lease ended at ${leaseEnd} before the renewal at ${t}`);
          const granted = renewalLeaseMsFor(claimTimeoutMs, invocationMs - t);
          if (granted > 0) leaseEnd = t + granted;
        }
        assert.ok(leaseEnd >= invocationMs, `claimTimeoutMs ${claimTimeoutMs}, invocation ${invocationMs} ms: the lease ended at ${leaseEnd}`);
      }
    }
  });
});
