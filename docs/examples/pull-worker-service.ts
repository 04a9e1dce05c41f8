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
// An idle pooled connection the server ends (a failover, a proxy's idle timeout) is reported as
// an 'error' event of the pool, which ends the process when nothing listens. The pool drops that
// connection and opens a new one when it needs it: nothing else to do.
pool.on('error', (error) => console.warn('idle database connection lost:', error.message));
await pool.query(ORDERS_PAID_DDL);
// Your payment API's client; this stand-in accepts every capture.
const gateway: PaymentGateway = { capture: async ({ idempotencyKey }) => ({ captureId: `cap-${idempotencyKey}` }) };

const worker = createOrderWorker({ pool, config, gateway });
await worker.start(); // resolves once its first claim answered: the database and the source are reachable
process.once('SIGTERM', () => {
  void worker.stop().then(() => pool.end());
});
