/**
 * What leaves a Lambda handler that fails carries no secret. The runtime logs a thrown error's
 * name, message and stack (and writes them in the invocation's error response): a line as public
 * as QueueBox's own. A driver's message can carry a connection string with its password or a
 * `password=` pair, and a pass's error quotes it (`OutboxPassError`: `outbox pass failed: …`,
 * `ReclaimIncompleteError`: `reclaim failed: …`). Each handler throws the same error, its class
 * and data kept, its message and stack redacted; the poller's own `outbox pass failed` line
 * carries the cause redacted. Before, all of it carried the secrets.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import type { Context } from 'aws-lambda';
import { createInboxRelay } from '../../functions/inbox-relay.ts';
import { handler as migrateHandler } from '../../functions/migrate.ts';
import { createOutboxPoller } from '../../functions/outbox-poller.ts';
import { handler as reclaimHandler } from '../../functions/reclaim.ts';
import { handler as replayHandler } from '../../functions/replay.ts';
import { handler as retentionHandler } from '../../functions/retention.ts';
import type { Driver } from '../../lib/db/driver.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { ReclaimIncompleteError } from '../../lib/operations/reclaim-now.ts';
import { OutboxPassError } from '../../lib/outbox/outbox-pass.ts';
import { setContainer } from '../../lib/runtime/container.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { fakeLambdaContext } from '../helpers/lambda-context.ts';
import { captureStdout } from '../helpers/stdout-capture.ts';

const SECRETS = /hunter2|s3cr3t/;

/** A driver's error whose message carries a connection string with its password and a `password=` pair. */
function leakyError(): Error {
  return Object.assign(new Error('connection to server failed: postgres://u:hunter2@h/db password=s3cr3t; is the server running?'), { code: '08001' });
}

/** What the Lambda runtime writes of an error a handler threw: its error response (type, message, stack lines) and the error's enumerable fields. */
function runtimeLogOf(error: unknown): string {
  const e = error as Error;
  return JSON.stringify({ errorType: e.name, errorMessage: e.message, trace: String(e.stack).split('\n'), fields: e });
}

/** The thrown error: the secrets absent from all the runtime writes of it, the rest of the driver's message present. */
function assertRedactedThrow(error: unknown, name: string): true {
  assert.ok(error instanceof Error, 'an Error is thrown');
  assert.equal(error.name, name);
  assert.doesNotMatch(runtimeLogOf(error), SECRETS, 'no secret in what the runtime logs');
  assert.match(error.message, /connection to server failed: postgres:\/\/\*\*\*@h\/db password=\*\*\*; is the server running\?/);
  assert.match(String(error.stack), /\n {4}at /, 'the stack keeps its frames');
  return true;
}

describe('handlers throw their errors redacted', () => {
  let db: TestDatabase;
  const context = (): Context => fakeLambdaContext({ timeoutMs: 2200 });
  /** Every method of the driver fails with `leakyError()`. */
  let failing: Driver;

  before(async () => {
    db = await createTestDatabase({ lambda: { deadlineMarginMs: 1000 }, retention: { enabled: true } });
    failing = new Proxy(db.driver, {
      get(target, property) {
        const value = Reflect.get(target, property) as unknown;
        if (typeof value !== 'function' || property === 'dialect' || property === 'useLogger') return value;
        return () => Promise.reject(leakyError());
      },
    });
  });
  after(async () => {
    setContainer(undefined);
    await db.drop();
  });
  const useDriver = (driver: Driver, logLevel: 'ERROR' | 'SILENT' = 'SILENT') =>
    setContainer({ config: db.config, driver, logger: createLogger({ serviceName: 'test', logLevel }), env: {}, writeMetrics: () => {} });

  it('the outbox poller: its pass fails on a driver error; OutboxPassError is thrown redacted with its summary, and its log line carries the cause redacted', async () => {
    // The reclaim fails (not at the deadline): the pass fails with it.
    useDriver(
      Object.create(db.driver, { outboxReclaimExpired: { value: () => Promise.reject(leakyError()) } }),
      'ERROR',
    );
    const poller = createOutboxPoller({ buildDestinations: () => new Map() });
    let thrown: unknown;
    const { lines } = await captureStdout(() => poller({ source: 'aws.events' }, context()).catch((error: unknown) => void (thrown = error)), { stderr: true });
    assertRedactedThrow(thrown, 'OutboxPassError');
    assert.ok(thrown instanceof OutboxPassError);
    assert.match(thrown.message, /^outbox pass failed: connection to server failed/);
    assert.equal(thrown.summary.claimed, 0, 'the summary is kept');
    const line = lines.filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Record<string, unknown>).find((l) => l.message === 'outbox pass failed');
    assert.ok(line, lines.join('\n'));
    assert.doesNotMatch(JSON.stringify(line), SECRETS);
    assert.match(String(line.error), /^Error: connection to server failed: postgres:\/\/\*\*\*@h\/db password=\*\*\*; is the server running\?$/);
    assert.ok(line.summary, 'the line keeps the summary');
  });

  it('the inbox relay: the driver error its pass fails with is thrown redacted, the same object, its code kept', async () => {
    const error = leakyError();
    useDriver(Object.create(db.driver, { inboxReclaimExpired: { value: () => Promise.reject(error) } }));
    await assert.rejects(createInboxRelay()({ source: 'aws.events' }, context()), (thrown: unknown) => {
      assert.equal(thrown, error, 'the error itself, redacted in place');
      assert.equal((thrown as { code?: unknown }).code, '08001');
      return assertRedactedThrow(thrown, 'Error');
    });
  });

  it('reclaim: ReclaimIncompleteError, which quotes the driver error, is thrown redacted', async () => {
    useDriver(failing);
    await assert.rejects(reclaimHandler({}, context()), (thrown: unknown) => thrown instanceof ReclaimIncompleteError && assertRedactedThrow(thrown, 'ReclaimIncompleteError'));
  });

  it('replay and retention: the driver error is thrown redacted', async () => {
    useDriver(failing);
    await assert.rejects(replayHandler({ ids: [randomUUID()] }, context()), (thrown: unknown) => assertRedactedThrow(thrown, 'Error'));
    await assert.rejects(retentionHandler({}, context()), (thrown: unknown) => assertRedactedThrow(thrown, 'Error'));
  });

  it('migrate: a refused event that quotes a secret is thrown redacted (before any database is reached)', async () => {
    await assert.rejects(migrateHandler('postgres://u:hunter2@h/db password=s3cr3t', context()), (thrown: unknown) => {
      assert.equal((thrown as Error).name, 'UsageError');
      assert.doesNotMatch(runtimeLogOf(thrown), SECRETS);
      assert.match((thrown as Error).message, /the migrate event is \{\}.*got "postgres:\/\/\*\*\*@h\/db password=\*\*\*"/);
      return true;
    });
  });
});
