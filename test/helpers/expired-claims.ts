/**
 * Expired claims on a table whose statistics do not know them (reclaim-stale-*.test.ts): the table's
 * autovacuum (and its ANALYZE) off, then `processing` rows whose lease ended a minute ago, and a
 * relay pass in drain mode whose statements its deadline bounds.
 */
import { runRelayPass } from '../../lib/inbox/relay-pass.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import { createDeadline } from '../../lib/runtime/deadline.ts';
import { createInvocationContext } from '../../lib/runtime/invocation-context.ts';
import type { TestDatabase } from './database.ts';

/** Autovacuum (and its ANALYZE) off for `table`, so that the statistics stay as they were before the backlog. */
export function staleStatistics(db: TestDatabase, table: 'outbox' | 'inbox'): Promise<unknown> {
  return db.query(`ALTER TABLE "${db.schema}".${table} SET (autovacuum_enabled = false)`);
}

/** `claims` expired outbox claims of `rowsPerClaim` keyed rows each (key `k<n>`, one token per claim, the first row `key_first`). */
export function insertExpiredOutboxClaims(db: TestDatabase, claims: number, rowsPerClaim: number): Promise<unknown> {
  return db.query(
    `INSERT INTO "${db.schema}".outbox (topic, key, payload, state, claim_token, lease_expires_at, claimed_at, key_first, sequence)
     SELECT 'orders', 'k' || g, '{}', 'processing', md5('t' || g)::uuid, now() - interval '1 minute', now() - interval '2 minutes', r = 1, g * $2 + r
       FROM generate_series(1, $1::int) g CROSS JOIN generate_series(1, $2::int) r`,
    [claims, rowsPerClaim],
  );
}

/** `rows` expired push rows of source `shop`, each its own aggregate. */
export function insertExpiredPushRows(db: TestDatabase, rows: number): Promise<unknown> {
  return db.query(
    `INSERT INTO "${db.schema}".inbox (source, idempotency_key, aggregate_id, event_type, payload, consumption, state, claim_token, lease_expires_at, claimed_at)
     SELECT 'shop', 'i' || g, 'a' || g, 'created', '{}', 'push', 'processing', gen_random_uuid(), now() - interval '1 minute', now() - interval '2 minutes'
       FROM generate_series(1, $1::int) g`,
    [rows],
  );
}

/** A relay pass in drain mode with `timeoutMs` of invocation: its statements are bounded by its deadline. */
export function relayPassOf(db: TestDatabase, timeoutMs: number): ReturnType<typeof runRelayPass> {
  return runRelayPass({
    config: db.config,
    driver: db.driver,
    logger: createLogger({ serviceName: 'queuebox', logLevel: 'SILENT' }),
    metrics: new QueueBoxMetrics({ namespace: 'QueueBoxTest', serviceName: 'queuebox-test', write: () => {} }),
    deadline: createDeadline(createInvocationContext({ timeoutMs }), 0),
    mode: 'drain',
  });
}
