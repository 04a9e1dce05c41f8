/**
 * QueueBox's public API for applications: `import { enqueue } from 'queuebox'`.
 */
export { enqueue, type EnqueueOptions } from './outbox/enqueue.ts';
export { loadConfig, parseConfig, type LoadConfigOptions } from './config/load-config.ts';
export type { QueueBoxConfig, ConfigInput } from './config/schema.ts';
export { createDriver } from './db/create-driver.ts';
export type { Driver, EnqueueMessage, OutboxMessageInput, InboxMessageInput, InboxRow, OutboxRow, ClaimRef, CallerTransaction } from './db/driver.ts';
export type { PgTransactionClient, MssqlTransactionHandle, CallerExecutor, CallerExecutorResult } from './db/caller-transaction.ts';
export * from './errors.ts';
export { createPullClient, type PullClient, type PullClientOptions, type PullClaimOptions, type PullMessage, type PullOutcome } from './pull/pull-client.ts';
export { createPullWorker, PULL_SHUTDOWN_TIMEOUT_MS, type PullWorker, type PullWorkerOptions, type PullRunOnceOptions } from './pull/pull-worker.ts';
export type { PullHandler, PullHandlerContext, PullRetryPolicy, PullLogger } from './pull/handle-pull-message.ts';
export type { PullRunSummary } from './pull/pull-run.ts';
export { pgTransactionRunner, type PullTransactionOptions, type TransactionRunner } from './pull/transaction-runner.ts';
export { OwnershipLostError } from './pull/ownership-lost-error.ts';
export { QueueBoxMetrics, type MetricsOptions, type Dimensions } from './observability/metrics.ts';
export { METRICS, METRIC_NAMES, type MetricKey, type MetricName } from './observability/metric-names.ts';
export { createDeadline, type Deadline, type RemainingTime } from './runtime/deadline.ts';
export { PULL_METRICS_FLUSH_MS } from './pull/pull-worker.ts';
