/**
 * SQL Server inbox requeue (driver methods `inboxReplay`, `inboxReplayPreview`): dead push and
 * pull rows back to `pending`, as statement builders plus runners.
 *
 * The preview and the move share one set of conditions (`inboxReplayConditions`). A requeued row
 * keeps its `id` and `[sequence]`, so it is its aggregate's head again (the claims take the open
 * row of lowest `[sequence]`); only `pending` rows are made, never a `processing` one. The unbounded
 * move runs in autocommitted chunks in `[sequence]` order, as the outbox replay does (one UPDATE of
 * thousands of rows would escalate to a table lock that blocks every receipt); the bounded move is
 * one transaction under update locks held to its end.
 */
import { mssql } from './mssql-module.ts';
import type { InboxReplayFilter, InboxReplayPreviewRow } from '../driver.ts';
import { ReplayLimitError, UsageError } from '../../errors.ts';
import { replayMaxRows } from '../replay-bound.ts';
import { lowerUuid, param, runOnceOnly, runStatement, type MssqlParam, type MssqlRunner, type MssqlStatement } from './mssql-pool.ts';
import type { MssqlNames } from './names.ts';
import { boundedReplayText, chunkedReplayText, exactlyOneOf, replayCommonConditions, replaySeekHint, withHints } from './outbox-queries.ts';

/** The WHERE conditions and parameters of an inbox requeue (dead rows only); throws `UsageError` on an empty filter. */
export function inboxReplayConditions(f: InboxReplayFilter): { where: string[]; params: MssqlParam[] } {
  const where: string[] = [];
  const params: MssqlParam[] = [];
  if (f.ids?.length) {
    where.push(`id IN (SELECT value FROM OPENJSON(@p_ids) WITH (value UNIQUEIDENTIFIER '$'))`);
    params.push(param('p_ids', mssql().NVarChar(mssql().MAX), JSON.stringify(f.ids)));
  }
  if (f.sources?.length) {
    where.push(exactlyOneOf('source', 'p_sources'));
    params.push(param('p_sources', mssql().NVarChar(mssql().MAX), JSON.stringify(f.sources)));
  }
  replayCommonConditions(f, where, params);
  if (where.length === 0) throw new UsageError('replay needs at least one filter (ids, sources, created range, last error)');
  if (f.consumption !== undefined) {
    if (f.consumption !== 'push' && f.consumption !== 'pull') throw new UsageError(`replay: consumption must be push or pull, not ${String(f.consumption)}`);
    where.push('consumption = @p_consumption');
    params.push(param('p_consumption', mssql().NVarChar(10), f.consumption));
  }
  return { where: [`state = N'dead'`, ...where], params };
}

const REQUEUE_SET = `SET state = N'pending', attempt = 0, scheduled_at = SYSUTCDATETIME(), last_error = NULL,
         claim_token = NULL, claimed_at = NULL, lease_expires_at = NULL, processed_at = NULL,
         updated_at = SYSUTCDATETIME()`;

/** The unbounded requeue: chunks of `DELETE_CHUNK` rows in `[sequence]` order, each autocommitted. */
export function buildInboxReplay(names: MssqlNames, f: InboxReplayFilter): MssqlStatement {
  const { where, params } = inboxReplayConditions(f);
  return { text: chunkedReplayText(names.inbox, where, REQUEUE_SET, replaySeekHint(names.inboxTable, f)), params };
}

/** The bounded requeue in one transaction (`boundedReplayText`). */
export function buildInboxReplayBounded(names: MssqlNames, f: InboxReplayFilter, max: number): MssqlStatement {
  const { where, params } = inboxReplayConditions(f);
  return { text: boundedReplayText(names.inbox, where, REQUEUE_SET, replaySeekHint(names.inboxTable, f)), params: [...params, param('p_max', mssql().Int, max)] };
}

/** Moves the matching dead rows back to `pending`; returns how many moved (`ReplayLimitError` past `maxRows`). */
export async function inboxReplay(runner: MssqlRunner, names: MssqlNames, f: InboxReplayFilter): Promise<number> {
  if (f.maxRows !== undefined) {
    const max = replayMaxRows(f.maxRows);
    const { recordset } = await runStatement<{ matched: number; replayed: number }>(runner, runOnceOnly(buildInboxReplayBounded(names, f, max)));
    if (Number(recordset[0]?.matched ?? 0) > max) throw new ReplayLimitError(max);
    return Number(recordset[0]?.replayed ?? 0);
  }
  const { recordset } = await runStatement<{ replayed: number }>(runner, runOnceOnly(buildInboxReplay(names, f)));
  return Number(recordset[0]?.replayed ?? 0);
}

/** The count and sample statement of an inbox requeue preview. */
export function buildInboxReplayPreview(names: MssqlNames, f: InboxReplayFilter, limit: number): MssqlStatement {
  const { where, params } = inboxReplayConditions(f);
  params.push(param('p_limit', mssql().Int, Math.max(0, Math.floor(limit))));
  const condition = where.join('\n   AND ');
  const table = `${names.inbox}${withHints(replaySeekHint(names.inboxTable, f))}`;
  return {
    text: `SELECT COUNT_BIG(*) AS n FROM ${table} WHERE ${condition};
SELECT TOP (@p_limit) id, source, aggregate_id, consumption, attempt, last_error, created_at, updated_at FROM ${table}
 WHERE ${condition}
 ORDER BY created_at, id;`,
    params,
  };
}

export async function inboxReplayPreview(runner: MssqlRunner, names: MssqlNames, p: { filter: InboxReplayFilter; limit: number }): Promise<{ count: number; sample: InboxReplayPreviewRow[] }> {
  const result = await runStatement<unknown>(runner, buildInboxReplayPreview(names, p.filter, p.limit));
  type Row = { id: string; source: string; aggregate_id: string | null; consumption: 'push' | 'pull'; attempt: number; last_error: string | null; created_at: Date; updated_at: Date };
  const sets = result.recordsets as unknown as [Array<{ n: string | number }>, Row[]];
  return {
    count: Number(sets[0][0]?.n ?? 0),
    sample: sets[1].map((r) => ({
      id: lowerUuid(r.id),
      source: r.source,
      aggregateId: r.aggregate_id,
      consumption: r.consumption,
      state: 'dead',
      attempt: r.attempt,
      lastError: r.last_error,
      createdAt: r.created_at,
      updatedAt: r.updated_at,
    })),
  };
}
