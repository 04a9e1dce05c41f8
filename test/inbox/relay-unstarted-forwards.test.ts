/**
 * Review (attempts): the relay analogue of outbox-unstarted-calls. A claimed batch whose first
 * forward hangs stops the pass; the rows after it were never forwarded, yet they are left
 * `processing`, and the reclaim charges each an attempt — at `maxAttempts: 1` they are `dead`
 * without a single forward.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Driver } from '../../lib/db/driver.ts';
import { runRelayPass } from '../../lib/inbox/relay-pass.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import { createDeadline } from '../../lib/runtime/deadline.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { fakeLambdaContext } from '../helpers/lambda-context.ts';
import { createGate } from '../helpers/wait.ts';

describe('relay rows whose forward never started when the pass stopped', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({
      inbox: {
        relay: { batchSize: 5, claimTimeoutMs: 60_000, maxAttempts: 1, pollIntervalMs: 10, concurrency: 1 },
        sources: { shop: { type: 'http', path: '/shop', auth: { type: 'none' } } },
      },
    });
  });
  after(async () => db.drop());

  it('are not charged an attempt (maxAttempts 1: never made dead without a forward)', async () => {
    const inbox = `"${db.schema}".inbox`;
    const rows: Array<{ id: string }> = [];
    for (const n of [1, 2, 3]) rows.push(await db.driver.inboxInsert({ source: 'shop', idempotencyKey: `k-${n}`, aggregateId: `A${n}`, eventType: 'created', payload: { n }, consumption: 'push' }));
    const never = createGate();
    const forwarded: string[] = [];
    const base = db.newDriver();
    // One by one (no batched forward), one at a time: the first forward never returns.
    const driver = Object.create(base, {
      inboxForwardMany: { value: undefined },
      inboxForward: {
        value: async (...args: Parameters<Driver['inboxForward']>) => {
          forwarded.push(args[0].id);
          if (args[0].id === rows[0]!.id) await never.wait();
          return base.inboxForward(...args);
        },
      },
    }) as Driver;
    const logger = createLogger({ serviceName: 'test', logLevel: 'SILENT' });
    const metrics = new QueueBoxMetrics({ namespace: 'QueueBox', serviceName: 'test', write: () => {} });
    await runRelayPass({ config: db.config, driver, logger, metrics, deadline: createDeadline(fakeLambdaContext({ timeoutMs: 3500 }), 1000), mode: 'deadline' });
    assert.deepEqual(forwarded, [rows[0]!.id], 'only the first row was ever forwarded');
    // The invocation is over: its leases end; the next pass's reclaim runs.
    await db.query(`UPDATE ${inbox} SET lease_expires_at = clock_timestamp() - interval '1 second' WHERE state = 'processing'`);
    await db.driver.inboxReclaimExpired({ maxAttempts: 1 });
    const after = await db.query<{ id: string; state: string; attempt: number }>(`SELECT id, state, attempt FROM ${inbox} ORDER BY sequence`);
    assert.equal(after[0]!.state, 'dead', 'the first row: its only forward outlived its lease');
    assert.deepEqual(
      after.slice(1).map((r) => [r.state, r.attempt]),
      [
        ['pending', 0],
        ['pending', 0],
      ],
      'rows 2 and 3 were never forwarded: no attempt spent, not dead',
    );
    await base.close?.();
  });

  it('a batch that reaches the pass deadline between its forwards releases the rows it did not reach (maxAttempts 1: not dead)', async () => {
    const inbox = `"${db.schema}".inbox`;
    await db.query(`TRUNCATE ${inbox}`);
    const rows: Array<{ id: string }> = [];
    for (const n of [1, 2, 3]) rows.push(await db.driver.inboxInsert({ source: 'shop', idempotencyKey: `late-${n}`, aggregateId: `L${n}`, eventType: 'created', payload: { n }, consumption: 'push' }));
    // An invocation of 20 s, with a deadline margin of 1 s, whose clock jumps to 600 ms before its
    // end while the first forward runs: the pass deadline has passed, the invocation has time left.
    const ends = Date.now() + 20_000;
    let skippedMs = 0;
    const context = { getRemainingTimeInMillis: () => Math.max(0, ends - Date.now() - skippedMs) };
    const forwarded: string[] = [];
    const base = db.newDriver();
    // One by one, one at a time: the worker checks the pass deadline before each row.
    const driver = Object.create(base, {
      inboxForwardMany: { value: undefined },
      inboxForward: {
        value: async (...args: Parameters<Driver['inboxForward']>) => {
          forwarded.push(args[0].id);
          skippedMs = Math.max(0, ends - Date.now() - 600);
          return base.inboxForward(...args);
        },
      },
    }) as Driver;
    const logger = createLogger({ serviceName: 'test', logLevel: 'SILENT' });
    const metrics = new QueueBoxMetrics({ namespace: 'QueueBox', serviceName: 'test', write: () => {} });
    const summary = await runRelayPass({ config: db.config, driver, logger, metrics, deadline: createDeadline(context, 1000), mode: 'drain' });
    assert.deepEqual(forwarded, [rows[0]!.id], 'the pass deadline passed after the first forward');
    assert.deepEqual(
      { claimed: summary.claimed, forwarded: summary.forwarded, released: summary.released, abandoned: summary.abandoned, outOfTime: summary.outOfTime },
      { claimed: 3, forwarded: 1, released: 2, abandoned: 0, outOfTime: 0 },
    );
    const now = await db.query<{ id: string; state: string; attempt: number }>(`SELECT id, state, attempt FROM ${inbox} ORDER BY sequence`);
    assert.deepEqual(
      now.map((r) => [r.state, r.attempt]),
      [
        ['processed', 0],
        ['pending', 0],
        ['pending', 0],
      ],
      'rows 2 and 3 are back to pending at once, no attempt spent: no reclaim can make them dead',
    );
    await base.close?.();
  });
});
