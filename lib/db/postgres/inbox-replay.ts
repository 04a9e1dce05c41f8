/**
 * PostgreSQL inbox requeue (driver methods `inboxReplay`, `inboxReplayPreview`): dead push and
 * pull rows back to `pending`.
 *
 * The preview and the move share one WHERE clause (`inboxReplayWhere`), so a preview counts
 * exactly the rows the move with the same filter would move at that moment. A requeued row keeps
 * its `id` and `sequence`: the relay and pull claims take the open row of lowest `sequence` of an
 * aggregate, so the row is its aggregate's head again and the aggregate's later open rows wait
 * for it. The move only makes rows `pending`; it never touches a `processing` row, so the
 * one-row-in-flight rule of an aggregate (and its unique index for push rows) is untouched.
 */
import type { InboxReplayFilter, InboxReplayPreviewRow } from '../driver.ts';
import { UsageError } from '../../errors.ts';
import type { PgContext } from './context.ts';
import { pgQuery } from './pg-pool.ts';
import { epochMs, epochTime, type EpochMs } from './epoch-time.ts';
import { asReadCondition, binder, lastErrorStartsWith, replayMove } from './replay-preview.ts';

/** The WHERE condition of an inbox requeue (dead rows only); throws `UsageError` on an empty filter. */
export function inboxReplayWhere(f: InboxReplayFilter, bind: (value: unknown) => string): string {
  const where: string[] = [];
  if (f.ids?.length) where.push(`id = ANY(${bind(f.ids)}::uuid[])`);
  if (f.sources?.length) where.push(`source = ANY(${bind(f.sources)}::text[])`);
  if (f.createdFrom) where.push(`created_at >= ${bind(f.createdFrom)}`);
  if (f.createdTo) where.push(`created_at < ${bind(f.createdTo)}`);
  if (f.lastErrorPrefix !== undefined) where.push(lastErrorStartsWith(f.lastErrorPrefix, bind));
  if (f.asRead !== undefined) where.push(asReadCondition(f.asRead, bind));
  if (where.length === 0) throw new UsageError('replay needs at least one filter (ids, sources, created range, last error)');
  if (f.consumption !== undefined) {
    if (f.consumption !== 'push' && f.consumption !== 'pull') throw new UsageError(`replay: consumption must be push or pull, not ${String(f.consumption)}`);
    where.push(`consumption = ${bind(f.consumption)}`);
  }
  return `state = 'dead' AND ${where.join(' AND ')}`;
}

const REQUEUE_SET = `SET state = 'pending', attempt = 0, scheduled_at = clock_timestamp(), last_error = NULL,
            claim_token = NULL, claimed_at = NULL, lease_expires_at = NULL, processed_at = NULL,
            updated_at = clock_timestamp()`;

/**
 * Moves the matching dead rows back to `pending`; returns how many moved. With `maxRows`, one
 * statement locks at most `maxRows + 1` matching rows and moves them only when there are no more
 * than `maxRows` (the UPDATE re-checks the filter on each locked row), else throws `ReplayLimitError`.
 */
export async function inboxReplay(ctx: PgContext, f: InboxReplayFilter): Promise<number> {
  const { values, bind } = binder();
  const where = inboxReplayWhere(f, bind);
  return replayMove(ctx, { table: ctx.names.inbox, set: REQUEUE_SET, where, values, bind, maxRows: f.maxRows });
}

export async function inboxReplayPreview(ctx: PgContext, p: { filter: InboxReplayFilter; limit: number }): Promise<{ count: number; sample: InboxReplayPreviewRow[] }> {
  const { values, bind } = binder();
  const where = inboxReplayWhere(p.filter, bind);
  const counted = await pgQuery<{ n: string }>(ctx.pool, `SELECT count(*) AS n FROM ${ctx.names.inbox} WHERE ${where}`, values);
  const limit = Math.max(0, Math.floor(p.limit));
  if (limit === 0) return { count: Number(counted.rows[0]!.n), sample: [] };
  const { rows } = await pgQuery<{ id: string; source: string; aggregate_id: string | null; consumption: 'push' | 'pull'; attempt: number; last_error: string | null; created_ms: EpochMs; updated_ms: EpochMs }>(
    ctx.pool,
    `SELECT id, source, aggregate_id, consumption, attempt, last_error, ${epochMs('created_at')} AS created_ms, ${epochMs('updated_at')} AS updated_ms
       FROM ${ctx.names.inbox} WHERE ${where}
      ORDER BY created_at, id LIMIT ${bind(limit)}`,
    values,
  );
  return {
    count: Number(counted.rows[0]!.n),
    sample: rows.map((r) => ({
      id: r.id,
      source: r.source,
      aggregateId: r.aggregate_id,
      consumption: r.consumption,
      state: 'dead',
      attempt: r.attempt,
      lastError: r.last_error,
      createdAt: epochTime(r.created_ms),
      updatedAt: epochTime(r.updated_ms),
    })),
  };
}
