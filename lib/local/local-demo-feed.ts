/**
 * The demo application of `queuebox local`: it writes an order row and its outbox message in one
 * transaction, as an adopter's code would (`enqueue` with the caller's transaction).
 *
 * This file plays the application, so the SQL of its own business table lives here, not under
 * `lib/db/` (which holds QueueBox's SQL only). Keys cycle over five customers, so per-key order is
 * visible; every third message is a keyless notification.
 */
import pg from 'pg';
import { quoteIdent } from '../db/postgres/names.ts';
import { enqueue } from '../outbox/enqueue.ts';

/** One demo order as written: its business row id, customer, amount (cents) and feed index `n`. */
export interface DemoOrder {
  orderId: string;
  customer: string;
  amountCents: number;
  n: number;
}

export interface DemoFeedOptions {
  url: string;
  schema: string;
  outboxTable: string;
  maxAttempts: number;
}

/** Writes demo orders; `close()` ends its connection. */
export class DemoFeed {
  /** Messages enqueued so far. */
  fed = 0;
  readonly #pool: pg.Pool;
  readonly #options: DemoFeedOptions;
  readonly #table: string;

  constructor(options: DemoFeedOptions) {
    this.#options = options;
    this.#pool = new pg.Pool({ connectionString: options.url, max: 1, application_name: 'queuebox-demo' });
    this.#pool.on('error', () => {});
    this.#table = `${quoteIdent(options.schema)}.${quoteIdent('queuebox_demo_orders')}`;
  }

  /** Creates the demo business table when missing. */
  async prepare(): Promise<void> {
    await this.#pool.query(
      `CREATE TABLE IF NOT EXISTS ${this.#table} (id bigserial PRIMARY KEY, customer text NOT NULL, event text NOT NULL, amount_cents integer NOT NULL, created_at timestamptz NOT NULL DEFAULT now())`,
    );
  }

  /** Writes the next `count` messages, each in its own transaction with its business row; returns their orders. */
  async feed(count: number): Promise<DemoOrder[]> {
    const orders: DemoOrder[] = [];
    for (let n = 0; n < count; n++) {
      const i = this.fed;
      const customer = `customer-${i % 5}`;
      const topic = i % 3 === 2 ? 'customer.notified' : i % 2 === 0 ? 'orders.created' : 'orders.paid';
      const amountCents = 100 + ((i * 37) % 900);
      const client = await this.#pool.connect();
      try {
        await client.query('BEGIN');
        const { rows } = await client.query<{ id: string }>(`INSERT INTO ${this.#table} (customer, event, amount_cents) VALUES ($1, $2, $3) RETURNING id`, [
          customer,
          topic,
          amountCents,
        ]);
        await enqueue(
          client,
          { topic, key: topic === 'customer.notified' ? null : customer, payload: { orderId: rows[0]!.id, customer, n: i }, headers: { 'X-Correlation-Id': `demo-${i}` } },
          { schema: this.#options.schema, table: this.#options.outboxTable, maxAttempts: this.#options.maxAttempts },
        );
        await client.query('COMMIT');
        this.fed++;
        orders.push({ orderId: rows[0]!.id, customer, amountCents, n: i });
      } catch (error) {
        await client.query('ROLLBACK').catch(() => {});
        throw error;
      } finally {
        client.release();
      }
    }
    return orders;
  }

  async close(): Promise<void> {
    await this.#pool.end();
  }
}
