/**
 * A claim or reclaim bounded by a pass's deadline that ends there took nothing: `endedAtDeadline`
 * tells such an end (not sent: `InvocationEndedError`; cancelled by the statement's timeout once
 * the deadline has passed: PostgreSQL 57014, `mssql` ETIMEOUT), and `unlessEndedAtDeadline`, which
 * the outbox and relay passes run their claims and reclaims through, turns it into `undefined`.
 * `reclaimWithinDeadline` is the one way both passes run their reclaim: bounded by the pass's
 * deadline, sent again as a deadlock victim, `undefined` when it ended at the deadline.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { DEADLOCK_ATTEMPTS } from '../../lib/db/deadlock-victim.ts';
import {
  endedAtDeadline,
  InvocationEndedError,
  leaseWithinBudget,
  reclaimWithinDeadline,
  requireStatementBudgetMs,
  statementBudgetMs,
  unlessEndedAtDeadline,
  withStatementBudget,
} from '../../lib/db/statement-budget.ts';
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

  it('reclaimWithinDeadline: bounded by the pass deadline (not the budget it runs in), a deadlock victim sent again, undefined when it ended at the deadline', async () => {
    let remaining = 4000;
    let expired = false;
    const deadline = { remainingMs: () => remaining, expired: () => expired };
    const heard: unknown[] = [];
    const onCancelled = (error: unknown) => heard.push(error);
    const deadlock = () => new TransientDatabaseError('deadlock detected', '40P01');

    // Inside a pass's budget that runs to the invocation's end, the reclaim still gets the deadline's.
    let attempts = 0;
    const seen = await withStatementBudget(
      () => 60_000,
      () =>
        reclaimWithinDeadline(async () => {
          if (++attempts === 1) throw deadlock();
          return { statementMs: statementBudgetMs(), leaseMs: leaseWithinBudget(300_000) };
        }, deadline),
    );
    assert.deepEqual(seen, { statementMs: 4000, leaseMs: 4000 }, 'its statement and any lease are bounded by the pass deadline');
    assert.equal(attempts, 2, 'the deadlock victim was sent again');
    attempts = 0;
    const alwaysVictim = async () => {
      attempts++;
      throw deadlock();
    };
    await assert.rejects(reclaimWithinDeadline(alwaysVictim, deadline), /deadlock detected/);
    assert.equal(attempts, DEADLOCK_ATTEMPTS, 'a victim every time fails after the last attempt');
    await assert.rejects(reclaimWithinDeadline(() => Promise.reject(cancelled()), deadline, onCancelled), /statement timeout/, 'cancelled before the deadline: the configured timeout');

    remaining = 0;
    expired = true;
    let sent = false;
    const notSent = await reclaimWithinDeadline(async () => {
      requireStatementBudgetMs();
      sent = true;
    }, deadline, onCancelled);
    assert.deepEqual([notSent, sent, heard], [undefined, false, []], 'not sent once the deadline has passed, and no cancellation heard of');
    const error = cancelled();
    assert.equal(await reclaimWithinDeadline(() => Promise.reject(error), deadline, onCancelled), undefined);
    assert.deepEqual(heard, [error], 'a cancellation at the deadline is heard of');
    await assert.rejects(reclaimWithinDeadline(() => Promise.reject(new Error('boom')), deadline, onCancelled), /boom/);
  });
});
