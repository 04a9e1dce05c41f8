/**
 * The two ways an outbox claim reaches PostgreSQL — through the claim function `migrate` made for
 * the batch size, and as the statement itself — as test-database overrides, so a suite can run
 * under both. `functions`: whether the driver calls claim functions.
 */
export function outboxClaimPaths(batchSize: number) {
  return [
    { path: 'outbox claim functions', overrides: { outbox: { batchSize } }, functions: true },
    { path: 'statements', overrides: { database: { claimFunctions: false } }, functions: false },
  ] as const;
}
