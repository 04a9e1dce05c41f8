/**
 * A claim or reclaim bounded by a pass's deadline that ends there took nothing: `endedAtDeadline`
 * tells such an end (not sent: `InvocationEndedError`; cancelled by the statement's timeout once
 * the deadline has passed: PostgreSQL 57014, `mssql` ETIMEOUT), and `unlessEndedAtDeadline`, which
 * the outbox and relay passes run their claims and reclaims through, turns it into `undefined`.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { endedAtDeadline, InvocationEndedError, unlessEndedAtDeadline } from '../../lib/db/statement-budget.ts';
import { TransientDatabaseError } from '../../lib/errors.ts';

const cancelled = () => new TransientDatabaseError('canceling statement due to statement timeout', '57014');
const requestTimeout = () => Object.assign(new Error('Timeout: Request failed to complete in 900ms'), { code: 'ETIMEOUT' });

describe('a statement that ended at the deadline of its pass', () => {
  it('endedAtDeadline: not sent at all, or cancelled by its timeout once the deadline has passed', () => {
    assert.equal(endedAtDeadline(new InvocationEndedError(), false), true);
    assert.equal(endedAtDeadline(cancelled(), true), true);
    assert.equal(endedAtDeadline(requestTimeout(), true), true);
    assert.equal(endedAtDeadline(cancelled(), false), false, 'the configured timeout, before the deadline');
    assert.equal(endedAtDeadline(new TransientDatabaseError('connection reset', '08006'), true), false);
    assert.equal(endedAtDeadline(undefined, true), false);
  });

  it('unlessEndedAtDeadline: undefined for such an end (telling onCancelled of a cancellation only); any other outcome as it came', async () => {
    const heard: unknown[] = [];
    const onCancelled = (error: unknown) => heard.push(error);
    const passed = { expired: () => true };
    const ahead = { expired: () => false };
    assert.equal(await unlessEndedAtDeadline(async () => 7, passed, onCancelled), 7);
    assert.equal(await unlessEndedAtDeadline(() => Promise.reject(new InvocationEndedError()), ahead, onCancelled), undefined);
    assert.deepEqual(heard, [], 'a statement never sent was not cancelled');
    const error = cancelled();
    assert.equal(await unlessEndedAtDeadline(() => Promise.reject(error), passed, onCancelled), undefined);
    assert.deepEqual(heard, [error]);
    await assert.rejects(unlessEndedAtDeadline(() => Promise.reject(cancelled()), ahead, onCancelled), /statement timeout/);
    await assert.rejects(unlessEndedAtDeadline(() => Promise.reject(new Error('boom')), passed, onCancelled), /boom/);
    assert.equal(heard.length, 1);
  });
});
