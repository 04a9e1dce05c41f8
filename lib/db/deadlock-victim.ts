/**
 * Whether the database ended a statement or batch as a deadlock victim (PostgreSQL 40P01, SQL
 * Server 1205): it was rolled back whole and wrote nothing, so the same work may be sent again.
 */
import { TransientDatabaseError } from '../errors.ts';

export function isDeadlockVictim(error: unknown): boolean {
  return error instanceof TransientDatabaseError && (error.code === '40P01' || error.code === '1205');
}
