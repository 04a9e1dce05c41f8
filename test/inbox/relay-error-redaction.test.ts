/**
 * The relay pass logs the errors it hands on redacted (`redactError`), as the outbox pass does: a
 * reclaim cancelled at the pass's deadline, a backlog read that failed. A driver's or pooler's
 * message can carry a connection string with its password or a `password=` pair; the line keeps
 * the rest of the message, bounded to `LAST_ERROR_MAX_LENGTH`. Before, the backlog read's warning
 * carried `String(error)`: the secret and the whole text.
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import { LAST_ERROR_MAX_LENGTH } from '../../lib/claims/redact.ts';
import type { Driver } from '../../lib/db/driver.ts';
import { runRelayPass, type RelaySummary } from '../../lib/inbox/relay-pass.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import { createDeadline } from '../../lib/runtime/deadline.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { captureStdout } from '../helpers/stdout-capture.ts';

/** A driver error whose message carries a connection string with its password, a `password=` pair, and a long tail. */
function leakyError(message: string, code?: string): Error {
  const error = new Error(`${message}; server postgres://queuebox:hunter2@db.internal:5432/app (password=s3cr3t-pw) ${'x'.repeat(3000)}`);
  return code === undefined ? error : Object.assign(error, { code });
}

/** The line's `error` is the message with the secrets masked, within the length bound. */
function assertRedacted(line: Record<string, unknown> | undefined, kept: RegExp): void {
  assert.ok(line !== undefined, 'the error is logged');
  const text = line.error;
  assert.equal(typeof text, 'string');
  assert.doesNotMatch(text as string, /hunter2|s3cr3t-pw/, 'the secrets are masked');
  assert.match(text as string, kept, 'the rest of the message is kept');
  assert.match(text as string, /postgres:\/\/\*\*\*@db\.internal/, 'the connection string is kept, its user info masked');
  assert.ok((text as string).length <= LAST_ERROR_MAX_LENGTH, `the text is bounded (${(text as string).length} characters)`);
}

describe('inbox relay pass: the errors it logs are redacted', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({
      inbox: { relay: { batchSize: 5, claimTimeoutMs: 60_000 }, sources: { shop: { type: 'http', path: '/shop', auth: { type: 'none' } } } },
      lambda: { deadlineMarginMs: 1000 },
    });
  });
  after(async () => db.drop());
  beforeEach(async () => {
    await db.query(`TRUNCATE "${db.schema}".inbox, "${db.schema}".outbox, "${db.schema}".queuebox_maintenance`);
  });

  /** A drain pass of `driver` through the real Powertools Logger; its JSON lines. */
  async function loggedPass(driver: Driver, context: { getRemainingTimeInMillis(): number }): Promise<{ summary: RelaySummary; lines: Array<Record<string, unknown>> }> {
    const logger = createLogger({ serviceName: 'queuebox', logLevel: 'INFO' });
    const metrics = new QueueBoxMetrics({ namespace: 'QueueBox', serviceName: 'test', write: () => {} });
    const { result: summary, lines } = await captureStdout(
      () => runRelayPass({ config: db.config, driver, logger, metrics, deadline: createDeadline(context, db.config.lambda.deadlineMarginMs), mode: 'drain' }),
      { stderr: true },
    );
    return { summary, lines: lines.filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Record<string, unknown>) };
  }

  it('a reclaim cancelled at the pass deadline: the warning carries its error redacted', async () => {
    const ends = Date.now() + 30_000;
    let skewMs = 0;
    const context = { getRemainingTimeInMillis: () => Math.max(0, ends - Date.now() - skewMs) };
    const driver: Driver = Object.create(db.newDriver(), {
      inboxReclaimExpired: {
        // The reclaim ran until the deadline had passed (500 ms of the invocation left, margin 1000) and was cancelled.
        value: async () => {
          skewMs = ends - Date.now() - 500;
          throw leakyError('canceling statement due to statement timeout', '57014');
        },
      },
    });
    const { summary, lines } = await loggedPass(driver, context);
    assert.deepEqual([summary.reclaimed, summary.claimed], [0, 0]);
    assertRedacted(
      lines.find((l) => String(l.message).startsWith('inbox reclaim cancelled at the pass deadline')),
      /^Error: canceling statement due to statement timeout/,
    );
  });

  it('a backlog read that fails: the warning carries its error redacted', async () => {
    const driver: Driver = Object.create(db.newDriver(), {
      inboxStats: { value: () => Promise.reject(leakyError('permission denied for table inbox')) },
    });
    const { lines } = await loggedPass(driver, { getRemainingTimeInMillis: () => 30_000 });
    assertRedacted(
      lines.find((l) => String(l.message).startsWith('inbox stats failed')),
      /^Error: permission denied for table inbox/,
    );
  });
});
