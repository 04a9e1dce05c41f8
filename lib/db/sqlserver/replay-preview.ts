/**
 * SQL Server replay preview (driver method `outboxReplayPreview`): counts the rows `outboxReplay`
 * would move with the same filter and returns the oldest of them, changing nothing.
 *
 * SQL Server has no regex: topic patterns are matched in the caller over the distinct topics of
 * replayable rows, as `outboxReplay` does.
 */
import sql from 'mssql';
import type { ReplayFilter, ReplayPreviewRow } from '../driver.ts';
import { UsageError } from '../../errors.ts';
import { topicPatternSource } from '../../config/topic-pattern.ts';
import { lowerUuid, param, runStatement, type MssqlParam, type MssqlRunner, type MssqlStatement } from './mssql-pool.ts';
import type { MssqlNames } from './names.ts';
import { buildOutboxReplayTopics } from './outbox-queries.ts';

/** The count and sample statement; `matchedTopics` are the topics the route patterns matched. */
export function buildOutboxReplayPreview(names: MssqlNames, f: ReplayFilter, limit: number, matchedTopics?: string[]): MssqlStatement {
  const states = f.states?.length ? f.states : ['sent', 'dead'];
  if (states.some((s) => s !== 'sent' && s !== 'dead')) throw new UsageError('replay moves only sent or dead rows');
  const where = [`state IN (SELECT value FROM OPENJSON(@p_states) WITH (value NVARCHAR(50) '$'))`];
  const params: MssqlParam[] = [param('p_states', sql.NVarChar(sql.MAX), JSON.stringify(states)), param('p_limit', sql.Int, Math.max(0, Math.floor(limit)))];
  if (f.ids?.length) {
    where.push(`id IN (SELECT value FROM OPENJSON(@p_ids) WITH (value UNIQUEIDENTIFIER '$'))`);
    params.push(param('p_ids', sql.NVarChar(sql.MAX), JSON.stringify(f.ids)));
  }
  if (f.topics?.length) {
    where.push(`topic IN (SELECT value FROM OPENJSON(@p_topics) WITH (value NVARCHAR(255) '$'))`);
    params.push(param('p_topics', sql.NVarChar(sql.MAX), JSON.stringify(f.topics)));
  }
  if (f.topicPatterns?.length) {
    where.push(`topic IN (SELECT value FROM OPENJSON(@p_matched_topics) WITH (value NVARCHAR(255) '$'))`);
    params.push(param('p_matched_topics', sql.NVarChar(sql.MAX), JSON.stringify(matchedTopics ?? [])));
  }
  if (f.createdFrom) {
    where.push('created_at >= @p_created_from');
    params.push(param('p_created_from', sql.DateTime2(7), f.createdFrom));
  }
  if (f.createdTo) {
    where.push('created_at < @p_created_to');
    params.push(param('p_created_to', sql.DateTime2(7), f.createdTo));
  }
  if (where.length === 1) throw new UsageError('replay needs at least one filter (ids, topics, destination, created range)');
  const condition = where.join('\n   AND ');
  return {
    text: `SELECT COUNT_BIG(*) AS n FROM ${names.outbox} WHERE ${condition};
SELECT TOP (@p_limit) id, topic, [key], state, attempt, last_error, created_at, updated_at FROM ${names.outbox}
 WHERE ${condition}
 ORDER BY created_at, id;`,
    params,
  };
}

export async function outboxReplayPreview(runner: MssqlRunner, names: MssqlNames, p: { filter: ReplayFilter; limit: number }): Promise<{ count: number; sample: ReplayPreviewRow[] }> {
  const f = p.filter;
  let matched: string[] | undefined;
  if (f.topicPatterns?.length) {
    const patterns = f.topicPatterns.map((pattern) => new RegExp(topicPatternSource(pattern), 'u'));
    const states = f.states?.length ? f.states : ['sent', 'dead'];
    const { recordset } = await runStatement<{ topic: string }>(runner, buildOutboxReplayTopics(names, states));
    matched = recordset.map((r) => r.topic).filter((topic) => patterns.some((pattern) => pattern.test(topic)));
  }
  const statement = buildOutboxReplayPreview(names, f, p.limit, matched);
  const result = await runStatement<unknown>(runner, statement);
  const sets = result.recordsets as unknown as [Array<{ n: string | number }>, Array<{ id: string; topic: string; key: string | null; state: 'sent' | 'dead'; attempt: number; last_error: string | null; created_at: Date; updated_at: Date }>];
  return {
    count: Number(sets[0][0]?.n ?? 0),
    sample: sets[1].map((r) => ({ id: lowerUuid(r.id), topic: r.topic, key: r.key, state: r.state, attempt: r.attempt, lastError: r.last_error, createdAt: r.created_at, updatedAt: r.updated_at })),
  };
}
