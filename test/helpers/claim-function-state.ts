/**
 * Claim-function state for tests of the verification: a container's first claim of a statement
 * sends it without verifying its function (`runClaimStatement`), so tests about what the
 * verification finds start from a driver that has sent each statement once.
 */
import type { PostgresDriver } from '../../lib/db/postgres/postgres-driver.ts';

/**
 * Marks each claim statement of `driver` as sent once, so that the next claim of each verifies its
 * function — as a container's second claim of a statement does. Returns the driver.
 */
export function sentOnce(driver: PostgresDriver): PostgresDriver {
  for (const statement of driver.claimStatements()) driver.ctx.claimFunctions!.sent.add(statement);
  return driver;
}
