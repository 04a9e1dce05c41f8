/**
 * An application's own Lambda handler that imports queuebox and enqueues in its own `pg`
 * transaction (docs/deploy.md, "Your own functions that import queuebox"): the source the
 * packed-package and serverless-esbuild tests bundle as a user's service would.
 */
export const ENQUEUE_HANDLER_TS = `import pg from 'pg';
import { enqueue } from 'queuebox';

const pool = new pg.Pool({ connectionString: process.env.APP_DATABASE_URL, max: 1 });
export const handler = async (event: { orderId: string }) => {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    const id = await enqueue(client, { topic: 'order.paid', key: event.orderId, payload: { orderId: event.orderId } }, { schema: process.env.APP_SCHEMA });
    await client.query('COMMIT');
    return { id };
  } catch (error) {
    await client.query('ROLLBACK');
    throw error;
  } finally {
    client.release();
  }
};
`;
