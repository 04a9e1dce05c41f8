/**
 * An outbox pass frozen while a destination call is open (a container frozen, a laptop asleep
 * under `queuebox local`, a wall-clock step) and resumed past its invocation's end: the call answers,
 * and the settle's writes are not sent, since the invocation has no time left. They did not run:
 * nothing is half-done, and the rows stay `processing` for the reclaim, which delivers them again.
 * The pass ends at its deadline with its summary (`outOfTime`) and a warning naming the rows the
 * destination accepted, not with an error (before: `OutboxPassError: … statement not sent: the
 * invocation has no time left`, `stoppedBecause: 'error'`, which in Lambda feeds the Errors alarm).
 * A finishing write that was sent and failed still fails the pass, whatever else was not sent.
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import { createOutboxPoller } from '../../functions/outbox-poller.ts';
import { OutboxPassError, runOutboxPass } from '../../lib/outbox/outbox-pass.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { setContainer } from '../../lib/runtime/container.ts';
import { createInvocationContext } from '../../lib/runtime/invocation-context.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { delegatingPassDriver, inspectRows, insertOutboxRows, passFixture } from '../helpers/outbox-pass-fixture.ts';
import { RecordingDestination } from '../helpers/recording-destination.ts';
import { captureStdout } from '../helpers/stdout-capture.ts';
import { delay } from '../helpers/wait.ts';

const OUT_OF_TIME = 'outbox pass ran out of invocation time before marking rows';

interface LogLine {
  level: string;
  message: string;
  [field: string]: unknown;
}

/**
 * The real poller handler over `db`, one invocation of 20 s (margin 1 s) whose clock jumps 25 s
 * forward while the destination's first call is open: the call answers (every entry `sent`)
 * after the invocation's end. Returns the handler's outcome, its log lines and the destination.
 */
async function frozenMidCall(db: TestDatabase) {
  const logger = createLogger({ serviceName: 'queuebox', logLevel: 'WARN' });
  setContainer({ config: db.config, driver: db.driver, logger, env: {}, writeMetrics: () => {} });
  try {
    let frozenMs = 0;
    let thaw!: () => void;
    const thawed = new Promise<void>((resolve) => (thaw = resolve));
    let calls = 0;
    const destination = new RecordingDestination({
      waitFor: async () => {
        if (calls++ === 0) await thawed;
      },
    });
    const handler = createOutboxPoller({ buildDestinations: () => new Map([['main', destination]]) });
    const context = createInvocationContext({ timeoutMs: 20_000, now: () => Date.now() + frozenMs });
    const { result, lines } = await captureStdout(
      async () => {
        const outcome = handler({ source: 'aws.events' }, context).then(
          (summary) => ({ summary, error: undefined }),
          (error: unknown) => ({ summary: undefined, error }),
        );
        while (destination.offered.length === 0) await delay(10);
        // Frozen with the call open, resumed past the invocation's end; the call then answers.
        frozenMs = 25_000;
        thaw();
        return outcome;
      },
      { stderr: true },
    );
    return { ...result, destination, lines: lines.filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as LogLine) };
  } finally {
    setContainer(undefined);
  }
}

