/**
 * A relay pass frozen while a forward is on its way (a container frozen, a laptop asleep under
 * `queuebox local`) and resumed past its invocation's end: the forward is not sent, since the
 * invocation has no time left. It did not run: the rows stay `processing` for the reclaim, and the
 * pass, as the outbox pass does, counts them in `outOfTime` and warns once. No other write is tried
 * for them: before, a batched forward not sent was "failed" and sent again row by row (a warning
 * naming a failure), and a row forward not sent was followed by a retry write, not sent either,
 * each logged as an error ("inbox retry write failed").
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import type { Driver } from '../../lib/db/driver.ts';
import { runRelayPass } from '../../lib/inbox/relay-pass.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import { createDeadline } from '../../lib/runtime/deadline.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { captureStdout } from '../helpers/stdout-capture.ts';

const OUT_OF_TIME = 'inbox relay pass ran out of invocation time before writing rows';

describe('inbox relay pass: a forward not sent because the invocation has no time left', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({
      inbox: { relay: { batchSize: 5, concurrency: 5, claimTimeoutMs: 60_000 }, sources: { shop: { type: 'http', path: '/shop', auth: { type: 'none' } } } },
      lambda: { deadlineMarginMs: 1000 },
    });
  });
  after(async () => db.drop());
  beforeEach(async () => {
    await db.query(`TRUNCATE "${db.schema}".inbox, "${db.schema}".outbox, "${db.schema}".queuebox_maintenance`);
    for (let i = 0; i < 5; i++) await db.driver.inboxInsert({ source: 'shop', idempotencyKey: `k${i}`, eventType: 'created', payload: { i }, consumption: 'push' });
  });

  /**
   * A drain pass whose invocation (20 s) is frozen for 60 s as `write` is called, before it reaches
   * the driver; `withoutBatch`: a driver without the batched forward (row by row, as on SQL Server);
   * `failing`: a row forward that fails (a refused write) before the frozen write, with the relay's
   * `maxAttempts` (1: the failure makes the row dead; more: it is retried).
   */
  async function frozenAt(write: 'inboxForwardMany' | 'inboxForward' | 'inboxRetryMany' | 'inboxMarkDeadMany', withoutBatch = false, failing?: { maxAttempts: number }) {
    const ends = Date.now() + 20_000;
    let frozenMs = 0;
    const context = { getRemainingTimeInMillis: () => Math.max(0, ends - Date.now() - frozenMs) };
    const base = db.newDriver();
    const driver: Driver = Object.create(base, {
      [write]: {
        value: (...args: unknown[]) => {
          frozenMs = 60_000;
          return (base[write] as (...a: unknown[]) => Promise<unknown>)(...args);
        },
      },
      ...(withoutBatch ? { inboxForwardMany: { value: undefined } } : {}),
      ...(failing === undefined ? {} : { inboxForward: { value: () => Promise.reject(new Error('the outbox refused the row')) } }),
    });
    const config = failing === undefined ? db.config : { ...db.config, inbox: { ...db.config.inbox, relay: { ...db.config.inbox.relay, maxAttempts: failing.maxAttempts } } };
    const logger = createLogger({ serviceName: 'queuebox', logLevel: 'INFO' });
    const metrics = new QueueBoxMetrics({ namespace: 'QueueBox', serviceName: 'test', write: () => {} });
    const { result: summary, lines } = await captureStdout(
      () => runRelayPass({ config, driver, logger, metrics, deadline: createDeadline(context, db.config.lambda.deadlineMarginMs), mode: 'drain' }),
      { stderr: true },
    );
    const logged = lines.filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as { level: string; message: string; [field: string]: unknown });
    const rows = await db.query<{ state: string; attempt: number }>(`SELECT state, attempt FROM "${db.schema}".inbox ORDER BY idempotency_key`);
    const outboxRows = (await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".outbox`))[0]!.n;
    return { summary, logged, rows, outboxRows };
  }

  it('a batched forward: the pass counts its rows out of time, warns once, and forwards none row by row', { timeout: 60_000 }, async () => {
    const { summary, logged, rows, outboxRows } = await frozenAt('inboxForwardMany');
    assert.deepEqual(
      { claimed: summary.claimed, forwarded: summary.forwarded, retried: summary.retried, dead: summary.dead, abandoned: summary.abandoned, outOfTime: summary.outOfTime },
      { claimed: 5, forwarded: 0, retried: 0, dead: 0, abandoned: 5, outOfTime: 5 },
    );
    assert.deepEqual(rows, rows.map(() => ({ state: 'processing', attempt: 0 })), 'the rows are as their claim left them');
    assert.equal(outboxRows, 0);
    const warnings = logged.filter((l) => l.message.startsWith(OUT_OF_TIME));
    assert.deepEqual(warnings.map((l) => [l.level, l.outOfTime]), [['WARN', 5]]);
    assert.equal(logged.filter((l) => l.message.startsWith('inbox batched forward failed')).length, 0, 'no fallback to row by row');
    assert.deepEqual(logged.filter((l) => l.level === 'ERROR').map((l) => l.message), []);
  });

  it('row by row: each forward not sent is counted, and no retry is written or logged as failed', { timeout: 60_000 }, async () => {
    const { summary, logged, rows, outboxRows } = await frozenAt('inboxForward', true);
    assert.deepEqual(
      { claimed: summary.claimed, forwarded: summary.forwarded, retried: summary.retried, abandoned: summary.abandoned, outOfTime: summary.outOfTime },
      { claimed: 5, forwarded: 0, retried: 0, abandoned: 5, outOfTime: 5 },
    );
    assert.deepEqual(rows, rows.map(() => ({ state: 'processing', attempt: 0 })));
    assert.equal(outboxRows, 0);
    assert.deepEqual(logged.filter((l) => l.message.startsWith(OUT_OF_TIME)).map((l) => l.outOfTime), [5]);
    assert.deepEqual(logged.filter((l) => l.level === 'ERROR').map((l) => l.message), [], 'no "inbox retry write failed"');
  });

  for (const [write, maxAttempts] of [['inboxRetryMany', 5], ['inboxMarkDeadMany', 1]] as const) {
    it(`a ${write === 'inboxRetryMany' ? 'retry' : 'dead'} write after a failed forward: each row not written is counted once, and nothing is logged as failed`, { timeout: 60_000 }, async () => {
      const { summary, logged, rows, outboxRows } = await frozenAt(write, true, { maxAttempts });
      assert.deepEqual(
        { claimed: summary.claimed, forwarded: summary.forwarded, retried: summary.retried, dead: summary.dead, abandoned: summary.abandoned, outOfTime: summary.outOfTime },
        { claimed: 5, forwarded: 0, retried: 0, dead: 0, abandoned: 5, outOfTime: 5 },
      );
      assert.deepEqual(rows, rows.map(() => ({ state: 'processing', attempt: 0 })), 'neither retried nor dead: the reclaim returns them');
      assert.equal(outboxRows, 0);
      assert.deepEqual(logged.filter((l) => l.message.startsWith(OUT_OF_TIME)).map((l) => l.outOfTime), [5]);
      assert.deepEqual(logged.filter((l) => l.level === 'ERROR').map((l) => l.message), [], 'no "inbox retry write failed" or "inbox dead write failed"');
    });
  }
});
