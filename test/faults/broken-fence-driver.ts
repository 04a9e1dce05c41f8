/**
 * A deliberately broken driver for proving the checker: its outbox mark-sent drops the claim
 * token and the lease from the fence (it keeps only `id` and `state = 'processing'`), so a frozen
 * owner that thaws after a reclaim marks a row `sent` that a newer owner holds. Test-only; the
 * production fence lives in lib/db/postgres/outbox-queries.ts and is untouched.
 */
import type { Driver } from '../../lib/db/driver.ts';
import type { PostgresDriver } from '../../lib/db/postgres/postgres-driver.ts';

/** `base` with an unfenced `outboxMarkSentMany`. */
export function brokenFenceDriver(base: PostgresDriver): Driver {
  const markSent: Driver['outboxMarkSentMany'] = async ({ claims }) => {
    if (claims.length === 0) return [];
    const { rows } = await base.pool.query<{ id: string }>(
      `UPDATE ${base.ctx.names.outbox} SET state = 'sent', updated_at = clock_timestamp(), lease_expires_at = NULL
        WHERE id = ANY($1::uuid[]) AND state = 'processing' RETURNING id`,
      [claims.map((c) => c.id)],
    );
    return rows.map((r) => r.id);
  };
  // Only the own (arrow-function) methods a pass calls are copied; migrate/close are not needed here.
  return { ...base, dialect: base.dialect, outboxMarkSentMany: markSent } as unknown as Driver;
}
