/**
 * The outbox pass logs the errors it hands on redacted (`redactError`), as the relay does: a claim
 * or the reclaim cancelled at the pass's deadline, a renewal that failed, a backlog read that
 * failed. A driver's, pooler's or proxy's message can carry a connection string with its password,
 * a `password=` pair or a token, and log lines reach more readers than the database's credentials
 * should; `redactError` masks them and bounds the text to `LAST_ERROR_MAX_LENGTH`, keeping the rest
 * of the message. Before, these four lines carried `String(error)`: the secret and the whole text.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { LAST_ERROR_MAX_LENGTH } from '../../lib/claims/redact.ts';
import { runOutboxPass } from '../../lib/outbox/outbox-pass.ts';
import { createInvocationContext } from '../../lib/runtime/invocation-context.ts';
import type { TestDatabase } from '../helpers/database.ts';
import { delegatingPassDriver, insertOutboxRows, passFixture, withOutboxDatabase } from '../helpers/outbox-pass-fixture.ts';
import { RecordingDestination } from '../helpers/recording-destination.ts';
import type { LogEntry } from '../helpers/recording-logger.ts';

/** A driver error whose message carries a connection string with its password, a `password=` pair, and a long tail. */
function leakyError(message: string, code?: string): Error {
  const error = new Error(`${message}; server postgres://queuebox:hunter2@db.internal:5432/app (password=s3cr3t-pw) ${'x'.repeat(3000)}`);
  return code === undefined ? error : Object.assign(error, { code });
}

/** The line's `error` is the message with the secrets masked, within the length bound. */
function assertRedacted(entry: LogEntry | undefined, kept: RegExp): void {
  assert.ok(entry !== undefined, 'the error is logged');
  const text = entry.extra.error;
  assert.equal(typeof text, 'string');
  assert.doesNotMatch(text as string, /hunter2|s3cr3t-pw/, 'the secrets are masked');
  assert.match(text as string, kept, 'the rest of the message is kept');
  assert.match(text as string, /postgres:\/\/\*\*\*@db\.internal/, 'the connection string is kept, its user info masked');
  assert.ok((text as string).length <= LAST_ERROR_MAX_LENGTH, `the text is bounded (${(text as string).length} characters)`);
}

/** An invocation context of `timeoutMs` whose clock the test can move past the pass's deadline. */
function movableContext(timeoutMs: number) {
  let skewMs = 0;
  const context = createInvocationContext({ timeoutMs, now: () => Date.now() + skewMs });
  return { context, leaveMs: (ms: number) => void (skewMs += context.getRemainingTimeInMillis() - ms) };
}

describe('outbox pass: the errors it logs are redacted', () => {
  let db: TestDatabase;
  withOutboxDatabase((d) => (db = d));

  it('a claim cancelled at the pass deadline: the warning carries its error redacted', async () => {
    await insertOutboxRows(db, [{ topic: 'orders', payload: { n: 1 } }]);
    const clock = movableContext(30_000);
    const driver = delegatingPassDriver(db.driver, {
      // The claim waited until the deadline had passed (500 ms of the invocation left, margin 1000) and was cancelled.
      outboxClaimMany: async () => {
        clock.leaveMs(500);
        throw leakyError('canceling statement due to statement timeout', '57014');
      },
    });
    const fixture = passFixture(db, { destinations: [new RecordingDestination()], driver, context: clock.context, marginMs: 1000, mode: 'deadline' });
    const summary = await runOutboxPass(fixture);
    assert.deepEqual([summary.stoppedBecause, summary.claimed], ['deadline', 0]);
    assertRedacted(
      fixture.logger.at('warn').find((e) => e.message.startsWith('outbox claim cancelled at the pass deadline')),
      /^Error: canceling statement due to statement timeout/,
    );
  });

  it('a reclaim cancelled at the pass deadline: the warning carries its error redacted', async () => {
    const clock = movableContext(30_000);
    const driver = delegatingPassDriver(db.driver, {
      outboxReclaimExpired: async () => {
        clock.leaveMs(500);
        throw leakyError('canceling statement due to statement timeout', '57014');
      },
    });
    const fixture = passFixture(db, { destinations: [new RecordingDestination()], driver, context: clock.context, marginMs: 1000, mode: 'deadline' });
    const summary = await runOutboxPass(fixture);
    assert.deepEqual([summary.stoppedBecause, summary.reclaimRan], ['deadline', false]);
    assertRedacted(
      fixture.logger.at('warn').find((e) => e.message.startsWith('outbox reclaim cancelled at the pass deadline')),
      /^Error: canceling statement due to statement timeout/,
    );
  });

  it('a renewal that fails: the claim-lost warning carries its error redacted', async () => {
    await insertOutboxRows(db, [{ topic: 'orders', payload: { n: 1 } }]);
    const driver = delegatingPassDriver(db.driver, { outboxRenewMany: () => Promise.reject(leakyError('connection terminated unexpectedly')) });
    const destination = new RecordingDestination({ delayMs: 10_000 });
    // Leases of 1.5 s: the first renewal is sent after 500 ms, while the publish is open.
    const fixture = passFixture(db, { destinations: [destination], driver, outbox: { claimTimeoutMs: 1500 } });
    const summary = await runOutboxPass(fixture);
    assert.deepEqual([summary.claimsLost, summary.sent, destination.abortedCalls], [1, 0, 1]);
    assertRedacted(
      fixture.logger.at('warn').find((e) => e.message.startsWith('outbox claim lost at renewal')),
      /^Error: connection terminated unexpectedly/,
    );
  });

  it('a backlog read that fails: the warning carries its error redacted', async () => {
    const driver = delegatingPassDriver(db.driver, { outboxStats: () => Promise.reject(leakyError('permission denied for table outbox')) });
    const fixture = passFixture(db, { destinations: [new RecordingDestination()], driver });
    const summary = await runOutboxPass(fixture);
    assert.equal(summary.stoppedBecause, 'drained');
    assertRedacted(
      fixture.logger.at('warn').find((e) => e.message.startsWith('outbox stats failed')),
      /^Error: permission denied for table outbox/,
    );
  });
});
