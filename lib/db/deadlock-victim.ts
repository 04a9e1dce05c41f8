/**
 * Whether the database ended a statement or batch as a deadlock victim (PostgreSQL 40P01, SQL
 * Server 1205), or PostgreSQL ended it with a serialization failure (40001): it was rolled back
 * whole and wrote nothing, so the same work may be sent again. QueueBox's own transactions run at
 * READ COMMITTED (`pg-pool.ts`), where PostgreSQL raises none; a client of another kind
 * (`pg-native`), whose statements go without QueueBox's settings, may meet one under a role's or
 * database's default isolation.
 */
import { TransientDatabaseError } from '../errors.ts';

export function isDeadlockVictim(error: unknown): boolean {
  return error instanceof TransientDatabaseError && (error.code === '40P01' || error.code === '40001' || error.code === '1205');
}

/** Attempts in all of work the database ended as a deadlock victim (`retryingDeadlockVictim`). */
export const DEADLOCK_ATTEMPTS = 3;

/** A short random pause before the next attempt (5 ms plus up to 20 ms per attempt made), so two victims do not meet again at once. */
export const jitteredPause = (attempt: number): number => 5 + Math.floor(Math.random() * 20 * attempt);

/**
 * Runs `work` again while it fails with an error `retryable` accepts (by default a deadlock
 * victim: rolled back whole, nothing of it written), up to `DEADLOCK_ATTEMPTS` attempts in all,
 * after `pauseMs(attempt)` (none by default); any other error, or the last attempt's, is thrown.
 * Only for work that may run again: fenced writes (the fence decides again), a relay forward, an
 * inbox insert, a reclaim (on SQL Server a chunk that was the victim runs again inside its batch
 * first, `reclaimUpdateSql`; when the batch still fails, the chunks it committed stay, and the
 * next attempt goes on from there).
 */
export async function retryingDeadlockVictim<T>(
  work: () => Promise<T>,
  options: { retryable?: (error: unknown) => boolean; pauseMs?: (attempt: number) => number } = {},
): Promise<T> {
  const retryable = options.retryable ?? isDeadlockVictim;
  for (let attempt = 1; ; attempt++) {
    try {
      return await work();
    } catch (error) {
      if (attempt >= DEADLOCK_ATTEMPTS || !retryable(error)) throw error;
      const pause = options.pauseMs?.(attempt) ?? 0;
      if (pause > 0) await new Promise((resolve) => setTimeout(resolve, pause));
    }
  }
}
