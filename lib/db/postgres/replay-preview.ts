/**
 * PostgreSQL replay filter and preview (driver method `outboxReplayPreview`).
 *
 * The preview and the replay share one WHERE clause (`replayWhere`), so a preview counts exactly
 * the rows the replay with the same filter would move at that moment.
 */
import type { ReplayFilter, ReplayPreviewRow } from '../driver.ts';
import { ReplayLimitError, UsageError } from '../../errors.ts';
import { replayMaxRows } from '../replay-bound.ts';
import { topicPatternSource } from '../../config/topic-pattern.ts';
import type { PgContext } from './context.ts';
import { pgQuery } from './pg-pool.ts';
import { DATE_LIMIT_MS, epochMs, epochTime, type EpochMs } from './epoch-time.ts';

/**
 * The WHERE condition of a replay over `sent`/`dead` rows; pushes its values through `bind`.
 * Throws `UsageError` on an empty filter or a state other than `sent`/`dead`.
 */
export function replayWhere(f: ReplayFilter, bind: (value: unknown) => string): string {
  const where: string[] = [];
  if (f.ids?.length) where.push(`id = ANY(${bind(f.ids)}::uuid[])`);
  if (f.topics?.length) where.push(`topic = ANY(${bind(f.topics)}::text[])`);
  if (f.topicPatterns?.length) where.push(`topic ~ ANY(${bind(f.topicPatterns.map(topicPatternSource))}::text[])`);
  if (f.createdFrom) where.push(`created_at >= ${bind(f.createdFrom)}`);
  if (f.createdTo) where.push(`created_at < ${bind(f.createdTo)}`);
  if (f.lastErrorPrefix !== undefined) where.push(lastErrorStartsWith(f.lastErrorPrefix, bind));
  if (f.asRead !== undefined) where.push(asReadCondition(f.asRead, bind));
  if (where.length === 0) throw new UsageError('replay needs at least one filter (ids, topics, destination, created range, last error)');
  const states = f.states?.length ? f.states : ['sent', 'dead'];
  if (states.some((s) => s !== 'sent' && s !== 'dead')) throw new UsageError('replay moves only sent or dead rows');
  return `state = ANY(${bind(states)}::text[]) AND ${where.join(' AND ')}`;
}

/** `last_error` starts with `prefix` (exactly, case included); an empty prefix is refused. */
export function lastErrorStartsWith(prefix: string, bind: (value: unknown) => string): string {
  if (prefix === '') throw new UsageError('replay: lastErrorPrefix must not be empty');
  const p = bind(prefix);
  return `left(last_error, char_length(${p}::text)) = ${p}::text`;
}

/**
 * The `asRead` condition: each listed row only while its `updated_at` is the one read (a preview
 * reads it to the millisecond, rounded down: `epochMs`; date_trunc compares the same way). A time
 * read as JavaScript's first or last date (`epochTime` clamps to ±8.64e15 ms) was an `updated_at`
 * at or beyond it, which plain SQL may write: `-infinity` (every finite time PostgreSQL holds is
 * later than JavaScript's first date), or `infinity` or a finite time after year 275760 (PostgreSQL
 * holds years up to 294276), which are clamped on both sides alike.
 */
export function asReadCondition(asRead: NonNullable<ReplayFilter['asRead']>, bind: (value: unknown) => string): string {
  if (asRead.length === 0) throw new UsageError('replay: asRead lists no rows; nothing to move');
  const last = `('epoch'::timestamptz + ${DATE_LIMIT_MS} * interval '1 millisecond')`;
  return `(id, LEAST(date_trunc('milliseconds', updated_at), ${last})) IN (
         SELECT r.id, CASE WHEN r.ms >= ${DATE_LIMIT_MS} THEN ${last}
                           WHEN r.ms <= -${DATE_LIMIT_MS} THEN '-infinity'::timestamptz
                           ELSE 'epoch'::timestamptz + r.ms * interval '1 millisecond' END
           FROM unnest(${bind(asRead.map((r) => r.id))}::uuid[], ${bind(asRead.map((r) => Math.trunc(r.updatedAtMs)))}::bigint[]) AS r(id, ms))`;
}

/** A binder collecting values for `$n` placeholders. */
export function binder(): { values: unknown[]; bind: (value: unknown) => string } {
  const values: unknown[] = [];
  return {
    values,
    bind: (v) => {
      values.push(v);
      return `$${values.length}`;
    },
  };
}

export async function outboxReplayPreview(ctx: PgContext, p: { filter: ReplayFilter; limit: number }): Promise<{ count: number; sample: ReplayPreviewRow[] }> {
  const { values, bind } = binder();
  const where = replayWhere(p.filter, bind);
  const counted = await pgQuery<{ n: string }>(ctx.pool, `SELECT count(*) AS n FROM ${ctx.names.outbox} WHERE ${where}`, values);
  const limit = Math.max(0, Math.floor(p.limit));
  if (limit === 0) return { count: Number(counted.rows[0]!.n), sample: [] };
  const { rows } = await pgQuery<{ id: string; topic: string; key: string | null; state: 'sent' | 'dead'; attempt: number; last_error: string | null; created_ms: EpochMs; updated_ms: EpochMs }>(
    ctx.pool,
    `SELECT id, topic, key, state, attempt, last_error, ${epochMs('created_at')} AS created_ms, ${epochMs('updated_at')} AS updated_ms
       FROM ${ctx.names.outbox} WHERE ${where}
      ORDER BY created_at, id LIMIT ${bind(limit)}`,
    values,
  );
  return {
    count: Number(counted.rows[0]!.n),
    sample: rows.map((r) => ({ id: r.id, topic: r.topic, key: r.key, state: r.state, attempt: r.attempt, lastError: r.last_error, createdAt: epochTime(r.created_ms), updatedAt: epochTime(r.updated_ms) })),
  };
}

/**
 * Moves the rows of `table` matching `where` with `set`; returns how many moved. With `maxRows`,
 * one statement locks at most `maxRows + 1` matching rows and moves them only when there are no
 * more than `maxRows` (the UPDATE re-checks the filter on each locked row), else throws
 * `ReplayLimitError`. `where` and `values` come from one `binder()`, whose `bind` this uses too.
 */
export async function replayMove(
  ctx: PgContext,
  q: { table: string; set: string; where: string; values: unknown[]; bind: (value: unknown) => string; maxRows: number | undefined },
): Promise<number> {
  const { table: t, set, where, values, bind } = q;
  if (q.maxRows === undefined) {
    const { rowCount } = await pgQuery(ctx.pool, `UPDATE ${t} ${set} WHERE ${where}`, values);
    return rowCount ?? 0;
  }
  const max = replayMaxRows(q.maxRows);
  const { rows } = await pgQuery<{ matched: number; moved: number }>(
    ctx.pool,
    `WITH m AS (SELECT id FROM ${t} WHERE ${where} ORDER BY sequence LIMIT ${bind(max + 1)} FOR UPDATE),
          c AS (SELECT count(*)::int AS n FROM m),
          u AS (UPDATE ${t} ${set} WHERE id IN (SELECT id FROM m) AND (SELECT n FROM c) <= ${bind(max)} AND ${where} RETURNING 1)
     SELECT (SELECT n FROM c) AS matched, (SELECT count(*) FROM u)::int AS moved`,
    values,
  );
  const { matched, moved } = rows[0]!;
  if (matched > max) throw new ReplayLimitError(max);
  return moved;
}
