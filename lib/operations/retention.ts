/**
 * Retention (spec §7): delete finished rows by age, per table, in bounded batches.
 *
 * Policies: outbox `sent` and `dead` by `updated_at`, inbox `processed` and `dead` by
 * `created_at` (the driver owns the column choice). Only those states are ever named, so
 * `pending` and `processing` rows are never touched. Each policy deletes `retention.batchSize`
 * rows per statement and loops until a batch comes back short or the deadline passes.
 */
import type { QueueBoxConfig } from '../config/schema.ts';
import type { DeleteFinishedParams, Driver } from '../db/driver.ts';
import type { QueueBoxMetrics } from '../observability/metrics.ts';

/** One age policy: which table, which state, how old (hours). */
export interface RetentionPolicy {
  table: 'outbox' | 'inbox';
  state: DeleteFinishedParams['state'];
  olderThanHours: number;
}

export interface RetentionResult {
  /** Rows deleted per logical table. */
  deleted: { outbox: number; inbox: number };
  /** False when the deadline stopped the loop before every policy ran dry. */
  complete: boolean;
}

export interface RetentionOptions {
  driver: Driver;
  config: Pick<QueueBoxConfig, 'retention' | 'tables'>;
  /** Stops between batches once true (an invocation deadline). */
  expired?: () => boolean;
  /** Counts `queuebox_cleanup_messages_deleted_total{table}` (table = configured table name). */
  metrics?: QueueBoxMetrics;
  /** Called after every batch (CLI progress). */
  onBatch?: (policy: RetentionPolicy, deleted: number, totalForPolicy: number) => void;
}

/** The four age policies of the configuration, in the order they run. */
export function retentionPolicies(retention: QueueBoxConfig['retention']): RetentionPolicy[] {
  return [
    { table: 'outbox', state: 'sent', olderThanHours: retention.outboxSentAfterHours },
    { table: 'outbox', state: 'dead', olderThanHours: retention.outboxDeadAfterHours },
    { table: 'inbox', state: 'processed', olderThanHours: retention.inboxProcessedAfterHours },
    { table: 'inbox', state: 'dead', olderThanHours: retention.inboxDeadAfterHours },
  ];
}

/** Runs every policy once to exhaustion (or the deadline); does not check `retention.enabled`. */
export async function runRetention(options: RetentionOptions): Promise<RetentionResult> {
  const { driver, config } = options;
  const expired = options.expired ?? (() => false);
  const limit = config.retention.batchSize;
  const result: RetentionResult = { deleted: { outbox: 0, inbox: 0 }, complete: true };
  for (const policy of retentionPolicies(config.retention)) {
    const params: DeleteFinishedParams = { state: policy.state, olderThanMs: policy.olderThanHours * 3_600_000, limit };
    let total = 0;
    for (;;) {
      if (expired()) {
        result.complete = false;
        return result;
      }
      const deleted = policy.table === 'outbox' ? await driver.outboxDeleteFinished(params) : await driver.inboxDeleteFinished(params);
      total += deleted;
      result.deleted[policy.table] += deleted;
      options.metrics?.count('cleanupDeleted', deleted, { table: config.tables[policy.table] });
      options.onBatch?.(policy, deleted, total);
      if (deleted < limit) break;
    }
  }
  return result;
}
