/**
 * The worked example in a scheduled Lambda function (docs/pull-workers.md, run by
 * test/pull/docs-examples.test.ts): one pass per invocation, bounded by it.
 */
import type { Context } from 'aws-lambda';
import pg from 'pg';
import { loadConfig } from 'queuebox';
import { createOrderWorker, type PaymentGateway } from './pull-worker-example.ts';

// Once per container, outside the handler.
const config = loadConfig();
const pool = new pg.Pool({ connectionString: process.env.QUEUEBOX_DATABASE_URL, max: 2 });
// A connection the server ends while the container is frozen or idle (a failover, a proxy's idle
// timeout) is an 'error' event of the pool, which ends the process when nothing listens.
pool.on('error', (error) => console.warn('idle database connection lost:', error.message));
const gateway: PaymentGateway = { capture: async ({ idempotencyKey }) => ({ captureId: `cap-${idempotencyKey}` }) };
const worker = createOrderWorker({ pool, config, gateway });

export const handler = async (_event: unknown, context: Context) => worker.runOnce({ context });
