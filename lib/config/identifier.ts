/**
 * The SQL identifier rule, apart from the configuration schema: `enqueue` and the table names
 * check schema names with it, and an application that imports only `enqueue` (or a data-layer
 * entry point such as `queuebox/kysely`) should not bundle zod and the whole schema for one pattern.
 */

/** A SQL identifier QueueBox will quote and interpolate: lower-case letters, digits, underscores. */
export const IDENTIFIER_PATTERN = /^[a-z_][a-z0-9_]{0,62}$/;
