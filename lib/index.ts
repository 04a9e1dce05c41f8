/**
 * QueueBox's public API for applications: `import { enqueue } from 'queuebox'`.
 */
export { enqueue, type EnqueueOptions } from './outbox/enqueue.ts';
export { loadConfig, parseConfig, type LoadConfigOptions } from './config/load-config.ts';
export type { QueueBoxConfig, ConfigInput } from './config/schema.ts';
export { createDriver } from './db/create-driver.ts';
export type { Driver, OutboxMessageInput, InboxMessageInput, InboxRow, OutboxRow, ClaimRef, CallerTransaction } from './db/driver.ts';
export * from './errors.ts';
