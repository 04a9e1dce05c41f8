/**
 * Reclaims on statistics that do not know the expired rows (autovacuum off, never analyzed), as
 * reclaim-stale-stats.test.ts, at a chunk's worth of rows and more. The chunks' joins were planned
 * from estimates of one row: an anti join compared every pair of a chunk's rows, the UPDATE's
 * probes sorted the chunk's ids again each, and the charge's probe scanned the lease index: one
 * chunk of 10,000 took 14-22 s, past a pass's deadline, so the relay reclaimed and forwarded
 * nothing, and the outbox reclaimed nothing, pass after pass. Results only, no timing: the pass has
 * 20 s, and a chunk now takes a fraction of a second.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { runOutboxPass } from '../../lib/outbox/outbox-pass.ts';
import { runRelayPass } from '../../lib/inbox/relay-pass.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import { createDeadline } from '../../lib/runtime/deadline.ts';
import { createInvocationContext } from '../../lib/runtime/invocation-context.ts';
import type { TestDatabase } from '../helpers/database.ts';
import { passFixture, withOutboxDatabase } from '../helpers/outbox-pass-fixture.ts';
import { RecordingDestination } from '../helpers/recording-destination.ts';

describe('expired leases on stale statistics, a chunk\'s worth and more', () => {
  let db: TestDatabase;
  withOutboxDatabase((d) => (db = d));
  const stale = (table: string) => db.query(`ALTER TABLE "${db.schema}".${table} SET (autovacuum_enabled = false)`);

  it('relay: one pass of 20 s reclaims 10,000 expired push rows and forwards them', { timeout: 120_000 }, async () => {
    await db.query(`DELETE FROM "${db.schema}".inbox`);
    await stale('inbox');
    await db.query(
      `INSERT INTO "${db.schema}".inbox (source, idempotency_key, aggregate_id, event_type, payload, consumption, state, claim_token, lease_expires_at, claimed_at)
       SELECT 'shop', 'i' || g, 'a' || g, 'created', '{}', 'push', 'processing', gen_random_uuid(), now() - interval '1 minute', now() - interval '2 minutes'
         FROM generate_series(1, 10000) g`,
    );
    const summary = await runRelayPass({
      config: db.config,
      driver: db.driver,
      logger: createLogger({ serviceName: 'queuebox', logLevel: 'SILENT' }),
      metrics: new QueueBoxMetrics({ namespace: 'QueueBoxTest', serviceName: 'queuebox-test', write: () => {} }),
      deadline: createDeadline(createInvocationContext({ timeoutMs: 20_000 }), 0),
      mode: 'drain',
    });
    assert.deepEqual([summary.reclaimed, summary.forwarded], [10000, 10000]);
  });

  it('outbox: one pass of 20 s reclaims 2,000 expired claims of 10 keyed rows each and sends them', { timeout: 120_000 }, async () => {
    await stale('outbox');
    await db.query(
      `INSERT INTO "${db.schema}".outbox (topic, key, payload, state, claim_token, lease_expires_at, claimed_at, key_first, sequence)
       SELECT 'orders', 'k' || g, '{}', 'processing', md5('t' || g)::uuid, now() - interval '1 minute', now() - interval '2 minutes', r = 1, g * 10 + r
         FROM generate_series(1, 2000) g CROSS JOIN generate_series(1, 10) r`,
    );
    const summary = await runOutboxPass(passFixture(db, { destinations: [new RecordingDestination()], mode: 'drain', timeoutMs: 20_000 }));
    assert.deepEqual([summary.reclaimRan, summary.reclaimed], [true, 20000]);
  });
});
