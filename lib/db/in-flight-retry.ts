/**
 * What both dialects' claims share when a unique index of in-flight rows refuses them, or the
 * database ends a claim as the victim of a deadlock over that index.
 */
import { UniqueViolationError } from '../errors.ts';
import { isDeadlockVictim } from './deadlock-victim.ts';

/** Attempts of a claim that met a row of a key or aggregate put in flight by a concurrent claim. */
const IN_FLIGHT_ATTEMPTS = 5;

/**
 * Runs a claim again when it would have put a second row of a key or aggregate in flight: a unique
 * index of in-flight rows (its name ends in `_in_flight_idx`) refused it, because a row the claim
 * could not see as in flight — on PostgreSQL a row of the key that committed late, still pending
 * in the claim's snapshot; on SQL Server a row whose in-flight state was being written when the
 * pick read it — was in flight beside it. The claim changed nothing (one statement on PostgreSQL;
 * a batch rolled back whole by `XACT_ABORT` on SQL Server); the next attempt sees the row in
 * flight and leaves the key alone, so the batch is claimed without it instead of failing.
 *
 * A deadlock victim is run again too (PostgreSQL 40P01, SQL Server 1205), as is a PostgreSQL
 * serialization failure (40001, `isDeadlockVictim`): the claim was rolled back whole and changed
 * nothing. On PostgreSQL it is the same meeting from both sides: two outbox
 * claims that each saw a different row of two keys as the head (each snapshot missing a row the
 * other saw commit late) each put one key in flight and wait on the other's uncommitted entry for
 * the other key in the in-flight index; the claim that runs again sees the other's rows in flight.
 * On SQL Server the claims of a table run one at a time under an application lock, so a 1205
 * there comes from a claim meeting another writer (a fenced write, the reclaim).
 */
export async function claimRetryingInFlight<T>(claim: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await claim();
    } catch (error) {
      const inFlight = error instanceof UniqueViolationError && (error.constraint ?? '').endsWith('_in_flight_idx');
      if (!(inFlight || isDeadlockVictim(error)) || attempt >= IN_FLIGHT_ATTEMPTS) throw error;
    }
  }
}
