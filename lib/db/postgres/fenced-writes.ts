/**
 * The fenced batch writes that the outbox and the inbox tables share (same claim columns, same
 * fence). Each settles a whole batch in one statement via `unnest` of parallel arrays and returns
 * the ids it changed; a claim missing from the result was lost (seed: the claim fence).
 *
 * `table` is a quoted, qualified name from `PgNames`; it is aliased `t` in every statement.
 */
import type { ClaimRef, DeadItem, ReclaimResult, RetryItem } from '../driver.ts';
import { msInterval, type PgContext } from './context.ts';
import { reclaimGate } from './maintenance-queries.ts';
import { leaseWithinBudget } from '../statement-budget.ts';
import { pgQuery, type PgQueryable, type PgValues } from './pg-pool.ts';

/**
 * Where a lease granted or renewed by a statement starts: the start of the statement's
 * transaction, on the database clock (see `claimSet`). For a statement on its own that is its
 * arrival; `statement_timestamp()` would not do: a statement whose parse waits on a lock is
 * stamped when that wait ends.
 */
export const LEASE_START = 'transaction_timestamp()';

/**
 * The claim (seed: the claim): `processing`, a new random token per row, the lease from the
 * database clock, the claim time. `leaseParam` is the bind parameter holding the lease in ms.
 *
 * The lease runs from the start of the statement's transaction (`LEASE_START`, database clock),
 * not from the moment the row was updated: the caller sized it to the time left in its
 * invocation when it sent the statement, so a claim that waited on a lock does not get a lease
 * that outlives the invocation. (Only ever shorter than asked; the renewal restores it.)
 */
export function claimSet(leaseParam: string): string {
  return `state = 'processing',
            claim_token = gen_random_uuid(),
            claimed_at = clock_timestamp(),
            lease_expires_at = ${LEASE_START} + ${msInterval(leaseParam)},
            updated_at = clock_timestamp()`;
}

/** The fence every finishing write matches, besides the row id: still ours, lease not expired. */
export const FENCE = `t.state = 'processing' AND t.claim_token = s.token AND t.lease_expires_at > clock_timestamp()`;

async function returningIds(db: PgQueryable, text: string, values: PgValues): Promise<string[]> {
  const { rows } = await pgQuery<{ id: string }>(db, text, values);
  return rows.map((r) => r.id);
}

/** Renews the leases to `LEASE_START + leaseMs` (see `claimSet`). */
export async function fencedRenewMany(db: PgQueryable, table: string, claims: ClaimRef[], leaseMs: number): Promise<string[]> {
  if (claims.length === 0) return [];
  return returningIds(
    db,
    `UPDATE ${table} t
        SET lease_expires_at = ${LEASE_START} + ${msInterval('$3')}
       FROM unnest($1::uuid[], $2::uuid[]) AS s(id, token)
      WHERE t.id = s.id AND ${FENCE}
  RETURNING t.id`,
    () => [claims.map((c) => c.id), claims.map((c) => c.token), leaseWithinBudget(leaseMs)],
  );
}

/** Back to `pending` with `attempt + 1`, due `delayMs` after the database clock, claim cleared. */
export async function fencedRetryMany(db: PgQueryable, table: string, items: RetryItem[]): Promise<string[]> {
  if (items.length === 0) return [];
  return returningIds(
    db,
    `UPDATE ${table} t
        SET state = 'pending',
            attempt = t.attempt + 1,
            scheduled_at = clock_timestamp() + ${msInterval('s.delay_ms')},
            last_error = s.error,
            claim_token = NULL, lease_expires_at = NULL, claimed_at = NULL,
            updated_at = clock_timestamp()
       FROM unnest($1::uuid[], $2::uuid[], $3::double precision[], $4::text[]) AS s(id, token, delay_ms, error)
      WHERE t.id = s.id AND ${FENCE}
  RETURNING t.id`,
    [items.map((i) => i.id), items.map((i) => i.token), items.map((i) => i.delayMs), items.map((i) => i.error)],
  );
}

/** To `dead` with its reason. */
export async function fencedDeadMany(db: PgQueryable, table: string, items: DeadItem[]): Promise<string[]> {
  if (items.length === 0) return [];
  return returningIds(
    db,
    `UPDATE ${table} t
        SET state = 'dead', last_error = s.error, lease_expires_at = NULL, updated_at = clock_timestamp()
       FROM unnest($1::uuid[], $2::uuid[], $3::text[]) AS s(id, token, error)
      WHERE t.id = s.id AND ${FENCE}
  RETURNING t.id`,
    [items.map((i) => i.id), items.map((i) => i.token), items.map((i) => i.error)],
  );
}

/**
 * Returns expired `processing` rows to `pending` (attempt unchanged) when the shared gate
 * `gateName` opens: always without `throttleMs`, else at most once per `throttleMs`.
 * `extraCondition` narrows the rows (e.g. push rows only), written against alias `t`.
 */
export async function reclaimExpired(ctx: PgContext, table: string, gateName: string, throttleMs: number | undefined, extraCondition = 'TRUE'): Promise<ReclaimResult> {
  const gate = reclaimGate(ctx, gateName, throttleMs, 1);
  const { rows } = await pgQuery<{ ran: boolean; reclaimed: string }>(
    ctx.pool,
    `WITH ${gate.cte},
     moved AS (
       UPDATE ${table} t
          SET state = 'pending', claim_token = NULL, lease_expires_at = NULL, claimed_at = NULL,
              updated_at = clock_timestamp()
        WHERE t.state = 'processing' AND t.lease_expires_at <= clock_timestamp() AND (${extraCondition})
          AND EXISTS (SELECT 1 FROM gate)
    RETURNING 1)
     SELECT EXISTS (SELECT 1 FROM gate) AS ran, (SELECT count(*) FROM moved) AS reclaimed`,
    gate.values,
  );
  return { ran: rows[0]!.ran, reclaimed: Number(rows[0]!.reclaimed) };
}
