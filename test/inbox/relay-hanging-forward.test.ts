/**
 * A relay forward that never returns: each invocation's forward outlives the invocation, so its
 * lease ends with the call still open. The next reclaim counts that lease as a failed forward;
 * after `inbox.relay.maxAttempts` forwards the row is `dead` with a `last_error` that says so, and
 * its aggregate moves on. Two relays run each invocation, each with its own connection pool.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Driver } from '../../lib/db/driver.ts';
import { runRelayPass, type RelaySummary } from '../../lib/inbox/relay-pass.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import { createDeadline } from '../../lib/runtime/deadline.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { fakeLambdaContext } from '../helpers/lambda-context.ts';
import { createGate, waitUntil } from '../helpers/wait.ts';

/** Invocation length: the lease of every claim ends with it. */
const INVOCATION_MS = 2500;

describe('inbox relay: a forward that never returns', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({
      inbox: {
        relay: { batchSize: 5, claimTimeoutMs: 60_000, maxAttempts: 2, pollIntervalMs: 10 },
        sources: { shop: { type: 'http', path: '/shop', auth: { type: 'none' } } },
      },
    });
  });
  after(async () => db.drop());

  it('spends an attempt per invocation the forward outlives: after maxAttempts forwards the row is dead and its aggregate moves on', async () => {
    const inbox = `"${db.schema}".inbox`;
    const head = await db.driver.inboxInsert({ source: 'shop', idempotencyKey: 'a-1', aggregateId: 'A', eventType: 'created', payload: { n: 1 }, consumption: 'push' });
    const next = await db.driver.inboxInsert({ source: 'shop', idempotencyKey: 'a-2', aggregateId: 'A', eventType: 'created', payload: { n: 2 }, consumption: 'push' });
    const never = createGate();
    const forwards: string[] = [];
    /** A relay driver whose forward of the head never returns. */
    const hangingDriver = (): Driver => {
      const base = db.newDriver();
      const hangs = (ids: string[]) => {
        forwards.push(...ids);
        return ids.includes(head.id) ? never.wait() : Promise.resolve();
      };
      return Object.create(base, {
        inboxForwardMany: { value: async (...args: Parameters<NonNullable<Driver['inboxForwardMany']>>) => hangs(args[0].map((i) => i.id)).then(() => base.inboxForwardMany!(...args)) },
        inboxForward: { value: async (...args: Parameters<Driver['inboxForward']>) => hangs([args[0].id]).then(() => base.inboxForward(...args)) },
      }) as Driver;
    };
    const logger = createLogger({ serviceName: 'test', logLevel: 'SILENT' });
    const errors: string[] = [];
    logger.error = (message: Parameters<typeof logger.error>[0]) => void errors.push(typeof message === 'string' ? message : JSON.stringify(message));
    const metrics = new QueueBoxMetrics({ namespace: 'QueueBox', serviceName: 'test', write: () => {} });
    const summaries: RelaySummary[] = [];
    const invocation = async (): Promise<void> => {
      await db.query(`DELETE FROM "${db.schema}".queuebox_maintenance`);
      const passes = [1, 2].map(() =>
        runRelayPass({ config: db.config, driver: hangingDriver(), logger, metrics, deadline: createDeadline(fakeLambdaContext({ timeoutMs: INVOCATION_MS }), 0), mode: 'deadline' }),
      );
      summaries.push(...(await Promise.all(passes)));
      await waitUntil('no live lease is left', async () => (await db.query(`SELECT 1 FROM ${inbox} WHERE state = 'processing' AND lease_expires_at > clock_timestamp()`)).length === 0);
    };

    await invocation();
    await invocation();
    assert.deepEqual(forwards, [head.id, head.id], 'the head was forwarded twice; its aggregate waited');
    await invocation();
    assert.deepEqual(forwards, [head.id, head.id, next.id], 'never a third forward of the head; the next row of its aggregate went');
    const rows = await db.query<{ state: string; attempt: number; last_error: string | null }>(`SELECT state, attempt, last_error FROM ${inbox} ORDER BY sequence`);
    assert.deepEqual(rows, [
      { state: 'dead', attempt: 1, last_error: 'gave up after 2 of 2 attempts: the lease of the last one expired during the forward (the call did not finish within its lease)' },
      { state: 'processed', attempt: 0, last_error: null },
    ]);
    assert.equal(summaries.reduce((n, s) => n + s.reclaimed, 0), 1, 'one lost lease went back to pending, the second made the row dead');
    assert.equal(metrics.value('inboxMessages', { status: 'dead' }), 1);
    assert.ok(errors.includes('inbox rows dead: the lease of their last attempt expired during the forward'), errors.join('\n'));
  });
});
