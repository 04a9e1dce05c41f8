/**
 * The two ways an outbox claim reaches PostgreSQL — through the claim function `migrate` made for
 * the batch size, and as the statement itself — as test-database overrides, so a suite can run
 * under both. `functions`: whether the driver calls claim functions. `rowsPerKey` is the
 * `outbox.rowsPerKey` of both (1 by default: the head of each key only).
 */
export function outboxClaimPaths(batchSize: number, rowsPerKey = 1) {
  return [
    { path: 'outbox claim functions', overrides: { outbox: { batchSize, rowsPerKey } }, functions: true },
    { path: 'statements', overrides: { database: { claimFunctions: false }, outbox: { rowsPerKey } }, functions: false },
  ] as const;
}
