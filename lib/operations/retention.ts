/**
 * Retention (spec §7): delete finished rows by age, per table, in bounded batches.
 *
 * Policies: outbox `sent` and `dead` by `updated_at`, inbox `processed` and `dead` by
 * `created_at` (the driver owns the column choice). Only those states are ever named, so
 * `pending` and `processing` rows are never touched. Each policy deletes `retention.batchSize`
 * rows per statement and loops until a batch comes back short or the deadline passes.
 *
 * Replay horizon: an inbox row's key is what answers a replay of its request with `duplicate`. On
 * sources whose sender signs no timestamp (GitHub) nothing else refuses an old capture, so their
 * rows are kept at least `retention.inboxReplayHorizonHours`. Signed-timestamp sources (hmac,
 * stripe) need no horizon: a capture older than `toleranceSeconds` (at most 900 s, below the
 * shortest retention age of 1 hour) is refused before its key is looked at.
 */
import type { QueueBoxConfig } from '../config/schema.ts';
import type { DeleteFinishedParams, Driver } from '../db/driver.ts';
import type { QueueBoxMetrics } from '../observability/metrics.ts';
import { UsageError } from '../errors.ts';
import { scheduledFunctionEvent, unknownKeys } from './scheduled-function-event.ts';

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
  config: Pick<QueueBoxConfig, 'retention' | 'tables'> & Partial<Pick<QueueBoxConfig, 'inbox'>>;
  /**
   * Stops between batches once true (an invocation deadline); a batch that fails once it is true
   * (cancelled by the statement budget at the deadline) ends the run as incomplete.
   */
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

/** The sources whose inbox rows are kept for the replay horizon: those whose sender signs no timestamp (`github`). */
export function replayHorizonSources(inbox: Pick<QueueBoxConfig['inbox'], 'sources'> | undefined): string[] {
  return Object.entries(inbox?.sources ?? {})
    .filter(([, source]) => source.auth?.type === 'github')
    .map(([name]) => name)
    .sort();
}

const RETENTION_USAGE =
  'the retention event is {} (or none, or the schedule\'s event): it deletes by the configured ages alone ' +
  '(retention.outboxSentAfterHours, outboxDeadAfterHours, inboxProcessedAfterHours, inboxDeadAfterHours, set in the configuration file or by QUEUEBOX_RETENTION__* overrides)';

/**
 * Checks the retention function's event: the schedule's, `{}` or none. It takes no options, so
 * any other key is refused naming it (`dryRun`, `force`, an age) rather than ignored by a run
 * that deletes by the configured ages all the same.
 */
export function parseRetentionEvent(event: unknown): void {
  const keys = Object.keys(scheduledFunctionEvent('retention', event, RETENTION_USAGE).options);
  if (keys.length === 0) return;
  const hints = [
    ...(keys.includes('dryRun') ? ['retention has no dry run, here or in the CLI (`queuebox cleanup`)'] : []),
    ...(keys.includes('force') ? ['to delete while retention.enabled is false, run `queuebox cleanup --force`'] : []),
  ];
  throw new UsageError(`retention: ${unknownKeys(keys)}: ${[...hints, RETENTION_USAGE].join('; ')}`);
}

/** Runs every policy once to exhaustion (or the deadline); does not check `retention.enabled`. */
export async function runRetention(options: RetentionOptions): Promise<RetentionResult> {
  const { driver, config } = options;
  const expired = options.expired ?? (() => false);
  const limit = config.retention.batchSize;
  const result: RetentionResult = { deleted: { outbox: 0, inbox: 0 }, complete: true };
  const kept = replayHorizonSources(config.inbox);
  const keep = kept.length === 0 ? undefined : { sources: kept, olderThanMs: config.retention.inboxReplayHorizonHours * 3_600_000 };
  for (const policy of retentionPolicies(config.retention)) {
    const params: DeleteFinishedParams = { state: policy.state, olderThanMs: policy.olderThanHours * 3_600_000, limit, ...(policy.table === 'inbox' && keep ? { keep } : {}) };
    let total = 0;
    for (;;) {
      if (expired()) {
        result.complete = false;
        return result;
      }
      let deleted: number;
      try {
        deleted = policy.table === 'outbox' ? await driver.outboxDeleteFinished(params) : await driver.inboxDeleteFinished(params);
      } catch (error) {
        // A batch the deadline cut short (its statement cancelled, or not sent) deleted nothing:
        // the run is incomplete, not failed. Any other error is the run's.
        if (!expired()) throw error;
        result.complete = false;
        return result;
      }
      total += deleted;
      result.deleted[policy.table] += deleted;
      options.metrics?.count('cleanupDeleted', deleted, { table: config.tables[policy.table] });
      options.onBatch?.(policy, deleted, total);
      if (deleted < limit) break;
    }
  }
  return result;
}
