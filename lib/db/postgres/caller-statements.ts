/**
 * PostgreSQL statements QueueBox writes inside a caller's transaction, as text with `$1…$n` and
 * the values to bind: `enqueue` through a `pg` client and through every `queuebox/<library>`
 * adapter sends this same text (an adapter only renames the placeholders for its library).
 *
 * Values are sent as text and cast in SQL (`$4::text::jsonb`), so a driver that picks a
 * parameter's encoding from the type the server infers (postgres.js) stores the JSON text as it
 * is, not as a JSON string.
 */
import type { OutboxMessageInput } from '../driver.ts';
import { outboxInsertValues } from '../outbox-insert-values.ts';
import { msInterval } from './context.ts';
import type { PgNames } from './names.ts';

/** One statement: text with `$n` placeholders and the values to bind. */
export interface PgStatement {
  text: string;
  values: unknown[];
}

/** The outbox INSERT of `enqueue`; `sequence` comes from the table's sequence, in insert order. */
export function pgOutboxInsertStatement(names: Pick<PgNames, 'outbox'>, m: OutboxMessageInput, defaults: { maxAttempts: number }): PgStatement {
  return {
    text: `INSERT INTO ${names.outbox} (id, topic, key, payload, headers, max_attempts, scheduled_at, trace_context)
     VALUES (COALESCE($1::text::uuid, pg_catalog.gen_random_uuid()), $2::text, $3::text, $4::text::jsonb, $5::text::jsonb, $6::integer,
             COALESCE($7::text::timestamptz, pg_catalog.clock_timestamp() + ${msInterval('$8')}), $9::text::jsonb)
     RETURNING id::text AS id`,
    values: outboxInsertValues(m, defaults),
  };
}