/** Statements of the schema still running (none may outlive the handler). */
async function runningStatements(db: TestDatabase): Promise<number> {
  const rows = await db.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND state NOT IN ('idle') AND query LIKE '%"${db.schema}".%'`,
  );
  return rows[0]!.n;
}

describe('outbox poller handler: a settle not sent because the invocation has no time left', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({
      destinations: { main: { type: 'sqs', queueUrl: 'http://localhost:1/000000000000/main' } },
      outbox: { routes: [{ topicPattern: '**', destination: 'main' }], pollIntervalMs: 20 },
      lambda: { deadlineMarginMs: 1000 },
    });
  });
  after(async () => db.drop());
  beforeEach(async () => {
    await db.query(`DELETE FROM "${db.schema}".outbox`);
    await db.query(`DELETE FROM "${db.schema}".queuebox_maintenance`);
  });

  it('ends at its deadline with its summary and a warning; the rows stay processing and are delivered again after their lease', { timeout: 60_000 }, async () => {
    const ids = await insertOutboxRows(db, Array.from({ length: 4 }, (_, i) => ({ topic: 'orders.paid', key: `k${i}`, payload: { i } })));
    const { summary, error, destination, lines } = await frozenMidCall(db);

    assert.equal(error, undefined, `the handler resolves (it rejected with ${String(error)})`);
    assert.ok(summary !== undefined);
    assert.equal(summary.stoppedBecause, 'deadline');
    assert.deepEqual(
      { claimed: summary.claimed, sent: summary.sent, retried: summary.retried, dead: summary.dead, claimsLost: summary.claimsLost, abandoned: summary.abandoned, outOfTime: summary.outOfTime },
      { claimed: 4, sent: 0, retried: 0, dead: 0, claimsLost: 0, abandoned: 4, outOfTime: 4 },
    );
    assert.equal(destination.deliveries.length, 4, 'the destination accepted every row');

    // The writes did not run: each row is as its claim left it.
    const rows = await inspectRows(db, ids);
    assert.deepEqual(
      rows.map((r) => [r.state, r.attempt, r.last_error, r.claim_token !== null]),
      ids.map(() => ['processing', 0, null, true]),
    );
    assert.equal(await runningStatements(db), 0, 'no statement of the invocation is left running');

    const warning = lines.find((l) => l.message.startsWith(OUT_OF_TIME));
    assert.ok(warning !== undefined, 'the pass warns of the rows it could not mark');
    assert.equal(warning.level, 'WARN');
    assert.deepEqual([warning.outOfTime, warning.deliveredNotMarked], [4, 4]);
    assert.match(warning.message, /delivered again/);
    assert.deepEqual(
      lines.filter((l) => l.level === 'ERROR').map((l) => l.message),
      [],
      'no error is logged (no "outbox pass failed")',
    );

    // At least once: once their lease has ended (here: moved to the past), the reclaim returns the
    // rows, charged one attempt, and the next pass delivers them again.
    await db.query(`UPDATE "${db.schema}".outbox SET lease_expires_at = clock_timestamp() - interval '1 second' WHERE id = ANY($1)`, [ids]);
    const reclaim = await db.driver.outboxReclaimExpired({ throttleMs: 0 });
    assert.equal(reclaim.reclaimed, 4);
    const again = new RecordingDestination();
    setContainer({ config: db.config, driver: db.driver, logger: createLogger({ serviceName: 'queuebox', logLevel: 'SILENT' }), env: {}, writeMetrics: () => {} });
    try {
      const next = await createOutboxPoller({ buildDestinations: () => new Map([['main', again]]) })({ source: 'aws.events' }, createInvocationContext({ timeoutMs: 3000 }));
      assert.equal(next.sent, 4);
    } finally {
      setContainer(undefined);
    }
    assert.deepEqual(new Set(again.deliveries.map((d) => d.id)), new Set(ids));
    assert.deepEqual((await inspectRows(db, ids)).map((r) => [r.state, r.attempt]), ids.map(() => ['sent', 1]));
  });
});

describe('outbox poller handler: a settle of several rows of a key not sent because the invocation has no time left', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({
      destinations: { main: { type: 'sqs', queueUrl: 'http://localhost:1/000000000000/main' } },
      outbox: { routes: [{ topicPattern: '**', destination: 'main' }], pollIntervalMs: 20, rowsPerKey: 10 },
      lambda: { deadlineMarginMs: 1000 },
    });
  });
  after(async () => db.drop());

  it('counts the key’s first row, accepted, and its followers, never offered, and fails nothing', { timeout: 60_000 }, async () => {
    const ids = await insertOutboxRows(db, Array.from({ length: 4 }, (_, i) => ({ topic: 'orders.paid', key: 'k', payload: { i } })));
    const { summary, error, destination, lines } = await frozenMidCall(db);

    assert.equal(error, undefined, `the handler resolves (it rejected with ${String(error)})`);
    assert.ok(summary !== undefined);
    assert.equal(summary.stoppedBecause, 'deadline');
    assert.deepEqual(
      { claimed: summary.claimed, sent: summary.sent, released: summary.released, abandoned: summary.abandoned, outOfTime: summary.outOfTime },
      { claimed: 4, sent: 0, released: 0, abandoned: 4, outOfTime: 4 },
    );
    assert.deepEqual(destination.offered.map((m) => m.id), [ids[0]], 'only the key’s first row was offered');
    assert.deepEqual((await inspectRows(db, ids)).map((r) => [r.state, r.attempt]), ids.map(() => ['processing', 0]));
    assert.equal(await runningStatements(db), 0, 'no statement of the invocation is left running');
    const warning = lines.find((l) => l.message.startsWith(OUT_OF_TIME));
    assert.deepEqual([warning?.outOfTime, warning?.deliveredNotMarked], [4, 1]);
    assert.deepEqual(lines.filter((l) => l.level === 'ERROR').map((l) => l.message), []);
  });
});

describe('outbox pass: a settle whose time ran out while its writes were on their way', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({
      destinations: { main: { type: 'sqs', queueUrl: 'http://localhost:1/000000000000/main' } },
      outbox: { routes: [{ topicPattern: '**', destination: 'main' }], pollIntervalMs: 10 },
    });
  });
  after(async () => db.drop());
  beforeEach(async () => {
    await db.query(`DELETE FROM "${db.schema}".outbox`);
    await db.query(`DELETE FROM "${db.schema}".queuebox_maintenance`);
  });

  /** Two rows answered `sent`, two dead at once (a permanent failure), each of its own key. */
  async function mixedRows(): Promise<string[]> {
    return insertOutboxRows(db, ['sent', 'sent', 'dead', 'dead'].map((answer, i) => ({ topic: 'orders.paid', key: `k${i}`, payload: { answer } })));
  }
  const destination = () =>
    new RecordingDestination({ answer: (m) => (m.payload.answer === 'dead' ? { status: 'permanent', error: 'InvalidParameterValue', deadNow: true } : 'sent') });

  it('counts the rows of the writes not sent, and the rows of the write that landed as what it made them', { timeout: 60_000 }, async () => {
    const ids = await mixedRows();
    let frozenMs = 0;
    const context = createInvocationContext({ timeoutMs: 30_000, now: () => Date.now() + frozenMs });
    // The sent mark is sent and lands; the dead write, waiting meanwhile (as for a connection), is
    // reached after a freeze past the invocation's end.
    let landed!: () => void;
    const sentLanded = new Promise<void>((resolve) => (landed = resolve));
    const driver = delegatingPassDriver(db.driver, {
      outboxMarkSentMany: (p) => db.driver.outboxMarkSentMany(p).finally(landed),
      outboxMarkDeadMany: async (p) => {
        await sentLanded;
        frozenMs = 60_000;
        return db.driver.outboxMarkDeadMany(p);
      },
    });
    const options = passFixture(db, { destinations: [destination()], context, driver, marginMs: 1000, mode: 'deadline' });
    const summary = await runOutboxPass(options);
    assert.equal(summary.stoppedBecause, 'deadline');
    assert.deepEqual(
      { sent: summary.sent, dead: summary.dead, abandoned: summary.abandoned, outOfTime: summary.outOfTime },
      { sent: 2, dead: 0, abandoned: 2, outOfTime: 2 },
    );
    assert.deepEqual((await inspectRows(db, ids)).map((r) => r.state), ['sent', 'sent', 'processing', 'processing']);
    const warning = options.logger.at('warn').find((e) => e.message.startsWith(OUT_OF_TIME));
    assert.deepEqual([warning?.extra.outOfTime, warning?.extra.deliveredNotMarked], [2, 0]);
  });

  it('still fails with the error of a write that was sent and failed, not with the one not sent', { timeout: 60_000 }, async () => {
    const ids = await mixedRows();
    let frozenMs = 0;
    const context = createInvocationContext({ timeoutMs: 30_000, now: () => Date.now() + frozenMs });
    const lostConnection = Object.assign(new Error('terminating connection due to administrator command'), { code: '57P01' });
    // The sent mark is not sent (the invocation has no time left by then); the dead write was sent and failed.
    const driver = delegatingPassDriver(db.driver, {
      outboxMarkSentMany: (p) => {
        frozenMs = 60_000;
        return db.driver.outboxMarkSentMany(p);
      },
      outboxMarkDeadMany: () => Promise.reject(lostConnection),
    });
    const options = passFixture(db, { destinations: [destination()], context, driver, marginMs: 1000, mode: 'deadline' });
    const failed = await runOutboxPass(options).then(
      () => undefined,
      (error: unknown) => error,
    );
    assert.ok(failed instanceof OutboxPassError, `the pass fails (${String(failed)})`);
    assert.equal(failed.cause, lostConnection);
    assert.equal(failed.summary.stoppedBecause, 'error');
    assert.deepEqual((await inspectRows(db, ids)).map((r) => r.state), ids.map(() => 'processing'));
  });
});
