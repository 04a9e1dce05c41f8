/**
 * SQL Server replay preview (driver method `outboxReplayPreview`): counts the rows `outboxReplay`
 * would move with the same filter and returns the oldest of them, changing nothing.
 *
 * SQL Server has no regex: topic patterns are matched in the caller over the distinct topics of
 * replayable rows, as `outboxReplay` does.
 */
import { mssql } from './mssql-module.ts';
import type { ReplayFilter, ReplayPreviewRow } from '../driver.ts';
import { lowerUuid, param, runStatement, type MssqlRunner, type MssqlStatement } from './mssql-pool.ts';
import type { MssqlNames } from './names.ts';
import { replayConditions, replayMatchedTopics, replaySeekHint, withHints } from './outbox-queries.ts';

/** The count and sample statement; `matchedTopics` are the topics the route patterns matched. */
export function buildOutboxReplayPreview(names: MssqlNames, f: ReplayFilter, limit: number, matchedTopics?: string[]): MssqlStatement {
  const { where, params } = replayConditions(f, matchedTopics);
  params.push(param('p_limit', mssql().Int, Math.max(0, Math.floor(limit))));
  const condition = where.join('\n   AND ');
  // Rows listed by id are read by a seek each, not by a scan of the outbox.
  const table = `${names.outbox}${withHints(replaySeekHint(names.outboxTable, f))}`;
  return {
    text: `SELECT COUNT_BIG(*) AS n FROM ${table} WHERE ${condition};
SELECT TOP (@p_limit) id, topic, [key], state, attempt, last_error, created_at, updated_at FROM ${table}
 WHERE ${condition}
 ORDER BY created_at, id;`,
    params,
  };
}

export async function outboxReplayPreview(runner: MssqlRunner, names: MssqlNames, p: { filter: ReplayFilter; limit: number }): Promise<{ count: number; sample: ReplayPreviewRow[] }> {
  const f = p.filter;
  const matched = await replayMatchedTopics(runner, names, f);
  const statement = buildOutboxReplayPreview(names, f, p.limit, matched);
  const result = await runStatement<unknown>(runner, statement);
  const sets = result.recordsets as unknown as [Array<{ n: string | number }>, Array<{ id: string; topic: string; key: string | null; state: 'sent' | 'dead'; attempt: number; last_error: string | null; created_at: Date; updated_at: Date }>];
  return {
    count: Number(sets[0][0]?.n ?? 0),
    sample: sets[1].map((r) => ({ id: lowerUuid(r.id), topic: r.topic, key: r.key, state: r.state, attempt: r.attempt, lastError: r.last_error, createdAt: r.created_at, updatedAt: r.updated_at })),
  };
}
