/**
 * Every SQL Server statement the driver sends, built without a server from sentinel values, so
 * the shape tests can inspect text and parameters.
 */
import { buildFencedBatch, type FencedKind } from '../../lib/db/sqlserver/fenced-batch.ts';
import { buildInboxClaimPush } from '../../lib/db/sqlserver/inbox-claim.ts';
import { buildInboxReplay, buildInboxReplayBounded, buildInboxReplayPreview } from '../../lib/db/sqlserver/inbox-replay.ts';
import { buildInboxDeadList, buildInboxDeleteFinished, buildInboxInsert, buildInboxReclaim, buildOpenRelayedKeyProbe } from '../../lib/db/sqlserver/inbox-queries.ts';
import { buildGatedReclaim, buildGateGiveBack, buildGateOpens, buildPassListFinished, buildPassRecordFinished } from '../../lib/db/sqlserver/maintenance-queries.ts';
import type { MssqlStatement } from '../../lib/db/sqlserver/mssql-pool.ts';
import { mssqlNames } from '../../lib/db/sqlserver/names.ts';
import { buildOutboxClaim } from '../../lib/db/sqlserver/outbox-claim.ts';
import {
  buildOutboxDeadList,
  buildOutboxDeleteFinished,
  buildOutboxInsert,
  buildOutboxReclaim,
  buildOutboxReplay,
  buildOutboxReplayTopics,
} from '../../lib/db/sqlserver/outbox-queries.ts';
import { buildPullClaim, buildPullFenced } from '../../lib/db/sqlserver/pull-queries.ts';
import { buildOutboxReplayPreview } from '../../lib/db/sqlserver/replay-preview.ts';
import { buildCountDue, buildScaleOutAcquire, buildScaleOutRelease, buildScaleOutStart } from '../../lib/db/sqlserver/scale-out-queries.ts';
import { buildStats } from '../../lib/db/sqlserver/table-stats.ts';
import { loadMssql } from '../../lib/db/sqlserver/mssql-module.ts';

// The SQL Server modules reach `mssql` through mssql(); QueueBox loads it in importOptional, tests here.
await loadMssql();

export const names = mssqlNames('dbo', { outbox: 'outbox', inbox: 'inbox', maintenance: 'queuebox_maintenance' });

/** Values that must never appear in SQL text (they travel as parameters). */
export const SENTINELS = {
  id: '11111111-2222-4333-8444-555555555555',
  token: '66666666-7777-4888-8999-aaaaaaaaaaaa',
  topic: 'SENTINEL_TOPIC',
  key: 'SENTINEL_KEY',
  source: 'SENTINEL_SOURCE',
  idempotencyKey: 'SENTINEL_IDEMPOTENCY',
  aggregateId: 'SENTINEL_AGGREGATE',
  error: 'SENTINEL_ERROR',
  payload: 'SENTINEL_PAYLOAD',
  header: 'SENTINEL_HEADER',
  correlation: 'SENTINEL_CORRELATION',
  gate: 'SENTINEL_GATE',
  limit: 987,
  leaseMs: 45678,
  delayMs: 34567,
} as const;

const s = SENTINELS;
const claim = { id: s.id, token: s.token, delayMs: s.delayMs, error: s.error };
/** An inbox requeue filter with every field set. */
const inboxReplayFilter = {
  ids: [s.id],
  sources: [s.source],
  consumption: 'pull' as const,
  createdFrom: new Date(0),
  createdTo: new Date(),
  lastErrorPrefix: s.error,
  asRead: [{ id: s.id, updatedAtMs: 1_764_504_000_123 }],
};
const FENCED_KINDS: FencedKind[] = ['renew', 'sent', 'processed', 'retry', 'dead', 'release'];

/** Fenced statements by name. */
export function fencedStatements(): Record<string, MssqlStatement> {
  const out: Record<string, MssqlStatement> = {};
  for (const kind of FENCED_KINDS) {
    out[`outbox ${kind}`] = buildFencedBatch(names.outbox, kind, [claim, { ...claim, id: s.id }], { leaseMs: s.leaseMs });
    out[`inbox ${kind}`] = buildFencedBatch(names.inbox, kind, [claim], { leaseMs: s.leaseMs });
    out[`pull ${kind}`] = buildPullFenced(names, kind, claim, s.leaseMs);
  }
  return out;
}

