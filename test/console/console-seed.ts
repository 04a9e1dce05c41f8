/**
 * Rows planted for the console's tests and screenshots: three stuck key heads (a poison row, an
 * expired lease, a retry backing off), dead rows with hostile text and secrets, and some traffic.
 * The poison head carries a trace context; the first dead `invoices.sent` row a hostile, invalid one.
 */
import type { TestDatabase } from '../helpers/database.ts';

/** Ids and names the tests assert on. */
export interface ConsoleSeed {
  poisonHead: string;
  expiredHead: string;
  retryHead: string;
  deadOrders: string[];
  deadOther: string[];
  deadInbox: string;
}

/** A secret value in a payload: the console must never show it. */
export const PLANTED_SECRET = 'sk_live_planted_secret_value';

/** The trace context the poison head was written with (its trace id starts with the epoch seconds, as X-Ray's do). */
export const PLANTED_TRACE = { traceparent: '00-6a17c3f0e3a1b2c4d5e6f708192a3b4c-5d6e7f8091a2b3c4-01', tracestate: 'congo=t61rcWkgMzE' };

export async function seedConsoleRows(db: TestDatabase): Promise<ConsoleSeed> {
  const o = `"${db.schema}"."${db.config.tables.outbox}"`;
  const i = `"${db.schema}"."${db.config.tables.inbox}"`;
  const insert = async (values: string, params: unknown[] = []) =>
    (await db.query<{ id: string }>(`INSERT INTO ${o} (topic, key, payload, state, attempt, max_attempts, scheduled_at, claimed_at, claim_token, lease_expires_at, last_error, updated_at, created_at)
       VALUES ${values} RETURNING id`, params)).map((r) => r.id);
  const [poisonHead] = await insert(
    `('orders.paid', 'order-poison', '{"orderId":"order-poison"}', 'pending', 4, 5, clock_timestamp() - interval '5 seconds', NULL, NULL, NULL,
      'destination rejected the message: 400 InvalidParameterValue', clock_timestamp(), clock_timestamp() - interval '20 minutes')`,
  );
  await insert(`('orders.shipped', 'order-poison', '{"orderId":"order-poison"}', 'pending', 0, 5, clock_timestamp(), NULL, NULL, NULL, NULL, clock_timestamp(), clock_timestamp())`);
  const [expiredHead] = await insert(
    `('orders.paid', 'order-lease', '{"orderId":"order-lease"}', 'processing', 0, 5, clock_timestamp() - interval '10 minutes', clock_timestamp() - interval '6 minutes',
      gen_random_uuid(), clock_timestamp() - interval '1 minute', NULL, clock_timestamp() - interval '6 minutes', clock_timestamp() - interval '10 minutes')`,
  );
  for (let n = 0; n < 2; n++) {
    await insert(`('orders.shipped', 'order-lease', '{"orderId":"order-lease"}', 'pending', 0, 5, clock_timestamp(), NULL, NULL, NULL, NULL, clock_timestamp(), clock_timestamp())`);
  }
  const [retryHead] = await insert(
    `('orders.paid', 'order-retry', '{"orderId":"order-retry"}', 'pending', 1, 5, clock_timestamp() + interval '4 minutes', NULL, NULL, NULL,
      'ThrottlingException: Rate exceeded', clock_timestamp(), clock_timestamp() - interval '1 minute')`,
  );
  await insert(`('orders.shipped', 'order-retry', '{"orderId":"order-retry"}', 'pending', 0, 5, clock_timestamp(), NULL, NULL, NULL, NULL, clock_timestamp(), clock_timestamp())`);
  const deadOrders = await insert(
    [1, 2, 3]
      .map(
        (n) => `('orders.failed', 'order-dead-${n}', $1::jsonb, 'dead', 5, 5, clock_timestamp(), NULL, NULL, NULL, $2,
      clock_timestamp() - interval '${n} minutes', clock_timestamp() - interval '${n} hours')`,
      )
      .join(', '),
    [
      JSON.stringify({ orderId: 'order-dead', apiKey: PLANTED_SECRET, note: '<script>window.__xss = 1</script>' }),
      `gave up after 5 of 5 attempts: Error: <img src=x onerror="window.__xss=2"> connecting to postgres://app:${PLANTED_SECRET}@db:5432/app`,
    ],
  );
  const deadOther = await insert(
    `('invoices.sent', NULL, '{"invoice":1}', 'dead', 5, 5, clock_timestamp(), NULL, NULL, NULL, 'HTTP 500', clock_timestamp() - interval '30 seconds', clock_timestamp() - interval '1 hour'),
     ('invoices.sent', NULL, '{"invoice":2}', 'dead', 5, 5, clock_timestamp(), NULL, NULL, NULL, 'HTTP 500', clock_timestamp() - interval '40 seconds', clock_timestamp() - interval '1 hour')`,
  );
  await insert(
    Array.from({ length: 12 }, (_, n) => `('orders.created', 'order-${n}', '{"ok":true}', 'sent', 0, 5, clock_timestamp(), NULL, NULL, NULL, NULL, clock_timestamp() - interval '${n * 4} minutes', clock_timestamp() - interval '1 hour')`).join(', '),
  );
  await db.query(`UPDATE ${o} SET trace_context = $2::jsonb WHERE id = $1`, [poisonHead, JSON.stringify(PLANTED_TRACE)]);
  await db.query(`UPDATE ${o} SET trace_context = $2::jsonb WHERE id = $1`, [deadOther[0], JSON.stringify({ traceparent: '<script>window.__xss = 3</script>' })]);
  const [deadInbox] = (
    await db.query<{ id: string }>(
      `INSERT INTO ${i} (source, idempotency_key, aggregate_id, event_type, payload, state, attempt, last_error)
       VALUES ('payments', 'evt-1', 'order-9', 'charge.failed', '{"type":"charge.failed","signature":"t=1,v1=abc"}', 'dead', 3, 'relay gave up: no route for topic') RETURNING id`,
    )
  ).map((r) => r.id);
  return { poisonHead: poisonHead!, expiredHead: expiredHead!, retryHead: retryHead!, deadOrders, deadOther, deadInbox: deadInbox! };
}
