/**
 * Whether the relay can forward a received push message: its event type must render a topic
 * (the relay's own `renderTopic`: a topic of only whitespace, such as an event type of spaces on a
 * `{{ eventType }}` template, renders none), and that topic and the outbox key its aggregate id
 * gives must fit the outbox's `topic` and `key` columns (255, as the dialect counts: code points
 * on PostgreSQL, UTF-16 code units on SQL Server). The receivers check this at receipt, so a
 * message the relay could never forward is refused (HTTP 400 `invalid_field`; SQS: stored `dead`
 * with the reason) instead of being accepted and going `dead` at the relay. Pull rows are never
 * relayed and are not checked. A template that needs an event type the message lacks altogether
 * is left to the relay, which marks the row `dead` with that reason.
 *
 * The relayed row's delivery headers carry the idempotency key (`x-idempotency-key`), the topic
 * (`X-Topic`), the outbox key (`X-Message-Key`) and the correlation id (`X-Correlation-Id`). An
 * SQS destination sends them as message attributes, and SQS refuses some characters in an
 * attribute value (U+0001–U+001F other than tab, line feed and carriage return; U+FFFE, U+FFFF):
 * a row holding one could never be delivered to a queue, so these fields are refused at
 * receipt too, by the destination's own test (`isValidSqsText`). The payload is not checked: SQS
 * refuses U+FFFE and U+FFFF in a body too, but other destinations take them, so such a row goes
 * `dead` at an SQS destination, with that destination's reason.
 */
import type { QueueBoxConfig, SourceConfig } from '../config/schema.ts';
import { columnLength, lengthUnit, type ColumnDialect } from '../db/column-length.ts';
import { isValidSqsText } from '../destinations/sqs-message-attributes.ts';
import { MAX_OUTBOX_KEY_LENGTH, MAX_TOPIC_LENGTH } from '../outbox/validate-message.ts';
import type { MessageFields } from './extract-fields.ts';
import { InboxRejectionError } from './inbox-rejection.ts';
import { relayOutboxKey } from './outbox-key.ts';
import { renderTopic } from './topic-template.ts';

/** Throws `InboxRejectionError('invalid_field')` when the relay could not forward the message of `fields`. */
export function checkRelayable(sourceName: string, source: SourceConfig, inbox: QueueBoxConfig['inbox'], fields: MessageFields, dialect: ColumnDialect): void {
  if (source.consumption === 'pull') return;
  checkAttributeText('idempotency key', fields.idempotencyKey, 'x-idempotency-key');
  // The aggregate id itself, not only the key of the current `outboxKey` form: a row may take the
  // key of the other form, which holds the aggregate id as sent (`forwardItemOf`).
  checkAttributeText('aggregate id', fields.aggregateId, 'X-Message-Key');
  checkAttributeText('correlation id', fields.correlationId, 'X-Correlation-Id');
  const template = source.topicTemplate ?? inbox.topicTemplate;
  const rendered = renderTopic(template, { source: sourceName, eventType: fields.eventType });
  if ('error' in rendered) {
    if (rendered.cause !== 'missing') throw new InboxRejectionError('invalid_field', `event type gives no topic: ${rendered.error}`);
  } else {
    // The topic, not the event type: an event type the template does not use is never sent.
    checkAttributeText('event type', rendered.topic, 'X-Topic', 'gives a topic that contains');
    const length = columnLength(rendered.topic, dialect);
    if (length > MAX_TOPIC_LENGTH) {
      throw new InboxRejectionError(
        'invalid_field',
        `event type is too long for its topic: "${template}" renders a topic of ${length} ${lengthUnit(dialect)}, and a topic is at most ${MAX_TOPIC_LENGTH}`,
      );
    }
  }
  const key = relayOutboxKey(sourceName, fields.aggregateId, inbox.relay.outboxKey);
  if (key !== null) {
    const length = columnLength(key, dialect);
    if (length > MAX_OUTBOX_KEY_LENGTH) {
      throw new InboxRejectionError('invalid_field', `aggregate id is too long for the outbox key: the key would be ${length} ${lengthUnit(dialect)}, and a key is at most ${MAX_OUTBOX_KEY_LENGTH}`);
    }
  }
}

/**
 * Throws `InboxRejectionError('invalid_field')` naming `what`, the first character SQS refuses in a
 * message attribute value and the `attribute` the relayed row sends `value` as, when it has one.
 */
function checkAttributeText(what: string, value: string | null, attribute: string, contains = 'contains'): void {
  if (value === null || isValidSqsText(value)) return;
  const refused = [...value].find((character) => !isValidSqsText(character))!;
  const codePoint = `U+${refused.codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')}`;
  throw new InboxRejectionError('invalid_field', `${what} ${contains} ${codePoint}, which SQS does not accept in a message attribute value (the relayed message carries it as ${attribute})`);
}
