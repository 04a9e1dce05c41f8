/**
 * Worked example for docs/pull-workers.md (run by test/pull/example.test.ts): an order-processing
 * pull worker. It captures the payment at an outside gateway, deduplicated on (source,
 * idempotency_key), then writes its business row and completes the inbox row in one transaction.
 */
import type pg from 'pg';
import { createPullWorker, type PullWorker, type QueueBoxConfig } from 'queuebox';

/** The application's own table (not QueueBox's). */
export const ORDERS_PAID_DDL = `CREATE TABLE IF NOT EXISTS orders_paid (
  order_id text PRIMARY KEY,
  capture_id text NOT NULL,
  amount_cents integer NOT NULL
)`;

/** An outside service that deduplicates on the idempotency key it is given (most payment APIs do). */
export interface PaymentGateway {
  capture(request: { idempotencyKey: string; orderId: string; amountCents: number }, signal: AbortSignal): Promise<{ captureId: string }>;
}

interface OrderPlaced {
  orderId: string;
  amountCents: number;
}

export function createOrderWorker(options: { pool: pg.Pool; config: QueueBoxConfig; gateway: PaymentGateway }): PullWorker {
  return createPullWorker({
    pool: options.pool,
    config: options.config,
    source: 'orders',
    handler: async (message, { signal, transaction }) => {
      const order = message.payload as OrderPlaced;

      // Outside work runs outside the transaction and may run again (a retry, or a new owner after
      // a lost claim). The gateway deduplicates it on (source, idempotency_key).
      const { captureId } = await options.gateway.capture(
        { idempotencyKey: `${message.source}:${message.idempotencyKey}`, orderId: order.orderId, amountCents: order.amountCents },
        signal,
      );

      // The business row and the completion commit together. If this worker lost the claim, the
      // completion changes no row, the transaction rolls back and `transaction` throws
      // OwnershipLostError: the new owner writes the row instead.
      await transaction(async (tx) => {
        await tx.query('INSERT INTO orders_paid (order_id, capture_id, amount_cents) VALUES ($1, $2, $3)', [order.orderId, captureId, order.amountCents]);
      });
    },
  });
}
