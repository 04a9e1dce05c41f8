/**
 * Whether the database ended a statement or batch as a deadlock victim (PostgreSQL 40P01, SQL
 * Server 1205): it was rolled back whole and wrote nothing, so the same work may be sent again.
 */
import { TransientDatabaseError } from '../errors.ts';

export function isDeadlockVictim(error: unknown): boolean {
  return error instanceof TransientDatabaseError && (error.code === '40P01' || error.code === '1205');
}

/** Attempts in all of a reclaim the database ended as a deadlock victim (`retryingDeadlockVictim`). */
export const DEADLOCK_ATTEMPTS = 3;

/**
 * Runs `work` again while the database ends it as a deadlock victim, up to `attempts` in all; any
 * other error, or the last attempt's, is thrown. For a pass's reclaim, which meets the pass's own
 * first claim (it runs beside it) and other passes' writes: the victim's work was rolled back (on
 * SQL Server the chunks committed before it stay, and the next attempt goes on from there).
 */
export async function retryingDeadlockVictim<T>(work: () => Promise<T>, attempts = DEADLOCK_ATTEMPTS): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await work();
    } catch (error) {
      if (!isDeadlockVictim(error) || attempt >= attempts) throw error;
    }
  }
}
