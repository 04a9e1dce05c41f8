/**
 * The worked example as a long-running process (docs/pull-workers.md, run by
 * test/pull/docs-examples.test.ts). Configuration: queuebox.yml from QUEUEBOX_CONFIG, the database
 * from QUEUEBOX_DATABASE_URL. SIGTERM stops it gracefully.
 */
import pg from 'pg';
import { loadConfig } from 'queuebox';
import { createOrderWorker, ORDERS_PAID_DDL, type PaymentGateway } from './pull-worker-example.ts';

const config = loadConfig();
const pool = new pg.Pool({ connectionString: process.env.QUEUEBOX_DATABASE_URL, max: 2 }); // concurrency + 1
await pool.query(ORDERS_PAID_DDL);
// Your payment API's client; this stand-in accepts every capture.
const gateway: PaymentGateway = { capture: async ({ idempotencyKey }) => ({ captureId: `cap-${idempotencyKey}` }) };

const worker = createOrderWorker({ pool, config, gateway });
await worker.start(); // resolves once its first claim answered: the database and the source are reachable
process.once('SIGTERM', () => {
  void worker.stop().then(() => pool.end());
});
