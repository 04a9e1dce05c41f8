/**
 * The relay's failed finishing writes are logged with their error redacted: `inbox retry write
 * failed` and `inbox dead write failed` carry the error as an error (name, code, message, stack
 * with its frames), its message and stack redacted as `redactError` redacts, and `metrics not
 * written` carries the sink's error as redacted text, as the pass's other lines do. A driver's
 * message can carry a connection string with its password or a `password=` pair. Before, the
 * first two handed the logger the error whole, and the third `String(error)`.
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import type { Driver } from '../../lib/db/driver.ts';
import { runRelayPass, type RelaySummary } from '../../lib/inbox/relay-pass.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import { createDeadline } from '../../lib/runtime/deadline.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { fakeLambdaContext } from '../helpers/lambda-context.ts';
import { captureStdout } from '../helpers/stdout-capture.ts';

const SECRETS = /hunter2|s3cr3t/;

/** A driver's error whose message carries a connection string with its password and a `password=` pair. */
function leakyError(): Error {
  return Object.assign(new Error('connection to server failed: postgres://u:hunter2@h/db password=s3cr3t; is the server running?'), { code: '08006' });
}

type Line = Record<string, unknown>;

/** The line's `error` is the error as Powertools writes one — name, code, message, stack with its frames — with no secret in it. */
function assertLoggedError(line: Line | undefined): void {
  assert.ok(line !== undefined, 'the failure is logged');
  assert.doesNotMatch(JSON.stringify(line), SECRETS, 'no secret anywhere in the line');
  const error = line.error as Record<string, unknown>;
  assert.equal(error.name, 'Error');
  assert.equal(error.code, '08006', 'the SQLSTATE is kept');
  assert.equal(error.message, 'connection to server failed: postgres://***@h/db password=***; is the server running?');
  assert.match(String(error.stack), /^Error: connection to server failed: postgres:\/\/\*\*\*@h\/db password=\*\*\*; is the server running\?\n {4}at /);
}

describe('inbox relay pass: failed finishing writes are logged redacted', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({
      inbox: { relay: { batchSize: 5, claimTimeoutMs: 60_000, maxAttempts: 2 }, sources: { shop: { type: 'http', path: '/shop', auth: { type: 'none' } } } },
      lambda: { deadlineMarginMs: 1000 },
    });
  });
  after(async () => db.drop());
  beforeEach(async () => {
    await db.query(`TRUNCATE "${db.schema}".inbox, "${db.schema}".outbox, "${db.schema}".queuebox_maintenance`);
  });

  const store = (key: string) => db.driver.inboxInsert({ source: 'shop', idempotencyKey: key, eventType: 'created', payload: { key }, consumption: 'push' });
  /** A driver whose forwards fail (row by row), with `overrides` on top. */
  const failingForwards = (overrides: PropertyDescriptorMap): Driver =>
    Object.create(db.newDriver(), {
      inboxForwardMany: { value: undefined },
      inboxForward: { value: () => Promise.reject(new Error('the outbox refused the row')) },
      ...overrides,
    });
  /** A drain pass through the real Powertools Logger; its JSON lines. */
  async function loggedPass(driver: Driver, metrics = new QueueBoxMetrics({ namespace: 'QueueBox', serviceName: 'test', write: () => {} })): Promise<{ summary: RelaySummary; lines: Line[] }> {
    const logger = createLogger({ serviceName: 'queuebox', logLevel: 'INFO' });
    const deadline = createDeadline(fakeLambdaContext({ timeoutMs: 20_000 }), db.config.lambda.deadlineMarginMs);
    const { result: summary, lines } = await captureStdout(() => runRelayPass({ config: db.config, driver, logger, metrics, deadline, mode: 'drain' }), { stderr: true });
    return { summary, lines: lines.filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Line) };
  }

  it('a retry write that fails: `inbox retry write failed` carries its error redacted', async () => {
    await store('retry-1');
    const { summary, lines } = await loggedPass(failingForwards({ inboxRetryMany: { value: () => Promise.reject(leakyError()) } }));
    assert.deepEqual([summary.claimed, summary.retried], [1, 0]);
    assertLoggedError(lines.find((l) => l.message === 'inbox retry write failed; the row is reclaimed after its lease'));
  });

  it('a dead write that fails: `inbox dead write failed` carries its error redacted', async () => {
    await store('dead-1');
    // The row's last attempt: its failure makes it dead.
    await db.query(`UPDATE "${db.schema}".inbox SET attempt = 1`);
    const { summary, lines } = await loggedPass(failingForwards({ inboxMarkDeadMany: { value: () => Promise.reject(leakyError()) } }));
    assert.deepEqual([summary.claimed, summary.dead], [1, 0]);
    assertLoggedError(lines.find((l) => l.message === 'inbox dead write failed; the rows are reclaimed after their lease'));
  });

  it('a metrics sink that fails: `metrics not written` carries its error as redacted text', async () => {
    await store('dead-2');
    await db.query(`UPDATE "${db.schema}".inbox SET attempt = 1`);
    let failures = 0;
    // The sink fails once: the flush right after the dead write; the pass's own flush writes.
    const metrics = new QueueBoxMetrics({
      namespace: 'QueueBox',
      serviceName: 'test',
      write: () => {
        if (failures++ === 0) throw leakyError();
      },
    });
    const { summary, lines } = await loggedPass(failingForwards({}), metrics);
    assert.equal(summary.dead, 1);
    const line = lines.find((l) => l.message === 'metrics not written');
    assert.ok(line, 'the failed write is logged');
    assert.doesNotMatch(JSON.stringify(line), SECRETS);
    assert.equal(line.error, 'Error: connection to server failed: postgres://***@h/db password=***; is the server running?');
  });
});
