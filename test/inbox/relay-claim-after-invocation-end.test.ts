import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Driver } from '../../lib/db/driver.ts';
import { runRelayPass } from '../../lib/inbox/relay-pass.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import { createDeadline } from '../../lib/runtime/deadline.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { waitUntil } from '../helpers/wait.ts';

/**
 * A container frozen while the relay's claim is on its way resumes past its invocation's end: the
 * claim is not sent, and the pass ends with a summary of what it did instead of failing.
 */
describe('inbox relay pass: a claim reached after the invocation ended', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({
      inbox: { relay: { batchSize: 5, claimTimeoutMs: 60_000 }, sources: { shop: { type: 'http', path: '/shop', auth: { type: 'none' } } } },
      lambda: { deadlineMarginMs: 1000 },
    });
  });
  after(async () => db.drop());

  it('ends with its summary, not an error', { timeout: 60_000 }, async () => {
    for (let i = 0; i < 5; i++) await db.driver.inboxInsert({ source: 'shop', idempotencyKey: `k${i}`, eventType: 'created', payload: { i }, consumption: 'push' });
    const ends = Date.now() + 20_000;
    let frozenMs = 0;
    const context = { getRemainingTimeInMillis: () => ends - Date.now() - frozenMs };
    let claims = 0;
    const base = db.newDriver();
    const driver: Driver = Object.create(base, {
      inboxClaimPushMany: {
        value: async (p: Parameters<Driver['inboxClaimPushMany']>[0]) => {
          // The second claim passed the pass's checks after the first batch was forwarded; then the
          // container is frozen past its invocation's end.
          if (++claims === 2) {
            await waitUntil('the first batch is forwarded', async () => (await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".inbox WHERE state = 'processed'`))[0]!.n === 5);
            frozenMs = 60_000;
          }
          return base.inboxClaimPushMany(p);
        },
      },
    });
    const metrics = new QueueBoxMetrics({ namespace: 'QueueBox', serviceName: 'test', write: () => {} });
    const logger = createLogger({ serviceName: 'test', logLevel: 'SILENT' });
    const summary = await runRelayPass({ config: db.config, driver, logger, metrics, deadline: createDeadline(context, db.config.lambda.deadlineMarginMs), mode: 'drain' });
    assert.equal(claims, 2);
    assert.deepEqual({ claimed: summary.claimed, forwarded: summary.forwarded, abandoned: summary.abandoned }, { claimed: 5, forwarded: 5, abandoned: 0 });
  });
});