/** Every statement by name. */
export function allStatements(): Record<string, MssqlStatement> {
  return {
    'outbox insert': buildOutboxInsert(names, { id: s.id, topic: s.topic, key: s.key, payload: { p: s.payload }, headers: { h: s.header }, delayMs: s.delayMs }, { maxAttempts: 5 }).statement,
    'outbox claim': buildOutboxClaim(names, { limit: s.limit, leaseMs: s.leaseMs }),
    'outbox reclaim': buildOutboxReclaim(names, 60_000),
    'outbox stats': buildStats(names.outbox),
    'outbox backlog stats': buildStats(names.outbox, '', { pendingOnly: true }),
    'gauge gate': buildGateOpens(names, 'gauges:outbox', 10_000),
    'gauge gate give back (new row)': buildGateGiveBack(names, 'gauges:outbox', { taken: '2026-12-05 10:00:00.1234567', previous: null }),
    'gauge gate give back': buildGateGiveBack(names, 'gauges:outbox', { taken: '2026-12-05 10:00:00.1234567', previous: '2026-12-05 09:59:50.7654321' }),
    'outbox dead list': buildOutboxDeadList(names, s.limit),
    'outbox replay topics': buildOutboxReplayTopics(names, ['dead']),
    'outbox replay': buildOutboxReplay(
      names,
      { ids: [s.id], topics: [s.topic], topicPatterns: ['orders.*'], createdFrom: new Date(0), createdTo: new Date(), states: ['dead'], asRead: [{ id: s.id, updatedAtMs: 1_764_504_000_123 }] },
      [s.topic],
    ),
    'outbox replay preview': buildOutboxReplayPreview(
      names,
      { ids: [s.id], topics: [s.topic], topicPatterns: ['orders.*'], createdFrom: new Date(0), createdTo: new Date(), states: ['dead'], asRead: [{ id: s.id, updatedAtMs: 1_764_504_000_123 }] },
      s.limit,
      [s.topic],
    ),
    'outbox delete finished': buildOutboxDeleteFinished(names, { state: 'sent', olderThanMs: 1000, limit: s.limit }),
    'inbox insert': buildInboxInsert(
      names,
      { source: s.source, idempotencyKey: s.idempotencyKey, aggregateId: s.aggregateId, payload: { p: s.payload }, headers: { h: s.header }, correlationId: s.correlation, consumption: 'push', deadReason: s.error },
      s.id,
    ),
    'inbox claim push': buildInboxClaimPush(names, { limit: s.limit, leaseMs: s.leaseMs }),
    'inbox forward open relayed key': buildOpenRelayedKeyProbe(names, { key: s.key, source: s.source }),
    'inbox reclaim': buildInboxReclaim(names, undefined, 5),
    'inbox stats': buildStats(names.inbox, ` AND consumption = N'push'`),
    'inbox dead list': buildInboxDeadList(names, s.limit),
    'inbox delete finished': buildInboxDeleteFinished(names, { state: 'processed', olderThanMs: 1000, limit: s.limit }),
    'inbox delete finished with a replay horizon': buildInboxDeleteFinished(names, { state: 'dead', olderThanMs: 1000, limit: s.limit, keep: { sources: [s.source], olderThanMs: 2000 } }),
    'inbox replay': buildInboxReplay(names, inboxReplayFilter),
    'inbox replay bounded': buildInboxReplayBounded(names, inboxReplayFilter, 100),
    'inbox replay preview': buildInboxReplayPreview(names, inboxReplayFilter, s.limit),
    'pull claim': buildPullClaim(names, { source: s.source, limit: s.limit, leaseMs: s.leaseMs }),
    'outbox renew': buildFencedBatch(names.outbox, 'renew', [claim], { leaseMs: s.leaseMs }),
    'pull renew': buildPullFenced(names, 'renew', claim, s.leaseMs),
    'reclaim gate': buildGatedReclaim(names, s.gate, 1000, 'SELECT 1;'),
    'pass record finished': buildPassRecordFinished(names, 'inboxRelay'),
    'pass list finished': buildPassListFinished(names),
    'outbox count due': buildCountDue(names.outbox, s.limit),
    'inbox count due': buildCountDue(names.inbox, s.limit, ` AND consumption = N'push'`),
    'scale-out acquire': buildScaleOutAcquire(names, { worker: 'outboxPoller', slots: 3, want: 2, leaseMs: s.leaseMs }),
    'scale-out start': buildScaleOutStart(names, { worker: 'outboxPoller', slot: { slot: 2, token: '1764504000123456' }, leaseMs: s.leaseMs }),
    'scale-out release': buildScaleOutRelease(names, { worker: 'inboxRelay', slot: { slot: 2, token: '1764504000123456' } }),
    ...fencedStatements(),
  };
}
