/**
 * Every metric QueueBox emits, with its unit and the dimensions it may carry.
 *
 * This list is the contract between the code, the dashboard and alarms (`infra/`) and the metric
 * reference (`docs/metrics.md`); tests keep the three in agreement. Dimension values are bounded
 * by configuration (statuses, components, destination names, source names, table names), never by message data.
 */
export const METRICS = {
  outboxMessages: { name: 'queuebox_outbox_messages_total', unit: 'Count', dimensions: ['status'], help: 'Outbox rows settled, by status: sent, dead, retried.' },
  outboxReclaimed: { name: 'queuebox_outbox_messages_reclaimed_total', unit: 'Count', dimensions: [], help: 'Outbox rows returned from processing to pending by the reclaim step.' },
  claimsLost: { name: 'queuebox_claims_lost_total', unit: 'Count', dimensions: ['component'], help: 'Fenced writes that changed no row (component: outbox, inbox, pull): work outlived its lease.' },
  outboxPending: { name: 'queuebox_outbox_messages_pending', unit: 'Count', dimensions: [], help: 'Outbox rows in state pending at the end of a pass (read at most every 10 s in all: one of the passes that end within 10 s counts).' },
  outboxOldestPendingAge: { name: 'queuebox_outbox_oldest_pending_age_seconds', unit: 'Seconds', dimensions: [], help: 'Age of the oldest due pending outbox row at the end of a pass (read at most every 10 s in all: one of the passes that end within 10 s counts).' },
  outboxPublishDuration: {
    name: 'queuebox_outbox_publish_duration_seconds',
    unit: 'Seconds',
    dimensions: ['destination_type'],
    help: 'Duration of the slowest destination call of a pass (a call is one batch of up to 10 entries, answered or thrown), by destination type: one sample per pass and type it called, written at the end of the pass (Maximum over a period: the slowest call in it). Calls the pass stopped waiting for are not timed.',
  },
  outboxDestinationMessages: { name: 'queuebox_outbox_destination_messages_total', unit: 'Count', dimensions: ['destination', 'outcome'], help: 'Entries a destination answered while the pass waited, by destination name and outcome: sent, retryable, permanent. A call answered after the pass stopped waiting for it is not counted (its rows stay processing until the reclaim).' },
  outboxFailedMessages: {
    name: 'queuebox_outbox_failed_messages_total',
    unit: 'Count',
    dimensions: ['destination', 'status'],
    help: 'Outbox rows settled retried or dead, by destination name (`(no route)` when no route matches the topic) and status: retried, dead.',
  },
  inboxMessages: {
    name: 'queuebox_inbox_messages_total',
    unit: 'Count',
    dimensions: ['status'],
    help: 'Inbox messages by status: new, duplicate, dead (at receipt: an SQS record stored dead, its reason in `queuebox_inbox_rejections_total`); forwarded, retried, dead (by the relay).',
  },
  inboxStoreFailures: {
    name: 'queuebox_inbox_store_failures_total',
    unit: 'Count',
    dimensions: [],
    help: 'Messages the inbox receivers could not store: the database refused the write or did not answer (an HTTP answer of 500 or 503; an SQS record left in its queue for redelivery), or an SQS record came from a queue no inbox source reads. Each is logged (`inbox store failed`, `no sqs inbox source for this queue`).',
  },
  inboxFailedMessages: {
    name: 'queuebox_inbox_failed_messages_total',
    unit: 'Count',
    dimensions: ['source', 'status'],
    help: 'Inbox rows the relay retried or dead-lettered, by source name (`(unknown source)` when the source is no longer in `inbox.sources`) and status: retried, dead. Rows a reclaim marks dead (the lease of their last forward expired) are not counted here, as the reclaim does not read their source; the reclaim (the reclaim step of a relay pass, or the reclaim function) counts them in `queuebox_inbox_messages_total` with status dead.',
  },
  inboxRejections: { name: 'queuebox_inbox_rejections_total', unit: 'Count', dimensions: ['reason'], help: 'Messages refused or dead-lettered at receipt, by reason.' },
  inboxOldestPendingAge: { name: 'queuebox_inbox_oldest_pending_age_seconds', unit: 'Seconds', dimensions: [], help: 'Age of the oldest due pending inbox push row (the relay\'s backlog; pull rows wait for your workers, and `queuebox status` ages them too) at the end of a relay pass (read at most every 10 s in all: one of the passes that end within 10 s counts).' },
  pullMessages: { name: 'queuebox_pull_messages_total', unit: 'Count', dimensions: ['status'], help: 'Pull rows settled by pull workers, by status: completed, retried, dead, released (claimed, never started, returned with no attempt spent).' },
  passesFinished: { name: 'queuebox_passes_finished_total', unit: 'Count', dimensions: ['function'], help: 'Passes that finished, by scheduled function (function: outboxPoller, inboxRelay, reclaim): one per invocation that returned. The heartbeat alarms fire when it stops.' },
  scaleOutPasses: {
    name: 'queuebox_scale_out_passes_total',
    unit: 'Count',
    dimensions: ['function', 'outcome'],
    help: 'Passes started by scale-out, by function (outboxPoller, inboxRelay) and outcome: started (the asynchronous invoke was accepted), failed (the invoke failed: logged, the pass goes on), duplicate (a start event delivered again or too late: that invocation ran no pass).',
  },
  cleanupDeleted: { name: 'queuebox_cleanup_messages_deleted_total', unit: 'Count', dimensions: ['table'], help: 'Rows deleted by retention, by table.' },
} as const;

export type MetricKey = keyof typeof METRICS;
export type MetricName = (typeof METRICS)[MetricKey]['name'];

/** All metric names, for docs and infra tests. */
export const METRIC_NAMES: readonly MetricName[] = Object.values(METRICS).map((m) => m.name);
