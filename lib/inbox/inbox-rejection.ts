/**
 * Why a receiver refused a message: a bounded reason (the `reason` dimension of
 * `queuebox_inbox_rejections_total`), the HTTP status it answers with, and a clear message.
 */
import { QueueBoxError } from '../errors.ts';

/** Every rejection reason; the metric dimension never takes another value. */
export type RejectionReason =
  | 'unknown_source'
  | 'method_not_allowed'
  | 'body_too_large'
  | 'unauthorized'
  | 'invalid_json'
  | 'missing_idempotency_key'
  | 'invalid_field'
  /** SQS only: a key of the form the receiver gives records it stores dead (`rejected:…`). */
  | 'reserved_idempotency_key';

/** HTTP status of each reason (spec §5; docs/inbox.md lists the same table). */
export const REJECTION_STATUS: Readonly<Record<RejectionReason, number>> = {
  unknown_source: 404,
  method_not_allowed: 405,
  body_too_large: 413,
  unauthorized: 401,
  invalid_json: 400,
  missing_idempotency_key: 400,
  invalid_field: 400,
  // Never answered: the HTTP receiver stores nothing on refusal, so it reserves no key.
  reserved_idempotency_key: 400,
};

/** A message refused at receipt; nothing is stored for it (HTTP) or it is stored `dead` (SQS). */
export class InboxRejectionError extends QueueBoxError {
  override readonly name = 'InboxRejectionError';
  constructor(
    readonly reason: RejectionReason,
    message: string,
  ) {
    super(message);
  }

  /** The HTTP status this rejection answers with. */
  get status(): number {
    return REJECTION_STATUS[this.reason];
  }
}
